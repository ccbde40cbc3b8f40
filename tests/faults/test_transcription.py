"""Speech to text through the proxy (`/v1/audio/transcriptions`, `/translations`), in front of a fake
llama-server whose `/v1/audio/transcriptions` answers as the pinned one does (tools/server: the form
converted into a chat request, `response_format` json only, `transcript.text.done` with token usage, or a
stream of `transcript.text.delta` events then the done event and `[DONE]`): every response format, the
OpenAI SDK streamed and not, the checks made before anything is sent, a key's models and usage."""

from __future__ import annotations

import email.parser
import json
import re

import openai
import pytest
import requests

from ..audio_clips import wav_of
from ..conftest import openai_client
from ..fake_llamacpp import FakeLlamaCpp

ADMIN = {"Authorization": "Bearer audio-admin-secret"}
WORDS = ["Hello", " from", " the", " tape", "."]


def mp3_of(frames: int) -> bytes:
    """Constant-rate MPEG-1 layer III frames (128 kbit/s, 44.1 kHz: 417 bytes, 1152 samples each)."""
    return (b"\xff\xfb\x90\x64" + bytes(413)) * frames


def flac_of(seconds: float, rate: int = 16000) -> bytes:
    """A FLAC header: STREAMINFO with the sample rate and total samples (no frames: the fake reads none)."""
    packed = (rate << 44) | (0 << 41) | (15 << 36) | int(seconds * rate)
    return b"fLaC" + b"\x80\x00\x00\x22" + bytes(10) + packed.to_bytes(8, "big") + bytes(16)


def form_of(handler, raw: bytes) -> tuple[dict, bytes]:
    message = email.parser.BytesParser().parsebytes(f"Content-Type: {handler.headers['Content-Type']}\r\n\r\n".encode() + raw)
    fields, file = {}, b""
    for part in message.get_payload():
        name = part.get_param("name", header="content-disposition")
        if name == "file":
            file = part.get_payload(decode=True)
        else:
            fields[name] = part.get_payload(decode=True).decode()
    return fields, file


def llama_transcribe(handler, raw: bytes) -> None:
    """llama-server's transcription endpoint, its text the words WORDS (the prompt it was given after)."""
    fields, file = form_of(handler, raw)
    handler.fake.requests.append({"fields": fields, "file": file})
    if fields.get("response_format", "json") != "json":
        return handler._json(
            400,
            {
                "error": {
                    "code": 400,
                    "type": "invalid_request_error",
                    "message": "Only 'json' response_format is supported for transcription",
                }
            },
        )
    usage = {
        "type": "tokens",
        "input_tokens": 40,
        "output_tokens": len(WORDS),
        "total_tokens": 40 + len(WORDS),
        "input_tokens_details": {"cached_tokens": 0},
    }
    done = {"type": "transcript.text.done", "text": "".join(WORDS), "usage": usage}
    if fields.get("stream") != "true":
        return handler._json(200, done)
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    for word in WORDS:
        handler._chunk(f"data: {json.dumps({'type': 'transcript.text.delta', 'delta': word})}\n\n".encode())
    handler._chunk(f"data: {json.dumps(done)}\n\n".encode())
    handler._chunk(b"data: [DONE]\n\n")
    handler._end()


def speak(handler, raw: bytes) -> None:
    """A TTS server's /v1/audio/speech: the request's input back as "audio" bytes."""
    body = json.loads(raw)
    handler.fake.requests.append(body)
    handler._raw(200, b"ID3-fake-mp3:" + body["input"].encode(), "audio/mpeg")


@pytest.fixture(scope="module")
def hearing():
    upstream = FakeLlamaCpp(
        routes={"/v1/audio/transcriptions": llama_transcribe, "/v1/audio/speech": speak},
        props_extra={"modalities": {"vision": False, "audio": True}},
    ).start()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def deaf():
    upstream = FakeLlamaCpp(routes={"/v1/audio/transcriptions": llama_transcribe}).start()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def proxy(hearing, deaf, start_proxy, tmp_path_factory):
    folder = tmp_path_factory.mktemp("audio")
    config = folder / "config.yaml"
    config.write_text(
        f"store: sqlite:///{folder}/store.sqlite3\nadmin_key: [{ADMIN['Authorization'].split()[1]}]\n"
        "max_audio_seconds: 60\n"
        f"models:\n  ears:\n    upstreams: [{hearing.url}]\n    chat_prompt_model: chatml\n"
        f"  text-only:\n    upstreams: [{deaf.url}]\n    chat_prompt_model: chatml\n"
        f"  remote:\n    kind: openai\n    upstreams: [{hearing.url}/v1]\n    upstream_model: whisper-1\n"
    )
    return start_proxy("--config", str(config))


@pytest.fixture(scope="module")
def client(proxy):
    return openai_client(proxy.url, api_key=ADMIN["Authorization"].split()[1])


def post(proxy, path: str, file: bytes | None, headers: dict = ADMIN, **fields) -> requests.Response:
    files = {"file": ("speech.wav", file, "audio/wav")} if file is not None else None
    return requests.post(proxy.url + path, data={"model": "ears", **fields}, files=files, headers=headers, timeout=30)


def test_the_sdk_reads_json_and_llama_server_is_asked_for_json(client, hearing):
    audio = wav_of(2.5)
    transcript = client.audio.transcriptions.create(
        model="ears", file=("speech.wav", audio, "audio/wav"), language="en", prompt="A talk.", temperature=0.2
    )
    assert transcript.text == "Hello from the tape."
    assert transcript.usage.input_tokens == 40 and transcript.usage.output_tokens == 5
    sent = hearing.requests[-1]
    assert sent["file"] == audio
    assert sent["fields"] == {
        "response_format": "json",
        "stream": "false",
        "prompt": "A talk.",
        "language": "en",
        "temperature": "0.2",
    }


@pytest.mark.parametrize(
    ("response_format", "expected"),
    [
        ("text", "Hello from the tape.\n"),
        ("srt", "1\n00:00:00,000 --> 00:00:50,000\nHello from the tape.\n\n"),
        ("vtt", "WEBVTT\n\n00:00:00.000 --> 00:00:50.000\nHello from the tape.\n\n"),
    ],
)
def test_text_formats_are_written_from_llama_servers_text(client, response_format, expected):
    """One cue over the whole file, whose length its header says (a flac of 50 s here)."""
    answer = client.audio.transcriptions.create(
        model="ears", file=("speech.flac", flac_of(50.0), "audio/flac"), response_format=response_format
    )
    assert answer == expected


def test_verbose_json_is_one_segment_over_the_whole_file(proxy):
    answer = post(proxy, "/v1/audio/transcriptions", wav_of(3.0), response_format="verbose_json", language="de")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert {key: body[key] for key in ("task", "language", "duration", "text", "segments")} == {
        "task": "transcribe",
        "language": "de",
        "duration": 3.0,
        "text": "Hello from the tape.",
        "segments": [{"id": 0, "seek": 0, "start": 0.0, "end": 3.0, "text": "Hello from the tape."}],
    }


def test_the_sdk_streams_the_deltas_and_the_done_event(client, proxy):
    stream = client.audio.transcriptions.create(model="ears", file=("speech.mp3", mp3_of(40), "audio/mpeg"), stream=True)
    events = list(stream)
    assert [event.delta for event in events if event.type == "transcript.text.delta"] == WORDS
    assert [(event.type, event.text, event.usage.output_tokens) for event in events[-1:]] == [
        ("transcript.text.done", "Hello from the tape.", 5)
    ]


def test_a_translation_asks_for_english(client, hearing):
    translated = client.audio.translations.create(
        model="ears", file=("speech.wav", wav_of(1.0), "audio/wav"), prompt="Names: Zoë."
    )
    assert translated.text == "Hello from the tape."
    assert hearing.requests[-1]["fields"]["prompt"] == "Translate the speech into English text. Names: Zoë."


@pytest.mark.parametrize(
    ("file", "fields", "status", "words"),
    [
        (b"OggS" + bytes(200), {}, 400, "audio format ogg is not accepted"),
        (b"RIFF\x24\x00\x00\x00WAVEjunk", {}, 400, "the wav file is corrupt"),
        (b"just some text", {}, 400, "send wav, mp3 or flac"),
        (wav_of(61.0, rate=8000), {}, 400, "the limit is 60"),
        (None, {}, 400, "send the audio as multipart/form-data, with the file in `file`"),
        (wav_of(0.5), {"response_format": "csv"}, 400, "response_format"),
        (wav_of(0.5), {"timestamp_granularities[]": "word"}, 400, "word timestamps cannot be given"),
        (wav_of(0.5), {"stream": "true", "response_format": "srt"}, 400, "cannot be streamed"),
        (wav_of(0.5), {"model": "text-only"}, 400, "cannot transcribe audio"),
    ],
)
def test_bad_input_is_refused_before_anything_is_sent(proxy, hearing, deaf, file, fields, status, words):
    sent = len(hearing.requests) + len(deaf.requests)
    answer = post(proxy, "/v1/audio/transcriptions", file, **fields)
    assert answer.status_code == status and words in answer.json()["error"]["message"], answer.text
    assert len(hearing.requests) + len(deaf.requests) == sent


def test_a_file_over_25_mb_is_a_413_before_anything_is_sent(proxy, hearing):
    sent = len(hearing.requests)
    answer = post(proxy, "/v1/audio/transcriptions", wav_of(0.1) + bytes(30 * 1024 * 1024))
    assert answer.status_code == 413, answer.text
    assert "error" in answer.json()
    assert len(hearing.requests) == sent


def test_a_key_without_the_model_gets_a_404_and_a_transcriptions_tokens_are_its_usage(proxy):
    created = requests.post(
        proxy.url + "/v1/internal/keys", json={"name": "listener", "models": ["ears"]}, headers=ADMIN, timeout=10
    )
    assert created.status_code == 201, created.text
    key = {"Authorization": f"Bearer {created.json()['key']}"}
    assert post(proxy, "/v1/audio/transcriptions", wav_of(0.5), key, model="text-only").status_code == 404
    assert post(proxy, "/v1/audio/transcriptions", wav_of(0.5), key).status_code == 200
    usage = requests.get(proxy.url + "/v1/internal/usage", headers=key, params={"by": "key,model"}, timeout=10).json()
    rows = [row for row in usage["data"] if row["model"] == "ears"]
    assert [(row["requests"], row["prompt_tokens"], row["completion_tokens"]) for row in rows] == [(1, 40, 5)], usage
    metrics = requests.get(proxy.url + "/metrics", headers=ADMIN, timeout=10).text
    counted = re.search(r'^api_like_oai_audio_seconds_total\{model="ears"\} (\S+)$', metrics, re.M)
    assert counted is not None and float(counted[1]) >= 0.5  # this test's clip, beside the module's others


def test_models_list_says_which_model_hears(proxy):
    cards = {card["id"]: card for card in requests.get(proxy.url + "/v1/models", headers=ADMIN, timeout=10).json()["data"]}
    assert cards["ears"]["input_modalities"] == ["text", "audio"]
    assert cards["text-only"]["input_modalities"] == ["text"]


def test_a_kind_openai_model_gets_the_form_as_it_is(client, hearing):
    """Passed through without the proxy's checks of format or fields (the upstream decides), its model name
    the upstream's: here a llama-server's /v1, which refuses a format it does not write, with its 400."""
    audio = b"OggS" + bytes(100)
    transcript = client.audio.transcriptions.create(model="remote", file=("speech.ogg", audio, "audio/ogg"), language="fr")
    assert transcript.text == "Hello from the tape."
    assert hearing.requests[-1] == {"fields": {"model": "whisper-1", "language": "fr"}, "file": audio}
    with pytest.raises(openai.BadRequestError, match="Only 'json' response_format"):
        client.audio.transcriptions.create(model="remote", file=("speech.ogg", audio, "audio/ogg"), response_format="srt")


def test_a_kind_openai_models_files_count_their_seconds_and_one_of_unknown_length_is_refused_under_a_limit(proxy, hearing):
    """The upstream reads the file itself, so the proxy reads its length only where it can: a wav's counts;
    an ogg's cannot be, which a key limited in audio seconds may not send (it would go uncounted)."""
    limited = requests.post(
        proxy.url + "/v1/internal/keys", json={"name": "relayed-ears", "audio_seconds_per_day": 5}, headers=ADMIN, timeout=10
    ).json()["key"]
    free = requests.post(
        proxy.url + "/v1/internal/keys", json={"name": "relayed-free", "rpm": 100}, headers=ADMIN, timeout=10
    ).json()["key"]
    sent = len(hearing.requests)
    ogg = requests.post(
        proxy.url + "/v1/audio/transcriptions",
        data={"model": "remote"},
        timeout=30,
        files={"file": ("speech.ogg", b"OggS" + bytes(100), "audio/ogg")},
        headers={"Authorization": f"Bearer {limited}"},
    )
    assert ogg.status_code == 400 and ogg.json()["error"]["code"] == "audio_length_unknown"
    assert len(hearing.requests) == sent
    for key in (free, limited):
        assert (
            post(proxy, "/v1/audio/transcriptions", wav_of(3.0), {"Authorization": f"Bearer {key}"}, model="remote").status_code
            == 200
        )
    assert (
        post(proxy, "/v1/audio/transcriptions", wav_of(3.0), {"Authorization": f"Bearer {limited}"}, model="remote").status_code
        == 429
    )  # 3 + 3 > 5
    usage = requests.get(proxy.url + "/v1/internal/usage", headers=ADMIN, params={"by": "key"}, timeout=10).json()
    seconds = {row["key"]: row["audio_seconds"] for row in usage["data"]}
    assert (seconds["relayed-free"], seconds["relayed-ears"]) == (3.0, 3.0)


def test_text_to_speech_is_relayed_to_a_kind_openai_model_only(client, hearing):
    spoken = client.audio.speech.create(model="remote", voice="alloy", input="Good morning")
    assert spoken.content == b"ID3-fake-mp3:Good morning"
    assert hearing.requests[-1] == {"model": "whisper-1", "voice": "alloy", "input": "Good morning"}
    with pytest.raises(openai.BadRequestError, match="llama-server has no text to speech"):
        client.audio.speech.create(model="ears", voice="alloy", input="Good morning")


def test_open_webuis_speech_to_text_request(proxy, hearing):
    """Open WebUI's OpenAI engine for speech to text (routers/audio.py), replayed: the file and the model
    (and the language when set) in a form to {base}/audio/transcriptions; it reads `text`."""
    audio = wav_of(1.0)
    answer = requests.post(
        proxy.url + "/v1/audio/transcriptions",
        headers=ADMIN,
        files={"file": ("recording.wav", audio)},
        data={"model": "ears", "language": "en"},
        timeout=30,
    )
    assert answer.status_code == 200 and answer.json()["text"] == "Hello from the tape."
    assert hearing.requests[-1] == {"fields": {"response_format": "json", "stream": "false", "language": "en"}, "file": audio}
