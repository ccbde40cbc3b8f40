"""System and developer messages where the template can take them: in place, never dropped.

Agents send instructions in the middle of a conversation (Claude Code's `role: "system"` turns,
Codex's developer messages), and many templates take a system message only first: Qwen3.5's raises
"System message must be at the beginning", Llama 2's and Mistral's break their user/assistant
alternation, Alpaca's and Inkbot's move the last one to the top, Vicuna's drops it, Gemma's takes
none at all. `place_system_turns` leaves the messages alone where the template renders a late system
message in place (capabilities.probe: `supports_late_system`). Elsewhere:

- the system messages before the first turn (user, assistant or tool message) become one, their texts
  joined by a blank line, where the first was; for a template without a system role they are treated
  like the late ones below;
- each later run of system (and developer) messages becomes user-side text marked as an instruction
  (SYSTEM_INSTRUCTION), joined to a neighbour so that user and assistant turns still alternate: to
  the end of the tool results that answer the call before it, else to the end of the user message or
  tool result before it, else to the start of the user message after it, else (between two answers,
  or after the last one) a user message of its own. Each lands exactly where it was.

Which neighbour takes an instruction depends only on the messages next to it, so the next turn of a
conversation renders it the same way and the prompt grows at its end (llama.cpp's cache stays valid).
"""

from __future__ import annotations

from .capabilities import TemplateCapabilities

SYSTEM_ROLES = ("system", "developer")
TURN_ROLES = ("user", "assistant", "tool", "function")
SYSTEM_INSTRUCTION = "<system-instruction>\n{}\n</system-instruction>"


def place_system_turns(messages: list[dict], capabilities: TemplateCapabilities) -> list[dict]:
    """`messages` (text content) with every system and developer message where a template of these
    capabilities renders it; the same list when it renders them all in place."""
    if capabilities.supports_late_system or not any(_is_system(m) for m in messages):
        return messages
    if not capabilities.supports_system_role:
        return _as_instructions(messages)
    first_turn = next((n for n, m in enumerate(messages) if _role(m) in TURN_ROLES), len(messages))
    return _with_one_system(messages[:first_turn]) + _as_instructions(messages[first_turn:])


def _instruction(system_messages: list[dict]) -> str:
    """The marked text that carries these system messages in a user-side turn ("" if they are empty)."""
    text = _joined_text(system_messages)
    return SYSTEM_INSTRUCTION.format(text) if text else ""


def _as_instructions(messages: list[dict]) -> list[dict]:
    """Every run of system messages in `messages` joined to a neighbour as marked text (see above)."""
    placed: list[dict] = []
    position = 0
    while position < len(messages):
        if not _is_system(messages[position]):
            placed.append(messages[position])
            position += 1
            continue
        end = position
        while end < len(messages) and _is_system(messages[end]):
            end += 1
        position = _place(placed, _instruction(messages[position:end]), messages, end)
    return placed


def _place(placed: list[dict], instruction: str, messages: list[dict], following: int) -> int:
    """Joins `instruction` to `placed` or to messages[following:]; returns where to go on from."""
    if not instruction:
        return following
    results_end = following
    while results_end < len(messages) and _role(messages[results_end]) == "tool":
        results_end += 1
    if results_end > following:  # between a call and its results: after the results
        placed += messages[following : results_end - 1]
        placed.append(_appended(messages[results_end - 1], instruction))
        return results_end
    if placed and _role(placed[-1]) in ("user", "tool"):
        placed[-1] = _appended(placed[-1], instruction)
        return following
    if following < len(messages) and _role(messages[following]) == "user":
        user = messages[following]
        placed.append({**user, "content": f"{instruction}\n\n{user['content']}" if user["content"] else instruction})
        return following + 1
    placed.append({"role": "user", "content": instruction})
    return following


def _appended(message: dict, instruction: str) -> dict:
    content = message.get("content") or ""
    return {**message, "content": f"{content}\n\n{instruction}" if content else instruction}


def _with_one_system(head: list[dict]) -> list[dict]:
    """The messages before the first turn with their system messages joined into the first one; other
    roles there (Inkbot's meta-current_date, ...) as they were."""
    systems = [m for m in head if _is_system(m)]
    if len(systems) < 2:
        return head
    joined = {**systems[0], "content": _joined_text(systems)}
    return [joined if m is systems[0] else m for m in head if m is systems[0] or not _is_system(m)]


def _joined_text(system_messages: list[dict]) -> str:
    return "\n\n".join(m["content"] for m in system_messages if m.get("content"))


def _is_system(message: dict) -> bool:
    return _role(message) in SYSTEM_ROLES


def _role(message: dict) -> str:
    return message.get("role", "")
