"""Audio in chat (`input_audio` parts) against the scripted fake llama.cpp: the exact /completion body (one
marker per clip and image, their base64 in the order of the parts), and the refusals, each naming the part,
before anything is generated."""

from __future__ import annotations

import base64

import pytest

from ..fake_llamacpp import FakeLlamaCpp
from ..unit.conftest import make_app
from ..unit.test_media import png
from .test_transcription import mp3_of, wav_of

MARKER = "<__media_0123456789abcdefghijABCDEFGHIJ__>"
SHORT, LONG, TUNE, RED = wav_of(0.5), wav_of(1.25), mp3_of(20), png(2, 2)


def audio_part(data: bytes, audio_format: str = "wav") -> dict:
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": audio_format}}


def image_part(data: bytes) -> dict:
    return {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(data).decode()}}


@pytest.fixture(scope="module")
def hearing():
    fake = FakeLlamaCpp(props_extra={"modalities": {"vision": True, "audio": True}, "media_marker": MARKER}).start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def deaf():
    fake = FakeLlamaCpp(props_extra={"modalities": {"vision": True}, "media_marker": MARKER}).start()
    yield fake
    fake.stop()


def chat(upstream, *parts, stream: bool = False):
    app = make_app("--llama-api", upstream.url, "--chat-prompt-model", "chatml", "--image-tokens", "16")
    content = [{"type": "text", "text": "Listen"}, *parts]
    return app.test_client().post(
        "/v1/chat/completions", json={"messages": [{"role": "user", "content": content}], "max_tokens": 5, "stream": stream}
    )


def sent_prompt(fake: FakeLlamaCpp) -> dict:
    return [body for body in fake.requests if "n_predict" in body][-1]["prompt"]


@pytest.mark.parametrize("stream", [False, True])
def test_clips_and_an_image_go_upstream_with_one_marker_each_in_order(hearing, stream):
    answer = chat(hearing, audio_part(LONG), image_part(RED), audio_part(TUNE, "mp3"), audio_part(SHORT), stream=stream)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    prompt = sent_prompt(hearing)
    assert prompt["prompt_string"] == f"<|im_start|>user\nListen{MARKER * 4}<|im_end|>\n<|im_start|>assistant\n"
    assert [base64.b64decode(data) for data in prompt["multimodal_data"]] == [LONG, RED, TUNE, SHORT]


def test_marker_text_beside_audio_is_neutralised(hearing):
    answer = chat(hearing, {"type": "text", "text": f" not {MARKER} this"}, audio_part(SHORT))
    assert answer.status_code == 200
    prompt = sent_prompt(hearing)
    assert prompt["prompt_string"].count(MARKER) == 1 and len(prompt["multimodal_data"]) == 1


@pytest.mark.parametrize(
    ("part", "param", "code", "words"),
    [
        (
            audio_part(b"OggS" + bytes(64), "ogg"),
            "messages.0.content.1.input_audio.data",
            "unsupported_format",
            "audio format ogg is not accepted",
        ),
        (
            audio_part(b"RIFF\x04\x00\x00\x00WAVE"),
            "messages.0.content.1.input_audio.data",
            "invalid_audio",
            "the wav file is corrupt",
        ),
        (
            {"type": "input_audio", "input_audio": {"data": "%%%", "format": "wav"}},
            "messages.0.content.1.input_audio.data",
            "invalid_audio",
            "the audio is not valid base64",
        ),
        (
            {"type": "input_audio", "input_audio": {"format": "wav"}},
            "messages.0.content.1.input_audio.data",
            "invalid_audio",
            "needs input_audio.data",
        ),
        (audio_part(wav_of(1501, rate=1000)), "messages.0.content.1", "audio_too_long", "the limit is 1500"),
    ],
)
def test_bad_audio_is_a_400_naming_the_part(hearing, part, param, code, words):
    sent = len(hearing.requests)
    answer = chat(hearing, part)
    error = answer.get_json()["error"]
    assert (answer.status_code, error["param"], error["code"]) == (400, param, code), error
    assert words in error["message"]
    assert len([body for body in hearing.requests[sent:] if "n_predict" in body]) == 0


def test_audio_to_a_model_that_does_not_hear_is_a_400_naming_the_part(deaf):
    answer = chat(deaf, image_part(RED), audio_part(SHORT))
    error = answer.get_json()["error"]
    assert (answer.status_code, error["param"], error["code"]) == (400, "messages.0.content.2", "audio_not_supported")
    assert not [body for body in deaf.requests if "n_predict" in body]


def test_the_responses_api_takes_audio_as_this_servers_extension(hearing):
    app = make_app("--llama-api", hearing.url, "--chat-prompt-model", "chatml", "--image-tokens", "16")
    clip = {"type": "input_audio", "input_audio": {"data": base64.b64encode(SHORT).decode(), "format": "wav"}}
    answer = app.test_client().post(
        "/v1/responses",
        json={"max_output_tokens": 5, "input": [{"role": "user", "content": [{"type": "input_text", "text": "Listen"}, clip]}]},
    )
    assert answer.status_code == 200, answer.get_data(as_text=True)
    prompt = sent_prompt(hearing)
    assert prompt["prompt_string"].count(MARKER) == 1
    assert [base64.b64decode(data) for data in prompt["multimodal_data"]] == [SHORT]
