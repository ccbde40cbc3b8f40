"""Anthropic's context editing applied to translated chat messages, as its reference defines the edits:
the trigger, keep, clear_at_least, exclude_tools and clear_tool_inputs of clear_tool_uses_20250919 and
the keep of clear_thinking_20251015; pure, with the token count the caller's."""

from __future__ import annotations

import copy
import json

import pytest

from api_like_oai.dialects.anthropic_edits import (
    PLACEHOLDER,
    ContextEdits,
    ContextManagement,
    apply_edits,
    clear_thinking,
    clear_tool_uses,
)


def count_tokens(messages: list[dict], at_most: int | None = None) -> int:
    """A stand-in tokenizer: one token per character of the messages' JSON."""
    return len(json.dumps(messages))


def edits(*edit_list: dict) -> list:
    return ContextManagement.model_validate({"edits": list(edit_list)}).edits


def call(call_id: str, name: str, arguments: str = '{"path": "a.py"}') -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def session(rounds: list[tuple[str, str]], result: str = "x" * 200) -> list[dict]:
    """A task and one assistant turn per (call id, tool name), each with its result."""
    messages = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Fix the bug."}]
    for call_id, name in rounds:
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call(call_id, name)]},
            {"role": "tool", "tool_call_id": call_id, "content": f"{result} from {call_id}"},
        ]
    return messages


FIVE = [("t1", "Read"), ("t2", "Bash"), ("t3", "Read"), ("t4", "Edit"), ("t5", "Bash")]


def results(messages: list[dict]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}


def arguments(messages: list[dict]) -> dict[str, str]:
    return {c["id"]: c["function"]["arguments"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or ()}


def test_below_the_trigger_nothing_is_cleared():
    messages = session(FIVE)
    (edit,) = edits({"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 100_000}})
    assert clear_tool_uses(messages, edit, count_tokens) == (messages, None)


def test_past_the_trigger_all_but_the_kept_most_recent_results_are_cleared_oldest_first():
    messages = session(FIVE)
    original = copy.deepcopy(messages)
    (edit,) = edits({"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 500}})
    edited, report = clear_tool_uses(messages, edit, count_tokens)
    assert results(edited) == {
        "t1": PLACEHOLDER,
        "t2": PLACEHOLDER,  # the default keep: 3 tool uses
        "t3": results(messages)["t3"],
        "t4": results(messages)["t4"],
        "t5": results(messages)["t5"],
    }
    assert arguments(edited) == arguments(messages)  # by default only the results are cleared
    assert report == {
        "type": "clear_tool_uses_20250919",
        "cleared_tool_uses": 2,
        "cleared_input_tokens": count_tokens(messages) - count_tokens(edited),
    }
    assert report["cleared_input_tokens"] > 300
    assert messages == original  # the caller's messages are left as they were


def test_keep_counts_tool_uses_not_turns():
    messages = session([("t1", "Read")])
    messages.insert(2, {"role": "assistant", "content": "Two at once.", "tool_calls": [call("p1", "Grep"), call("p2", "Glob")]})
    messages[3:3] = [
        {"role": "tool", "tool_call_id": "p1", "content": "y" * 300},
        {"role": "tool", "tool_call_id": "p2", "content": "z" * 300},
    ]
    (edit,) = edits(
        {
            "type": "clear_tool_uses_20250919",
            "trigger": {"type": "tool_uses", "value": 2},
            "keep": {"type": "tool_uses", "value": 2},
        }
    )
    edited, report = clear_tool_uses(messages, edit, count_tokens)
    assert results(edited) == {"p1": PLACEHOLDER, "p2": "z" * 300, "t1": results(messages)["t1"]}
    assert report["cleared_tool_uses"] == 1


@pytest.mark.parametrize(
    "trigger, cleared",
    [
        ({"type": "tool_uses", "value": 5}, None),  # not above it
        ({"type": "tool_uses", "value": 4}, 2),
    ],
)
def test_a_tool_uses_trigger_counts_the_calls(trigger, cleared):
    (edit,) = edits({"type": "clear_tool_uses_20250919", "trigger": trigger})
    _, report = clear_tool_uses(session(FIVE), edit, count_tokens)
    assert (report or {}).get("cleared_tool_uses") == cleared


def test_excluded_tools_are_never_cleared():
    (edit,) = edits(
        {
            "type": "clear_tool_uses_20250919",
            "trigger": {"type": "input_tokens", "value": 0},
            "keep": {"type": "tool_uses", "value": 1},
            "exclude_tools": ["Read"],
        }
    )
    edited, report = clear_tool_uses(session(FIVE), edit, count_tokens)
    assert [call_id for call_id, content in results(edited).items() if content == PLACEHOLDER] == ["t2", "t4"]
    assert report["cleared_tool_uses"] == 2


@pytest.mark.parametrize(
    "clear_tool_inputs, inputs_cleared", [(True, ["t1", "t2", "t3", "t4"]), (["Read"], ["t1", "t3"]), (False, []), (None, [])]
)
def test_tool_inputs_are_cleared_when_asked(clear_tool_inputs, inputs_cleared):
    (edit,) = edits(
        {
            "type": "clear_tool_uses_20250919",
            "trigger": {"type": "input_tokens", "value": 0},
            "keep": {"type": "tool_uses", "value": 1},
            "clear_tool_inputs": clear_tool_inputs,
        }
    )
    edited, _ = clear_tool_uses(session(FIVE), edit, count_tokens)
    assert [call_id for call_id, args in arguments(edited).items() if args == "{}"] == inputs_cleared
    assert [call_id for call_id, content in results(edited).items() if content == PLACEHOLDER] == ["t1", "t2", "t3", "t4"]


def test_clear_at_least_holds_back_an_edit_that_frees_too_little():
    messages = session(FIVE)
    freed = count_tokens(messages) - count_tokens(
        clear_tool_uses(
            messages, *edits({"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 0}}), count_tokens
        )[0]
    )
    for at_least, applied in ((freed, True), (freed + 1, False)):
        (edit,) = edits(
            {
                "type": "clear_tool_uses_20250919",
                "trigger": {"type": "input_tokens", "value": 0},
                "clear_at_least": {"type": "input_tokens", "value": at_least},
            }
        )
        edited, report = clear_tool_uses(messages, edit, count_tokens)
        assert (report is not None, edited != messages) == (applied, applied)


def test_nothing_older_than_the_kept_uses_is_no_edit():
    (edit,) = edits({"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 0}})
    messages = session(FIVE[:3])
    assert clear_tool_uses(messages, edit, count_tokens) == (messages, None)


def thinking_session(turns: int) -> list[dict]:
    messages = [{"role": "user", "content": "Count."}]
    for n in range(turns):
        messages += [
            {"role": "assistant", "content": str(n), "reasoning_content": f"thought {n}"},
            {"role": "user", "content": "Next."},
        ]
    messages.insert(2, {"role": "assistant", "content": "no thought here"})
    return messages


def thoughts(messages: list[dict]) -> list[str]:
    return [m["reasoning_content"] for m in messages if "reasoning_content" in m]


@pytest.mark.parametrize(
    "keep, kept",
    [
        (None, ["thought 3"]),  # Anthropic's default: the last thinking turn
        ({"type": "thinking_turns", "value": 2}, ["thought 2", "thought 3"]),
        ({"type": "thinking_turns", "value": 0}, []),
        ("all", ["thought 0", "thought 1", "thought 2", "thought 3"]),
        ({"type": "all"}, ["thought 0", "thought 1", "thought 2", "thought 3"]),
    ],
)
def test_clear_thinking_keeps_the_most_recent_thinking_turns(keep, kept):
    messages = thinking_session(4)
    (edit,) = edits({"type": "clear_thinking_20251015", **({"keep": keep} if keep is not None else {})})
    edited, report = clear_thinking(messages, edit, count_tokens)
    assert thoughts(edited) == kept
    assert [m["content"] for m in edited] == [m["content"] for m in messages]
    if len(kept) == 4:
        assert report is None and edited is messages
    else:
        assert report == {
            "type": "clear_thinking_20251015",
            "cleared_thinking_turns": 4 - len(kept),
            "cleared_input_tokens": count_tokens(messages) - count_tokens(edited),
        }


def test_edits_apply_in_order_and_report_what_they_did():
    messages = session(FIVE)
    messages[2]["reasoning_content"] = "I should read the file first."
    messages[-2]["reasoning_content"] = "Now run it."
    edit_list = edits(
        {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}},
        {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 0}},
        {"type": "compact_20260112"},
    )  # set aside: no summariser here
    edited, applied = apply_edits(messages, edit_list, count_tokens)
    assert thoughts(edited) == ["Now run it."]
    assert [report["type"] for report in applied] == ["clear_thinking_20251015", "clear_tool_uses_20250919"]
    context_edits = ContextEdits(edit_list)
    assert context_edits.apply(messages, count_tokens) == edited
    assert context_edits.report() == {"applied_edits": applied}
