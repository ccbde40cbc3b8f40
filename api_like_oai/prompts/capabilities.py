"""What a Jinja chat template can do with tools, found by rendering small probe conversations.

Each probe renders a conversation in the sandbox and looks for marker strings that no template
contains; a render that raises, for whatever reason, only means "not supported". The native
tool-call format is read from the template's text. Pure and cached by template source.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from ..tools.formats import detect as detect_format
from .jinja import compile_template

_MARK = "Probe-7f3a9c"
USER_TEXT = f"{_MARK}-user"
SYSTEM_TEXT = f"{_MARK}-system"
LATE_SYSTEM_TEXT = f"{_MARK}-late-system"
ASSISTANT_TEXT = f"{_MARK}-assistant"
NEXT_USER_TEXT = f"{_MARK}-next-user"
RESPONSE_TEXT = f"{_MARK}-response"
TOOL_NAME = "probe_7f3a9c_tool"
CALL_NAMES = ("probe_7f3a9c_first", "probe_7f3a9c_second")
ARGUMENT_NAME = "probe_7f3a9c_argument"
ARGUMENT_VALUE = f"{_MARK}-value"
SHORT_IDS = ("p7f3a9c01", "p7f3a9c02")  # 9 alphanumerics, as Mistral's templates demand
LONG_IDS = ("call_probe7f3a9c000000000001", "call_probe7f3a9c000000000002")

_USER = {"role": "user", "content": USER_TEXT}
_TOOL = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "A probe tool.",
        "parameters": {
            "type": "object",
            "properties": {ARGUMENT_NAME: {"type": "string", "description": "A probe argument."}},
            "required": [ARGUMENT_NAME],
        },
    },
}
_ARGUMENTS = {ARGUMENT_NAME: ARGUMENT_VALUE}


@dataclass(frozen=True)
class TemplateCapabilities:
    """What a chat template renders; see `probe`."""

    supports_tools: bool  # renders the `tools` variable (a tool's name appears)
    supports_tool_calls: bool  # renders assistant messages' tool_calls (name and arguments appear)
    supports_tool_responses: bool  # renders role "tool" messages (their content appears)
    supports_parallel_tool_calls: bool  # two calls in one assistant message both appear
    supports_system_role: bool  # a system message's content appears
    requires_object_arguments: bool  # arguments must be a dict: a JSON string is double-encoded or fails
    requires_short_ids: bool  # tool call ids must be 9 alphanumerics (longer ones fail)
    tool_call_format: str | None  # "hermes", "mistral", "llama3", or None: read from the template text
    # a system message after the first turn appears where it stands (not raised on, dropped or moved);
    # a default, so that plug-ins declaring their capabilities before it existed still work
    supports_late_system: bool = True


@functools.lru_cache(maxsize=64)
def probe(template_source: str, bos_token: str = "", eos_token: str = "") -> TemplateCapabilities:
    """The capabilities of `template_source`; never raises (a template that fails supports nothing)."""
    render = functools.partial(_render, template_source, bos_token, eos_token)
    arguments = _working_arguments(render)
    supports_tool_calls = arguments is not None
    return TemplateCapabilities(
        supports_tools=TOOL_NAME in render([_USER], tools=[_TOOL]),
        supports_tool_calls=supports_tool_calls,
        supports_tool_responses=_renders_tool_responses(render, arguments),
        supports_parallel_tool_calls=supports_tool_calls and _renders_both_calls(render, arguments),
        supports_system_role=SYSTEM_TEXT in render([{"role": "system", "content": SYSTEM_TEXT}, _USER]),
        requires_object_arguments=supports_tool_calls and not isinstance(arguments, str),
        requires_short_ids=supports_tool_calls and _requires_short_ids(render, arguments),
        tool_call_format=detect_format(template_source),
        supports_late_system=_places_late_system(render),
    )


def _render(template_source: str, bos_token: str, eos_token: str, messages: list[dict], tools: list | None = None) -> str:
    """The rendered text, or "" if the template fails in any way."""
    variables = {"messages": messages, "add_generation_prompt": False, "bos_token": bos_token, "eos_token": eos_token}
    if tools is not None:
        variables["tools"] = tools
    try:
        return compile_template(template_source).render(variables)
    except Exception:  # noqa: BLE001 - a probe that fails only means "not supported"
        return ""


def _places_late_system(render) -> bool:
    """True if a system message after an answer, and one right after a user message, each appear
    between the messages around it: Qwen3.5's template raises ("System message must be at the
    beginning"), Llama 2's breaks its alternation, Alpaca's moves the last one to the top, Vicuna's
    drops it."""
    system = {"role": "system", "content": SYSTEM_TEXT}
    late = {"role": "system", "content": LATE_SYSTEM_TEXT}
    after_answer = render(
        [system, _USER, {"role": "assistant", "content": ASSISTANT_TEXT}, late, {"role": "user", "content": NEXT_USER_TEXT}]
    )
    after_user = render([system, _USER, late])
    return _in_order(after_answer, ASSISTANT_TEXT, LATE_SYSTEM_TEXT, NEXT_USER_TEXT) and _in_order(
        after_user, USER_TEXT, LATE_SYSTEM_TEXT
    )


def _in_order(text: str, *markers: str) -> bool:
    positions = [text.find(marker) for marker in markers]
    return -1 not in positions and positions == sorted(positions)


def _call(name: str, arguments, call_id: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _calls_message(*calls: dict) -> dict:
    # content "" is what the formatter passes for OpenAI's null content (base.normalise_messages)
    return {"role": "assistant", "content": "", "tool_calls": list(calls)}


def _one_call(arguments, call_id: str = SHORT_IDS[0]) -> list[dict]:
    return [_USER, _calls_message(_call(CALL_NAMES[0], arguments, call_id))]


def _shows_call(text: str, name: str = CALL_NAMES[0]) -> bool:
    """True if `text` has the call's name and its arguments as JSON (or keyword) syntax, not a
    double-encoded string: the argument name must not sit behind an escaped quote."""
    return name in text and ARGUMENT_VALUE in text and ARGUMENT_NAME in text and f'\\"{ARGUMENT_NAME}' not in text


def _working_arguments(render) -> str | dict | None:
    """The first argument form the template renders right: a JSON string (OpenAI's), an object, or None."""
    for arguments in (json.dumps(_ARGUMENTS), _ARGUMENTS):
        if _shows_call(render(_one_call(arguments))):
            return arguments
    return None


def _renders_both_calls(render, arguments) -> bool:
    calls = [_call(name, arguments, call_id) for name, call_id in zip(CALL_NAMES, SHORT_IDS, strict=True)]
    text = render([_USER, _calls_message(*calls)])
    return all(_shows_call(text, name) for name in CALL_NAMES)


def _response(call_id: str = SHORT_IDS[0]) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "name": CALL_NAMES[0], "content": RESPONSE_TEXT}


def _renders_tool_responses(render, arguments) -> bool:
    """A tool message's content appears after a call (if the template renders calls) or after the user."""
    conversations = [[_USER, _response()]]
    if arguments is not None:
        conversations.insert(0, [*_one_call(arguments), _response()])
    return any(RESPONSE_TEXT in render(conversation) for conversation in conversations)


def _requires_short_ids(render, arguments) -> bool:
    """True if a call, alone or followed by its result, renders with a 9-character id but not a long one."""
    return any(
        _shows_call(render(_call_and_result(arguments, SHORT_IDS[0], with_result)))
        and not _shows_call(render(_call_and_result(arguments, LONG_IDS[0], with_result)))
        for with_result in (False, True)
    )


def _call_and_result(arguments, call_id: str, with_result: bool) -> list[dict]:
    return [*_one_call(arguments, call_id), *([_response(call_id)] if with_result else [])]
