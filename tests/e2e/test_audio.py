"""Speech to text and audio in chat end to end: the OpenAI SDK against the proxy in front of a real
llama-server that runs SmolLM2 with an audio projector (`--mmproj`).

No package ships an audio model small enough, so scripts/make_test_audio_mmproj.py writes a random-weight
one (a 2-layer Whisper-style encoder with Qwen2-Audio's projector onto SmolLM2's 576 dimensions), cached
beside the provisioned model. What the model writes of a clip is nonsense, but the rest is real: llama.cpp
decodes the wav, makes its mel spectrogram and encodes it (one 30-second chunk: about 750 tokens), and
the proxy's answers are checked against llama-server's own for the same file. One clip and one slot
throughout, so llama.cpp's cache spares the encoder after the first request (each new one costs seconds).
An mp3 is made at test time from the same tone (lameenc: LAME, pinned in the test extras); a managed key's
audio seconds are counted and limited per day on both key stores (SQLite, a real redis-server)."""

from __future__ import annotations

import base64
import io
import json
import math
import struct
import subprocess
import sys
import time
import wave

import lameenc
import openai
import pytest
import requests

from ..conftest import openai_client
from ..servers import ROOT, made_model

AUDIO_CHUNK_TOKENS = 750  # 3000 mel frames, halved by the convolution and by the projector's pooling


def tone(seconds: float = 1.0, rate: int = 16000, pitch: float = 440.0) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as file:
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(rate)
        file.writeframes(
            b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * pitch * n / rate))) for n in range(int(seconds * rate)))
        )
    return out.getvalue()


CLIP = tone()
ADMIN = "admin-audio-secret"


def mp3_of(wav: bytes, kbps: int = 64) -> bytes:
    """The wav's samples encoded by LAME (constant bit rate: the proxy reads its length from its size)."""
    with wave.open(io.BytesIO(wav)) as file:
        rate, samples = file.getframerate(), file.readframes(file.getnframes())
    encoder = lameenc.Encoder()
    encoder.set_bit_rate(kbps)
    encoder.set_in_sample_rate(rate)
    encoder.set_channels(1)
    encoder.set_quality(2)
    return bytes(encoder.encode(samples) + encoder.flush())


def input_audio(data: bytes, format: str = "wav") -> dict:
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": format}}


@pytest.fixture(scope="module")
def llama_hearing(start_llama_server):
    projector = made_model("test-audio-mmproj-smollm2-135m.gguf", "make_test_audio_mmproj.py")
    # one slot: every request meets the cache the last one left; --n-predict bounds what the model writes
    return start_llama_server(context_size=4096, slots=1, extra_args=("--mmproj", str(projector), "--n-predict", "8"))


@pytest.fixture(scope="module")
def proxy(llama_hearing, start_proxy):
    return start_proxy("--llama-api", llama_hearing.url)


@pytest.fixture(scope="module")
def gpt(proxy):
    return openai_client(proxy.url)


def direct(llama_hearing, file=("tone.wav", CLIP, "audio/wav"), **fields) -> requests.Response:
    return requests.post(
        llama_hearing.url + "/v1/audio/transcriptions", data={"temperature": "0", **fields}, files={"file": file}, timeout=300
    )


def test_a_transcription_is_llama_servers_own(gpt, llama_hearing):
    own = direct(llama_hearing).json()
    transcript = gpt.audio.transcriptions.create(model="m", file=("tone.wav", CLIP, "audio/wav"), temperature=0)
    assert transcript.text == own["text"]
    assert (transcript.usage.input_tokens, transcript.usage.output_tokens) == (
        own["usage"]["input_tokens"],
        own["usage"]["output_tokens"],
    )
    assert own["usage"]["input_tokens"] > AUDIO_CHUNK_TOKENS  # llama.cpp decoded and encoded the clip


def test_a_streamed_transcription_is_llama_servers_events(gpt, llama_hearing):
    own = [json.loads(line[6:]) for line in direct(llama_hearing, stream="true").text.splitlines() if line.startswith("data: {")]
    events = list(gpt.audio.transcriptions.create(model="m", file=("tone.wav", CLIP, "audio/wav"), temperature=0, stream=True))
    assert [(event.type, getattr(event, "delta", None)) for event in events] == [
        (event["type"], event.get("delta")) for event in own
    ]
    assert events[-1].text == own[-1]["text"]


@pytest.mark.parametrize("response_format", ["text", "srt", "vtt"])
def test_text_formats_hold_llama_servers_text(gpt, llama_hearing, response_format):
    text = direct(llama_hearing).json()["text"]
    answer = gpt.audio.transcriptions.create(
        model="m", file=("tone.wav", CLIP, "audio/wav"), temperature=0, response_format=response_format
    )
    expected = {
        "text": f"{text}\n",
        "srt": f"1\n00:00:00,000 --> 00:00:01,000\n{text.strip()}\n\n",
        "vtt": f"WEBVTT\n\n00:00:00.000 --> 00:00:01.000\n{text.strip()}\n\n",
    }
    assert answer == expected[response_format]


def test_audio_in_chat_reaches_llama_server_as_media(gpt, proxy):
    """The clip goes as multimodal_data at the model's marker: llama.cpp counts its tokens in the prompt."""
    part = input_audio(CLIP)
    answer = gpt.chat.completions.create(
        model="m", max_tokens=2, temperature=0, messages=[{"role": "user", "content": [{"type": "text", "text": "Hear"}, part]}]
    )
    assert answer.usage.prompt_tokens > AUDIO_CHUNK_TOKENS
    cards = requests.get(proxy.url + "/v1/models", timeout=10).json()["data"]
    assert cards[0]["input_modalities"] == ["text", "audio"]


def test_an_mp3_made_now_is_transcribed_as_llama_server_does_and_heard_in_chat(gpt, llama_hearing):
    clip = mp3_of(CLIP)
    assert clip[:2] == b"\xff\xf3"  # MPEG-2 layer III frames, no container: what a recorder's mp3 holds
    own = direct(llama_hearing, file=("tone.mp3", clip, "audio/mpeg")).json()
    transcript = gpt.audio.transcriptions.create(model="m", file=("tone.mp3", clip, "audio/mpeg"), temperature=0)
    assert transcript.text == own["text"] and transcript.usage.input_tokens == own["usage"]["input_tokens"]
    assert own["usage"]["input_tokens"] > AUDIO_CHUNK_TOKENS  # llama.cpp decoded the mp3 and encoded it
    answer = gpt.chat.completions.create(
        model="m",
        max_tokens=2,
        temperature=0,
        messages=[{"role": "user", "content": [{"type": "text", "text": "Hear"}, input_audio(clip, "mp3")]}],
    )
    assert answer.usage.prompt_tokens > AUDIO_CHUNK_TOKENS


# --- a managed key's audio seconds ---------------------------------------------------------------


@pytest.fixture(scope="module", params=["sqlite", "redis"])
def keyed(request, llama_hearing, start_proxy, tmp_path_factory):
    """(proxy, its --store) with managed keys kept in SQLite or in a real Redis."""
    if request.param == "sqlite":
        store = f"sqlite://{tmp_path_factory.mktemp('audio-keys')}/store.sqlite3"
    else:
        store = request.getfixturevalue("redis_server").url.rsplit("/", 1)[0] + "/5"
    return start_proxy("--llama-api", llama_hearing.url, "--store", store, "--admin-key", ADMIN), store


def keys_cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "api_like_oai", "keys", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_keys_audio_seconds_are_counted_and_limited_per_day(keyed, llama_hearing):
    proxy, store = keyed
    admin = {"Authorization": f"Bearer {ADMIN}"}
    name = "ears-" + store.split(":")[0]
    created = requests.post(
        proxy.url + "/v1/internal/keys", json={"name": name, "audio_seconds_per_day": 2}, headers=admin, timeout=10
    ).json()
    assert created["audio_seconds_per_day"] == 2
    gpt = openai_client(proxy.url, api_key=created["key"])
    own = direct(llama_hearing).json()
    assert gpt.audio.transcriptions.create(model="m", file=("tone.wav", CLIP, "audio/wav"), temperature=0).text == own["text"]
    heard = gpt.chat.completions.create(
        model="m",
        max_tokens=2,
        temperature=0,
        messages=[{"role": "user", "content": [{"type": "text", "text": "Hear"}, input_audio(CLIP)]}],
    )
    with pytest.raises(openai.RateLimitError) as refused:  # 2 s used: a third second is refused before it is sent
        gpt.audio.transcriptions.create(model="m", file=("tone.wav", CLIP, "audio/wav"), temperature=0)
    error = refused.value.response.json()["error"]
    assert error["code"] == "rate_limit_exceeded" and "(audio_seconds_per_day) limit 2" in error["message"]
    assert int(refused.value.response.headers["Retry-After"]) >= 1
    with pytest.raises(openai.RateLimitError):
        gpt.chat.completions.create(model="m", max_tokens=2, messages=[{"role": "user", "content": [input_audio(CLIP)]}])
    assert gpt.chat.completions.create(model="m", max_tokens=2, messages=[{"role": "user", "content": "Hi"}]).choices

    rows = {
        row["api"]: row for row in requests.get(proxy.url + "/v1/internal/usage?by=api", headers=admin, timeout=10).json()["data"]
    }
    spoken, chat = rows["/v1/audio/transcriptions"], rows["/v1/chat/completions"]
    assert (spoken["requests"], spoken["errors"], spoken["audio_seconds"]) == (2, 1, 1.0)
    assert (spoken["prompt_tokens"], spoken["completion_tokens"]) == (own["usage"]["input_tokens"], own["usage"]["output_tokens"])
    assert (chat["requests"], chat["errors"], chat["audio_seconds"]) == (3, 1, 1.0)
    assert chat["prompt_tokens"] > heard.usage.prompt_tokens > AUDIO_CHUNK_TOKENS
    today = int(time.time()) // 86400 * 86400
    page = requests.get(
        proxy.url + f"/v1/organization/usage/audio_transcriptions?start_time={today}&group_by=api_key_id",
        headers={"Authorization": f"Bearer {created['key']}"},
        timeout=10,
    ).json()
    results = [result for bucket in page["data"] for result in bucket["results"]]
    assert [(r["object"], r["api_key_id"], r["seconds"], r["num_model_requests"]) for r in results] == [
        ("organization.usage.audio_transcriptions.result", name, 1, 2)
    ]

    # the `keys` command raises the limit on the running proxy's store: the next second fits
    assert "audio_seconds_per_day=3" in keys_cli("update", name, "--store", store, "--audio-seconds-per-day", "3")
    assert gpt.audio.transcriptions.create(model="m", file=("tone.wav", CLIP, "audio/wav"), temperature=0).usage.input_tokens
