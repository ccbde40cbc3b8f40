"""Generation events as Ollama's answers: `/api/chat`'s `message` objects and `/api/generate`'s
`response` objects, streamed as NDJSON (one JSON object a line, `application/x-ndjson`) or folded
into one object. The last object says `done: true`, why (`done_reason`) and the counts and
durations (nanoseconds) Ollama reports.

A tool call is given out whole when its block closes, its arguments an object (Ollama's clients
read complete calls, never fragments); a thought goes in `thinking` beside the text. The
durations are measured here: from the request's arrival (`arrived_ns`), the first event
(`first_event`, stamped by `stamp_first_event`) and the end; the model's load time is the
service's (`load_ns`). The shape Protocol (shape.py); one choice only.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from .. import sse
from ..backends.events import GenerationEvent
from ..compact_json import json_bytes
from ..errors import ProxyError
from .blocks import DELTA, REASONING, STOP, TEXT, TOOL_CALL, Block, Blocks, arguments_object

CHAT, GENERATE = "chat", "generate"
NDJSON = "application/x-ndjson"


def created_at() -> str:
    """Now as Ollama writes it (RFC 3339, UTC)."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def error_body(exc: ProxyError) -> dict:
    """Ollama's error: {"error": message}, the field it is about named in it."""
    message = exc.message
    if exc.param and exc.param not in message:
        message = f"{exc.param}: {message}"
    return {"error": message}


def tool_call(block: Block, index: int) -> dict:
    """A call as Ollama gives it: its arguments an object."""
    return {"id": block.call_id, "function": {"index": index, "name": block.name, "arguments": arguments_object(block.content)}}


class OllamaShape:
    end = b""  # the object with `done: true` is the last
    usage_at_start = False

    def __init__(self, model: str, kind: str = CHAT, arrived_ns: int | None = None, load_ns: int = 0):
        self.model = model
        self.kind = kind
        self.arrived_ns = arrived_ns or time.monotonic_ns()
        self.load_ns = load_ns
        self.first_event_ns: int | None = None
        self.blocks = Blocks()
        self.calls = 0
        self.finish_reason: str | None = None
        self.context: list[int] = []  # /api/generate's: the reply's tokens, set by the service when it ends
        self._text_pattern: sse.FramePattern | None = None
        self._stamped_at, self._stamp = -1.0, b""

    @staticmethod
    def frame(chunk: dict) -> bytes:
        return json_bytes(chunk) + b"\n"

    @property
    def keepalive(self) -> bytes:
        """An empty piece of the answer (no text, not done): Ollama's clients read every line as one
        of its objects, so a comment or a blank line would break them, and an empty piece adds nothing."""
        return self.frame(self._piece("", ""))

    @staticmethod
    def error_chunk(exc: ProxyError) -> dict:
        return error_body(exc)

    def openings(self, index: int) -> list[dict]:
        return []

    def stamp_first_event(self, events):
        """`events` as they are, the time of the first noted (the prompt's evaluation ends there)."""
        for event in events:
            self.first_event_ns = time.monotonic_ns()
            yield event
            break
        yield from events

    def content_frame(self, event: GenerationEvent) -> bytes | None:
        """The line of a plain text delta, assembled around pre-encoded parts (the per-token path)."""
        if not self.blocks.extend_open_text(event):
            return None
        if self._text_pattern is None:
            self.prepare_text()
        return self._text_pattern.fill(self._created_at(), sse.encode_string(event.text))

    def prepare_text(self) -> None:
        sample = self.frame(self._piece(sse.TEXT_HOLE, "", created=sse.TEXT_HOLE + "t"))
        self._text_pattern = sse.FramePattern(sample, sse.TEXT_HOLE + "t", sse.TEXT_HOLE)

    def _created_at(self) -> bytes:
        """created_at encoded, written anew at most once a millisecond: formatting a time costs more
        than the rest of a token's line."""
        now = time.monotonic()
        if now - self._stamped_at >= 0.001:
            self._stamped_at, self._stamp = now, sse.encode_string(created_at())
        return self._stamp

    def chunks(self, event: GenerationEvent) -> list[dict]:
        chunks = []
        for change, block, piece in self.blocks.add(event):
            if change == DELTA and block.kind == TEXT:
                chunks.append(self._piece(piece, ""))
            elif change == DELTA and block.kind == REASONING:
                chunks.append(self._piece("", piece))
            elif change == STOP and block.kind == TOOL_CALL:
                chunks.append(self._calls_piece([block]))
        if event.finish_reason:
            self.finish_reason = event.finish_reason
        return chunks

    def closings(self, usage: dict) -> list[dict]:
        chunks = [
            self._calls_piece([block]) for change, block, _ in self.blocks.close() if change == STOP and block.kind == TOOL_CALL
        ]
        return [*chunks, {**self._piece("", ""), **self._done(self.finish_reason, usage)}]

    def response(self, choices: list[dict], usage: dict) -> dict:
        choice = choices[0]
        calls = [block for block in choice["blocks"] if block.kind == TOOL_CALL]
        answer = self._piece(choice["text"], choice["reasoning"])
        if calls:
            answer = self._with_calls(answer, calls)
        return {**answer, **self._done(choice["finish_reason"], usage)}

    # --- the objects ------------------------------------------------------------------------

    def _piece(self, text: str, thinking: str, created: str | None = None) -> dict:
        """One object of the answer with this text (or thought), not the last."""
        head = {"model": self.model, "created_at": created or created_at()}
        if self.kind == GENERATE:
            body = {"response": text, **({"thinking": thinking} if thinking else {})}
        else:
            body = {"message": {"role": "assistant", "content": text, **({"thinking": thinking} if thinking else {})}}
        return {**head, **body, "done": False}

    def _calls_piece(self, blocks: list[Block]) -> dict:
        return self._with_calls(self._piece("", ""), blocks)

    def _with_calls(self, answer: dict, blocks: list[Block]) -> dict:
        calls = []
        for block in blocks:
            calls.append(tool_call(block, self.calls))
            self.calls += 1
        if self.kind == CHAT:
            answer["message"]["tool_calls"] = calls
        return answer

    def _done(self, finish_reason: str | None, usage: dict) -> dict:
        """The last object's fields: why it ended, the counts, the durations in nanoseconds."""
        now = time.monotonic_ns()
        started = self.arrived_ns + self.load_ns
        first = self.first_event_ns or now
        done = {
            "done": True,
            "done_reason": "length" if finish_reason == "length" else "stop",
            "total_duration": now - self.arrived_ns,
            "load_duration": self.load_ns,
            "prompt_eval_count": usage["prompt_tokens"],
            "prompt_eval_duration": max(first - started, 0),
            "eval_count": usage["completion_tokens"],
            "eval_duration": now - first,
        }
        return (done | {"context": self.context}) if self.kind == GENERATE else done
