"""The shape contract: what services/generation.py needs of an API to write its answers.

One event path serves every API: `generation.stream` and `generation.fold` read the same generation
events and hand them to a shape, which writes them as its API's answer (OpenAI's chat and completions,
openai_shape.py; Anthropic's Messages, anthropic_shape.py; the Responses API, responses_shape.py;
a stored response, services/stored_responses.py). A shape is held to this Protocol by
tests/unit/test_shape_contract.py, as httpx holds its transports to BaseTransport: every member, and
each method's parameters by name.

Plain dicts and bytes on purpose: the stream's members run once per token (benchmarks/PROFILE.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..backends.events import GenerationEvent
    from ..errors import ProxyError


@runtime_checkable
class Shape(Protocol):
    """One answer of one API, folded or streamed (a shape is made per request, and keeps its state)."""

    # The bytes after the closings: `data: [DONE]` for OpenAI's chat and completions, b"" for APIs whose
    # last event says it is the last.
    end: ClassVar[bytes]
    # What is sent while the client waits, after each silence of sse.KEEPALIVE_SECONDS (a client with a
    # read timeout waits on a model's load or a long prompt): OpenAI's SSE comment, Anthropic's `ping`
    # event, Ollama's empty piece (which names the model: an attribute of the shape, not of its class).
    keepalive: bytes
    # Whether the stream's first event must say how much of the prompt llama.cpp had cached (Anthropic's
    # message_start does): the upstream is asked for its per-token timings then (services/chat.start_chat).
    usage_at_start: ClassVar[bool]

    def frame(self, chunk: dict) -> bytes:
        """One chunk as SSE bytes (named events for the APIs that name them)."""

    def openings(self, index: int) -> list[dict]:
        """The chunks that open choice `index`, before any event."""

    def content_frame(self, event: GenerationEvent) -> bytes | None:
        """The frame of a plain text delta, assembled around pre-encoded bytes (the per-token fast path);
        None when the event needs `chunks`."""

    def prepare_text(self) -> None:
        """Make now what `content_frame` needs for its first text delta: a stream calls it while the
        upstream reads the prompt (generation.stream), not on the first token's way to the client (issue 54)."""

    def chunks(self, event: GenerationEvent) -> list[dict]:
        """The chunks one event becomes (a block opened or closed, a delta, a finish)."""

    def closings(self, usage: dict) -> list[dict]:
        """The chunks after the last event: what is still open closed, the usage, the end of the answer."""

    def error_chunk(self, exc: ProxyError) -> dict:
        """The API's error event, for a generation that fails after the stream started."""

    def response(self, choices: list[dict], usage: dict) -> dict:
        """The folded answer, from generation.ChoiceFold's choices and the usage."""
