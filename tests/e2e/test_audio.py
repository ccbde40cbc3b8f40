"""Speech to text and audio in chat end to end: the OpenAI SDK against the proxy in front of a real
llama-server that runs SmolLM2 with an audio projector (`--mmproj`).

No package ships an audio model small enough, so scripts/make_test_audio_mmproj.py writes a random-weight
one (a 2-layer Whisper-style encoder with Qwen2-Audio's projector onto SmolLM2's 576 dimensions), cached
beside the provisioned model. What the model writes of a clip is nonsense, but the rest is real: llama.cpp
decodes the wav, makes its mel spectrogram and encodes it (one 30-second chunk: about 750 tokens), and
the proxy's answers are checked against llama-server's own for the same file. One clip and one slot
throughout, so llama.cpp's cache spares the encoder after the first request (each new one costs seconds)."""

from __future__ import annotations

import base64
import io
import json
import math
import struct
import wave

import pytest
import requests

from ..conftest import openai_client
from ..servers import made_model

AUDIO_CHUNK_TOKENS = 750   # 3000 mel frames, halved by the convolution and by the projector's pooling


def tone(seconds: float = 1.0, rate: int = 16000, pitch: float = 440.0) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as file:
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(rate)
        file.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * pitch * n / rate)))
                                  for n in range(int(seconds * rate))))
    return out.getvalue()


CLIP = tone()


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


def direct(llama_hearing, **fields) -> requests.Response:
    return requests.post(llama_hearing.url + "/v1/audio/transcriptions", data={"temperature": "0", **fields},
                         files={"file": ("tone.wav", CLIP, "audio/wav")}, timeout=300)


def test_a_transcription_is_llama_servers_own(gpt, llama_hearing):
    own = direct(llama_hearing).json()
    transcript = gpt.audio.transcriptions.create(model="m", file=("tone.wav", CLIP, "audio/wav"), temperature=0)
    assert transcript.text == own["text"]
    assert (transcript.usage.input_tokens, transcript.usage.output_tokens) == \
        (own["usage"]["input_tokens"], own["usage"]["output_tokens"])
    assert own["usage"]["input_tokens"] > AUDIO_CHUNK_TOKENS   # llama.cpp decoded and encoded the clip


def test_a_streamed_transcription_is_llama_servers_events(gpt, llama_hearing):
    own = [json.loads(line[6:]) for line in direct(llama_hearing, stream="true").text.splitlines()
           if line.startswith("data: {")]
    events = list(gpt.audio.transcriptions.create(model="m", file=("tone.wav", CLIP, "audio/wav"), temperature=0,
                                                  stream=True))
    assert [(event.type, getattr(event, "delta", None)) for event in events] == \
        [(event["type"], event.get("delta")) for event in own]
    assert events[-1].text == own[-1]["text"]


@pytest.mark.parametrize("response_format", ["text", "srt", "vtt"])
def test_text_formats_hold_llama_servers_text(gpt, llama_hearing, response_format):
    text = direct(llama_hearing).json()["text"]
    answer = gpt.audio.transcriptions.create(model="m", file=("tone.wav", CLIP, "audio/wav"), temperature=0,
                                             response_format=response_format)
    expected = {"text": f"{text}\n", "srt": f"1\n00:00:00,000 --> 00:00:01,000\n{text.strip()}\n\n",
                "vtt": f"WEBVTT\n\n00:00:00.000 --> 00:00:01.000\n{text.strip()}\n\n"}
    assert answer == expected[response_format]


def test_audio_in_chat_reaches_llama_server_as_media(gpt, proxy):
    """The clip goes as multimodal_data at the model's marker: llama.cpp counts its tokens in the prompt."""
    part = {"type": "input_audio", "input_audio": {"data": base64.b64encode(CLIP).decode(), "format": "wav"}}
    answer = gpt.chat.completions.create(model="m", max_tokens=2, temperature=0,
                                         messages=[{"role": "user", "content": [{"type": "text", "text": "Hear"}, part]}])
    assert answer.usage.prompt_tokens > AUDIO_CHUNK_TOKENS
    cards = requests.get(proxy.url + "/v1/models", timeout=10).json()["data"]
    assert cards[0]["input_modalities"] == ["text", "audio"]
