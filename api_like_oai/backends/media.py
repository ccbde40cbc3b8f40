"""What a prompt with images or audio must offer the backend that sends it (the door's `Media`), apart
from upstream.py so that the llama.cpp backend, which writes it, and the door, which carries it, both
name it without importing each other. Not runtime-checkable: the door tells a media prompt apart by
its not being text or token ids (an isinstance against a Protocol costs microseconds per call)."""

from __future__ import annotations

from typing import Protocol


class Media(Protocol):
    """A prompt with images or audio (prompts.media.MediaPrompt): its text with placeholders, the tokens its
    media take beyond them, and llama.cpp's prompt object for a server whose media marker is `marker`."""

    text: str
    media_tokens: int

    def upstream(self, marker: str) -> dict: ...
