"""The one internal event type that every upstream's answer is normalised into."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GenerationEvent:
    """A piece of one generation: new text, and on the last event why it stopped and the counts."""

    text: str = ""
    finish_reason: str | None = None        # "stop" | "length" (| "tool_calls") on the final event, else None
    prompt_tokens: int | None = None        # counts so far, where the upstream tells them
    completion_tokens: int | None = None
    logprobs: tuple | None = None           # TokenLogprob items for the tokens of `text`
    index: int = 0                          # which choice (n > 1) this event belongs to
    tool_calls: tuple | None = None         # ToolCallDeltas parsed out of the text (tools/parser.py)
    reasoning: str = ""                     # the model's thought, split out of the text (reasoning.py)
    stop_word: str | None = None            # the stop string that ended the generation, if one did
    cached_tokens: int | None = None        # of prompt_tokens, how many llama.cpp took from its cache


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    token: str
    logprob: float
    top: tuple = ()                          # ((token, logprob, bytes), ...) most likely first
    bytes: tuple = ()                        # the token's exact bytes (a token may end mid-character)
