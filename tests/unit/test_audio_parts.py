"""A chat's input_audio part is decoded once: admission reads its length for the key's audio limits,
then the prompt takes its bytes (up to 25 MB of base64 each time before)."""

from __future__ import annotations

import base64

from api_like_oai.protocol import ChatCompletionRequest
from api_like_oai.services import audio_parts

from ..audio_clips import wav_of


class Hearing:
    name = "ears"

    def takes_audio(self) -> bool:
        return True


def test_an_audio_part_is_decoded_once_for_its_length_and_its_prompt(monkeypatch):
    clip = wav_of(2.0)
    request = ChatCompletionRequest.model_validate(
        {
            "model": "ears",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is said?"},
                        {"type": "input_audio", "input_audio": {"data": base64.b64encode(clip).decode(), "format": "wav"}},
                    ],
                }
            ],
        }
    )
    decoded = []
    real = audio_parts.decode_base64
    monkeypatch.setattr(audio_parts, "decode_base64", lambda *args: decoded.append(args[1]) or real(*args))
    assert audio_parts.audio_seconds(request) == 2.0
    resolved, clips = audio_parts.resolve_audio(request, Hearing())
    assert decoded == ["messages.0.content.1.input_audio.data"]  # once, though read twice
    [audio] = clips.values()
    assert audio.data == clip and resolved.messages[0].content[1].type == "text"  # its placeholder
