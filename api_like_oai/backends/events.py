"""The one internal event type that every upstream's answer is normalised into."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


# Not frozen, though nothing changes an event once made (a changed one is a new one: dataclasses.replace):
# a frozen dataclass's __init__ sets each of the ten fields through object.__setattr__, 3.5 µs against
# 0.8 here, and an event is made for every token, twice for a streamed tool call (benchmarks/PROFILE.md,
# issue 29). unsafe_hash keeps it hashable as the frozen one was.
@dataclass(slots=True, unsafe_hash=True)
class GenerationEvent:
    """A piece of one generation: new text, and on the last event why it stopped and the counts."""

    text: str = ""
    finish_reason: str | None = None  # "stop" | "length" (| "tool_calls") on the final event, else None
    prompt_tokens: int | None = None  # counts so far, where the upstream tells them
    completion_tokens: int | None = None
    logprobs: tuple | None = None  # TokenLogprob items for the tokens of `text`
    index: int = 0  # which choice (n > 1) this event belongs to
    tool_calls: tuple | None = None  # ToolCallDeltas parsed out of the text (tools/parser.py)
    reasoning: str = ""  # the model's thought, split out of the text (reasoning.py)
    stop_word: str | None = None  # the stop string that ended the generation, if one did
    cached_tokens: int | None = None  # of prompt_tokens, how many llama.cpp took from its cache
    item: ItemStep | None = None  # an output item the proxy made itself (services/mcp_loop.py)


@dataclass(frozen=True, slots=True, eq=False)
class ItemStep:
    """An output item of the proxy's own (an MCP server's tool list, a call it ran, an approval it asks
    for) in a generation's events: `done` false when it starts, true with its final form. Hashed by
    identity (its item is a dict)."""

    item: dict
    done: bool


@dataclass(frozen=True, slots=True)
class PromptProgress:
    """How far the upstream is in reading a prompt (llama.cpp's `prompt_progress`, asked for with
    `return_progress`): sent before the first token only, it says nothing of the answer, so it goes
    no further than generation.py, which turns it into the request's phase, keep-alives and the
    prefill metric. `finish_reason` is there so the code between the backend and there (the pool,
    merge, until_stopped) passes it like any event."""

    total: int  # the prompt's tokens
    cached: int  # of them, those taken from the cache (not computed)
    processed: int  # of them, those in the slot so far (the cached ones included)
    elapsed_ms: float  # since the prompt's processing started
    index: int = 0
    finish_reason: ClassVar[None] = None

    @property
    def fraction(self) -> float:
        """How much of the work of reading the prompt is done, 0 to 1 (the cached part is no work)."""
        to_compute = self.total - self.cached
        return 1.0 if to_compute <= 0 else min(max(self.processed - self.cached, 0) / to_compute, 1.0)

    @property
    def done(self) -> bool:
        return self.processed >= self.total


@dataclass(frozen=True, slots=True)
class Accepted:
    """The upstream took the request (its 200 head came) and is reading the prompt: the first event of
    every streamed generation, long before its first token (llama-server sends its head as it queues the
    task, after refusing what it refuses with a status). A streamed answer starts here, so its own head
    and the app's work on the response are done while llama.cpp computes, not after the first token
    (issue 54); a failure after it is the stream's error event, as llama.cpp's own stream gives it. Like
    PromptProgress it says nothing of the answer and goes no further than generation.py."""

    index: int = 0
    finish_reason: ClassVar[None] = None


# What a generation's events may begin with while the prompt is read: a server lost then has given out
# nothing of the answer, so the pool starts the request on another one (pool._relay).
PROMPT_READING = (Accepted, PromptProgress)


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    token: str
    logprob: float
    top: tuple = ()  # ((token, logprob, bytes), ...) most likely first
    bytes: tuple = ()  # the token's exact bytes (a token may end mid-character)


@dataclass(frozen=True, slots=True)
class UpstreamWait:
    """The request waits for its model to be ready again (a crashed llama-server being restarted: the
    pool's renewal), sent once per sse.KEEPALIVE_SECONDS of waiting, before any other event. Like
    PromptProgress it goes no further than generation.py, which sends the API's keep-alive for it."""

    index: int = 0
    finish_reason: ClassVar[None] = None


# Every event that comes before a generation's answer: no token, no count of one (door.py, mcp_loop.py).
BEFORE_ANSWER = (*PROMPT_READING, UpstreamWait)
