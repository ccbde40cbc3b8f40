"""OpenAI's response shapes for chat and text completions, built from GenerationEvents.

A shape is what generation.stream and generation.fold need to write one API's answers, the
Protocol in shape.py: `response(choices, usage)` for the folded answer; for streams `openings(index)`,
`chunks(event)` (with `content_frame(event)` as the per-token fast path), `closings(usage)`,
`error_chunk(exc)`, `frame(chunk)` (the SSE framing), `end` (the last bytes, `data: [DONE]` here),
`keepalive` and `usage_at_start`. The Anthropic and Responses shapes follow the same Protocol.

Plain dicts on purpose: this runs once per streamed token, where a pydantic round-trip per
chunk would cost more than the rest of the proxy (see benchmarks/).
"""

from __future__ import annotations

import os
import time

from .. import sse
from ..backends.events import GenerationEvent


class _Shape:
    """What chat and text completion chunks share: identity, envelope, usage, the fast text frame."""

    object_name = ""
    id_prefix = ""
    frame = staticmethod(sse.frame)
    end = sse.DONE
    keepalive = sse.KEEPALIVE_COMMENT  # OpenAI's SDKs skip comments
    usage_at_start = False

    def __init__(self, model: str, include_usage: bool = False, service_tier: str | None = None):
        self.id = f"{self.id_prefix}{os.urandom(16).hex()}"  # uuid4().hex's randomness, without its object
        self.created = int(time.time())
        self.model = model
        self.include_usage = include_usage  # stream_options.include_usage: a last chunk with the usage
        self.envelope = {"service_tier": service_tier} if service_tier else {}  # reported when asked about
        self._text_pattern: sse.FramePattern | None = None

    def _chunk(self, choices: list) -> dict:
        return {
            "id": self.id,
            "object": self.object_name,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            **self.envelope,
            "choices": choices,
        }

    def _text_chunk(self, index: int, text: str) -> dict:
        raise NotImplementedError

    def usage_chunk(self, usage: dict) -> dict:
        return {**self._chunk([]), "usage": usage}

    def closings(self, usage: dict) -> list[dict]:
        return [self.usage_chunk(usage)] if self.include_usage else []

    @staticmethod
    def error_chunk(exc) -> dict:
        return exc.to_dict()

    def wants_logprobs(self) -> bool:
        raise NotImplementedError

    def content_frame(self, event: GenerationEvent) -> bytes | None:
        """The SSE frame of a plain text delta, or None when the event needs chunks().

        This is the one thing done per streamed token, so the envelope is encoded once and the
        frame assembled around the index and the text (the same bytes sse.frame would write)."""
        if not event.text or event.finish_reason or event.tool_calls or self.wants_logprobs():
            return None
        if self._text_pattern is None:
            self.prepare_text()
        return self._text_pattern.fill(str(event.index).encode(), sse.encode_string(event.text))

    def prepare_text(self) -> None:
        self._text_pattern = sse.FramePattern(sse.frame(self._text_chunk(_CHOICE, sse.TEXT_HOLE)), _CHOICE, sse.TEXT_HOLE)


_CHOICE, _CALL = sse.NUMBER_HOLES[:2]


class ChatShape(_Shape):
    object_name = "chat.completion.chunk"
    id_prefix = "chatcmpl-"

    def __init__(
        self,
        model: str,
        role: str = "assistant",
        logprobs: bool = False,
        top_logprobs: int = 0,
        legacy_functions: bool = False,
        include_usage: bool = False,
        service_tier: str | None = None,
    ):
        super().__init__(model, include_usage, service_tier)
        self.role = role
        self.logprobs = logprobs
        self.top_logprobs = top_logprobs
        self.legacy_functions = legacy_functions  # answer with `function_call`, as before `tools` existed
        self._arguments_pattern: sse.FramePattern | None = None

    def wants_logprobs(self) -> bool:
        return self.logprobs

    def _text_chunk(self, index: int, text: str, logprobs=None) -> dict:
        return self._chunk([{"index": index, "delta": {"content": text}, "logprobs": logprobs, "finish_reason": None}])

    def openings(self, index: int) -> list[dict]:
        """The first chunk of a choice: the role alone, as OpenAI sends it."""
        return [self._chunk([{"index": index, "delta": {"role": self.role}, "logprobs": None, "finish_reason": None}])]

    def chunks(self, event: GenerationEvent) -> list[dict]:
        chunks = []
        if event.reasoning:
            chunks.append(
                self._chunk(
                    [
                        {
                            "index": event.index,
                            "delta": {"reasoning_content": event.reasoning},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ]
                )
            )
        if event.text:
            logprobs = chat_logprobs(event.logprobs, self.top_logprobs) if self.logprobs else None
            chunks.append(self._text_chunk(event.index, event.text, logprobs))
        if event.tool_calls:
            chunks.append(
                self._chunk(
                    [
                        {
                            "index": event.index,
                            "delta": self._tool_call_delta(event.tool_calls),
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ]
                )
            )
        if event.finish_reason:
            chunks.append(
                self._chunk(
                    [
                        {
                            "index": event.index,
                            "delta": {},
                            "logprobs": None,
                            "finish_reason": self._finish_reason(event.finish_reason),
                        }
                    ]
                )
            )
        return chunks

    def content_frame(self, event: GenerationEvent) -> bytes | None:
        """Text deltas as _Shape's; a piece of one call's arguments (most events of a streamed tool
        call) likewise around a pre-encoded envelope, the same bytes sse.frame would write."""
        calls = event.tool_calls
        if calls is None:
            return super().content_frame(event)
        if (
            len(calls) != 1
            or calls[0].id is not None
            or event.text
            or event.reasoning
            or event.finish_reason
            or self.legacy_functions
        ):
            return None
        if self._arguments_pattern is None:
            sample = sse.frame(
                self._chunk(
                    [
                        {
                            "index": _CHOICE,
                            "delta": {"tool_calls": [{"index": _CALL, "function": {"arguments": sse.TEXT_HOLE}}]},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ]
                )
            )
            self._arguments_pattern = sse.FramePattern(sample, _CHOICE, _CALL, sse.TEXT_HOLE)
        return self._arguments_pattern.fill(
            str(event.index).encode(), str(calls[0].index).encode(), sse.encode_string(calls[0].arguments)
        )

    def _tool_call_delta(self, deltas) -> dict:
        """The delta of one event's ToolCallDeltas: each call's id, type and name exactly once (on its
        first piece, which the SDKs expect), its arguments in pieces; pieces of one call merged."""
        entries: list[dict] = []
        for delta in deltas:
            if entries and entries[-1]["index"] == delta.index:
                entries[-1]["function"]["arguments"] += delta.arguments
                continue
            function = {"name": delta.name, "arguments": delta.arguments} if delta.id else {"arguments": delta.arguments}
            entries.append(
                {"index": delta.index, "id": delta.id, "type": "function", "function": function}
                if delta.id
                else {"index": delta.index, "function": function}
            )
        if self.legacy_functions:
            return {"function_call": entries[0]["function"]} if entries[0]["index"] == 0 else {}
        return {"tool_calls": entries}

    def _finish_reason(self, finish_reason: str) -> str:
        return "function_call" if finish_reason == "tool_calls" and self.legacy_functions else finish_reason

    def response(self, choices: list[dict], usage: dict) -> dict:
        """The non-streamed answer from folded choices ({"index", "text", "finish_reason", "logprobs",
        "tool_calls"})."""
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            **self.envelope,
            "choices": [
                {
                    "index": c["index"],
                    "message": self._message(c["text"], c.get("tool_calls"), c.get("reasoning")),
                    "logprobs": chat_logprobs(c["logprobs"], self.top_logprobs) if self.logprobs else None,
                    "finish_reason": self._finish_reason(c["finish_reason"]),
                }
                for c in choices
            ],
            "usage": usage,
        }

    def _message(self, text: str, tool_calls: list | None, reasoning: str | None = None) -> dict:
        message = {"role": self.role, "content": text, "refusal": None}
        if reasoning:
            message["reasoning_content"] = reasoning
        if not tool_calls:
            return message
        message["content"] = text or None
        if self.legacy_functions:
            message["function_call"] = tool_calls[0]["function"]
        else:
            message["tool_calls"] = tool_calls
        return message


class CompletionShape(_Shape):
    object_name = "text_completion"
    id_prefix = "cmpl-"

    def __init__(self, model: str, logprobs: int | None = None, include_usage: bool = False):
        super().__init__(model, include_usage)
        self.logprobs = logprobs
        self.text_offsets: dict[int, int] = {}

    def wants_logprobs(self) -> bool:
        return self.logprobs is not None

    def _text_chunk(self, index: int, text: str, logprobs=None, finish_reason=None) -> dict:
        return self._chunk([{"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}])

    def openings(self, index: int) -> list[dict]:
        return []

    def chunks(self, event: GenerationEvent) -> list[dict]:
        if not event.text and not event.finish_reason:
            return []
        logprobs = None
        if self.logprobs is not None and event.logprobs:
            offset = self.text_offsets.get(event.index, 0)
            logprobs = legacy_logprobs(event.logprobs, offset)
            self.text_offsets[event.index] = offset + len(event.text)
        return [self._text_chunk(event.index, event.text, logprobs, event.finish_reason)]

    def response(self, choices: list[dict], usage: dict) -> dict:
        return {
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            "choices": [
                {
                    "index": c["index"],
                    "text": c["text"],
                    "logprobs": legacy_logprobs(c["logprobs"], 0) if self.logprobs is not None else None,
                    "finish_reason": c["finish_reason"],
                }
                for c in choices
            ],
            "usage": usage,
        }


def chat_logprobs(token_logprobs, top_count: int) -> dict:
    """OpenAI chat `logprobs`: {"content": [{token, logprob, bytes, top_logprobs}], "refusal": None}."""
    return {
        "content": [
            {
                "token": t.token,
                "logprob": t.logprob,
                "bytes": list(t.bytes),
                "top_logprobs": [
                    {"token": token, "logprob": logprob, "bytes": list(token_bytes)}
                    for token, logprob, token_bytes in t.top[:top_count]
                ],
            }
            for t in token_logprobs or ()
        ],
        "refusal": None,
    }


def legacy_logprobs(token_logprobs, offset: int) -> dict:
    """The completions API's `logprobs`: tokens, token_logprobs, top_logprobs, text_offset."""
    tokens, offsets = [], []
    for t in token_logprobs or ():
        tokens.append(t.token)
        offsets.append(offset)
        offset += len(t.token)
    return {
        "tokens": tokens,
        "token_logprobs": [t.logprob for t in token_logprobs or ()],
        "top_logprobs": [{token: logprob for token, logprob, _ in t.top} for t in token_logprobs or ()],
        "text_offset": offsets,
    }
