"""Anthropic's context editing (`context_management.edits`): its request models, and the edits applied
to the translated chat messages before the prompt is fitted, as Anthropic applies them before the
prompt reaches Claude. They are what lets a long agent session fit a small context.

- `clear_tool_uses_20250919`: once the prompt passes `trigger` (input tokens, or tool uses), the results
  of all but the `keep` most recent tool uses are replaced by a placeholder, oldest first; uses of
  `exclude_tools` never; with `clear_tool_inputs` (all, or the tools named) the calls' arguments too.
  Not applied when it would clear fewer than `clear_at_least` tokens (not worth losing the cache for).
- `clear_thinking_20251015`: the thoughts (`reasoning_content`) of all but the `keep` most recent
  assistant turns that have one are removed (default: the last one; "all" keeps every one).
- `compact_20260112` (summarising old turns) is accepted and set aside: a local server has no summariser;
  the proxy's own context fitting drops the oldest turns instead.

Pure: the messages are chat messages (assistant `tool_calls`, `tool` results, `reasoning_content`),
and tokens are counted by the caller's `count_tokens(messages, at_most=None)` (services.chat.MessageEdit),
only when an edit needs a count.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from ..protocol import STRICT

PLACEHOLDER = "[Old tool result content cleared]"  # what a cleared result reads, as Claude Code's own clearing
CLEARED_INPUT = "{}"  # the arguments of a call whose input was cleared
DEFAULT_TRIGGER_TOKENS = 100_000  # Anthropic's defaults
DEFAULT_KEEP_TOOL_USES = 3
DEFAULT_KEEP_THINKING_TURNS = 1

TokenCounter = Callable[..., int]  # (messages, at_most=None) -> tokens; see services.chat.MessageEdit


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)


class InputTokens(_Strict):
    type: Literal["input_tokens"]
    value: int = Field(ge=0)


class ToolUses(_Strict):
    type: Literal["tool_uses"]
    value: int = Field(ge=0)


class ThinkingTurns(_Strict):
    type: Literal["thinking_turns"]
    value: int = Field(ge=0)


class AllThinkingTurns(_Strict):
    type: Literal["all"]


class ClearToolUses(_Strict):
    type: Literal["clear_tool_uses_20250919"]
    trigger: Annotated[InputTokens | ToolUses, Field(discriminator="type")] | None = Field(
        None, description="When clearing begins: prompt tokens, or tool uses, above this value (100,000 tokens)."
    )
    keep: ToolUses | None = Field(None, description="The most recent tool uses kept whole (3).")
    clear_at_least: InputTokens | None = Field(None, description="No clearing unless it frees this many tokens.")
    exclude_tools: list[StrictStr] | None = Field(None, description="Tools whose uses are never cleared.")
    clear_tool_inputs: bool | list[StrictStr] | None = Field(
        None, description="Clear the calls' arguments too: of every tool (true) or of those named."
    )


class ClearThinking(_Strict):
    type: Literal["clear_thinking_20251015"]
    keep: Annotated[ThinkingTurns | AllThinkingTurns, Field(discriminator="type")] | Literal["all"] | None = Field(
        None, description='The assistant turns whose thoughts are kept, most recent first (1), or "all".'
    )


class Compact(BaseModel):
    """Server-side compaction: accepted and set aside (a local server has no summariser)."""

    model_config = ConfigDict(extra="allow", **STRICT)
    type: Literal["compact_20260112"]


Edit = Annotated[ClearToolUses | ClearThinking | Compact, Field(discriminator="type")]


class ContextManagement(_Strict):
    edits: list[Edit] | None = Field(None, max_length=16)


# --- the edits -----------------------------------------------------------------------------------


def apply_edits(messages: list[dict], edits: list, count_tokens: TokenCounter) -> tuple[list[dict], list[dict]]:
    """(the messages after every edit, in the order given; Anthropic's `applied_edits` report)."""
    applied = []
    for edit in edits:
        if edit.type == "clear_thinking_20251015":
            messages, report = clear_thinking(messages, edit, count_tokens)
        elif edit.type == "clear_tool_uses_20250919":
            messages, report = clear_tool_uses(messages, edit, count_tokens)
        else:
            continue
        if report is not None:
            applied.append(report)
    return messages, applied


def clear_thinking(messages: list[dict], edit: ClearThinking, count_tokens: TokenCounter) -> tuple[list[dict], dict | None]:
    """The thoughts of all but the kept most recent thinking turns removed; None when none was."""
    turns = [n for n, message in enumerate(messages) if message.get("role") == "assistant" and message.get("reasoning_content")]
    keep = _thinking_turns_kept(edit.keep)
    cleared = set(turns if keep == 0 else turns[:-keep]) if keep is not None else set()
    if not cleared:
        return messages, None
    edited = [_without_thought(message) if n in cleared else message for n, message in enumerate(messages)]
    return edited, {
        "type": edit.type,
        "cleared_thinking_turns": len(cleared),
        "cleared_input_tokens": max(0, count_tokens(messages) - count_tokens(edited)),
    }


def _thinking_turns_kept(keep) -> int | None:
    """How many thinking turns `keep` keeps; None for all of them."""
    if keep is None:
        return DEFAULT_KEEP_THINKING_TURNS
    if keep == "all" or keep.type == "all":
        return None
    return keep.value


def _without_thought(message: dict) -> dict:
    return {key: value for key, value in message.items() if key != "reasoning_content"}


def clear_tool_uses(messages: list[dict], edit: ClearToolUses, count_tokens: TokenCounter) -> tuple[list[dict], dict | None]:
    """Old tool results (and inputs) cleared as `edit` says; None in the report when nothing was."""
    calls = tool_calls_in_order(messages)
    trigger = edit.trigger or InputTokens(type="input_tokens", value=DEFAULT_TRIGGER_TOKENS)
    before = None  # the prompt's tokens, once counted
    if trigger.type == "tool_uses":
        if len(calls) <= trigger.value:
            return messages, None
    else:
        before = count_tokens(messages, at_most=trigger.value)  # exact when above the trigger
        if before <= trigger.value:
            return messages, None
    cleared = _calls_to_clear(calls, edit)
    if not cleared:
        return messages, None
    edited = _cleared(messages, cleared, edit.clear_tool_inputs)
    freed = max(0, (count_tokens(messages) if before is None else before) - count_tokens(edited))
    if edit.clear_at_least is not None and freed < edit.clear_at_least.value:
        return messages, None
    return edited, {"type": edit.type, "cleared_tool_uses": len(cleared), "cleared_input_tokens": freed}


def tool_calls_in_order(messages: list[dict]) -> list[tuple[str, str]]:
    """(call id, tool name) of every tool call the assistant made, oldest first."""
    return [
        (call.get("id"), call.get("function", {}).get("name"))
        for message in messages
        if message.get("role") == "assistant"
        for call in message.get("tool_calls") or ()
    ]


def _calls_to_clear(calls: list[tuple[str, str]], edit: ClearToolUses) -> dict[str, str]:
    """{call id: tool name} of the calls older than the kept most recent ones, the excluded tools left."""
    keep = DEFAULT_KEEP_TOOL_USES if edit.keep is None else edit.keep.value
    older = calls[: len(calls) - keep] if keep else calls
    excluded = set(edit.exclude_tools or ())
    return {call_id: name for call_id, name in older if name not in excluded}


def _cleared(messages: list[dict], cleared: dict[str, str], clear_inputs: bool | list[str] | None) -> list[dict]:
    def inputs_cleared(name: str) -> bool:
        return clear_inputs is True or isinstance(clear_inputs, list) and name in clear_inputs

    edited = []
    for message in messages:
        if message.get("role") == "tool" and message.get("tool_call_id") in cleared:
            message = {**message, "content": PLACEHOLDER}
        elif message.get("role") == "assistant" and message.get("tool_calls"):
            message = {
                **message,
                "tool_calls": [
                    _without_input(call) if call.get("id") in cleared and inputs_cleared(cleared[call["id"]]) else call
                    for call in message["tool_calls"]
                ],
            }
        edited.append(message)
    return edited


def _without_input(call: dict[str, Any]) -> dict[str, Any]:
    return {**call, "function": {**call["function"], "arguments": CLEARED_INPUT}}


class ContextEdits:
    """A request's edits, applied once to its messages (`apply`, the hook services.chat.start_chat
    calls), and what they did (`report`: Anthropic's `context_management` of the answer)."""

    def __init__(self, edits: list):
        self.edits = edits
        self.applied: list[dict] = []

    def apply(self, messages: list[dict], count_tokens: TokenCounter) -> list[dict]:
        messages, self.applied = apply_edits(messages, self.edits, count_tokens)
        return messages

    def report(self) -> dict:
        return {"applied_edits": list(self.applied)}
