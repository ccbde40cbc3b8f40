"""The formatter interface: OpenAI messages in, prompt text and stop strings out.

A formatter is any object with a `describe()` and a `render()` as in `ChatFormatter`.
Plug your own in with `--chat-formatter module:Class` or the entry-point group
`api_like_oai.formatters`; its class is called as `Class(options: FormatterOptions)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ..errors import InvalidRequest


@dataclass(frozen=True)
class ChatPrompt:
    """What a formatter produces: the exact text to send and the stop strings it implies."""

    text: str
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class FormatterOptions:
    """Everything a formatter may need besides the messages; all of it known at start-up."""

    bos_token: str = ""
    eos_token: str = ""
    upstream_adds_bos: bool = False
    response_role: str = "assistant"
    extra: dict = field(default_factory=dict)


@runtime_checkable
class ChatFormatter(Protocol):
    def describe(self) -> dict:
        """{"source": ..., "name": ...}: where the template came from, for logs and model info."""

    def render(
        self,
        messages: list[dict],
        *,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        tools: list | None = None,
    ) -> ChatPrompt:
        """Format `messages` (dicts with string `role` and string `content`) into a prompt."""


def content_text(content, index: int) -> str:
    """A message's content as text: a string, null, or a list of {"type": "text"} parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_part_text(part, index, n) for n, part in enumerate(content))
    raise InvalidRequest(f"messages[{index}].content must be a string or a list of text parts", param=f"messages.{index}.content")


def _part_text(part, index: int, part_index: int) -> str:
    where = f"messages[{index}].content[{part_index}]"
    if not isinstance(part, dict) or part.get("type") != "text":
        kind = part.get("type") if isinstance(part, dict) else type(part).__name__
        raise InvalidRequest(
            f"{where} is a {kind!r} part; only 'text' and 'image_url' parts are supported",
            param=f"messages.{index}.content.{part_index}",
        )
    if not isinstance(part.get("text"), str):
        raise InvalidRequest(f"{where}.text must be a string", param=f"messages.{index}.content")
    return part["text"]


def normalise_messages(messages: list[dict]) -> list[dict]:
    """Messages with their content flattened to text; other keys (name, ...) kept for templates."""
    return [{**message, "content": content_text(message.get("content"), n)} for n, message in enumerate(messages)]


def merge_stops(*groups) -> list[str]:
    """Stop strings from several sources, in order, without duplicates or empties."""
    merged: dict[str, None] = {}
    for group in groups:
        if isinstance(group, str):
            group = [group]
        for stop in group or ():
            if stop:
                merged[stop] = None
    return list(merged)
