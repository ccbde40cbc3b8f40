"""Tools and tool calls into the prompt: what a template renders itself, and text for what it cannot.

`prepare(messages, tools, capabilities)` returns the messages and tools to render. A template that
renders tools (TemplateCapabilities from capabilities.probe) gets them natively, with each call's
`arguments` as an object where the template writes `arguments | tojson`, and 9-character ids where
it demands them. For what a template cannot render (SmolLM2's, FastChat's, the legacy format, most
plain templates), the messages themselves carry it:

- the tool list and the expected answer format (TOOLS_PROMPT) are added to the system message
  (or, for templates without a system role, to the first user message);
- an assistant's calls become `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` lines after
  its text;
- tool results become a user message of `<tool_response>...</tool_response>` blocks (consecutive
  results and the user message after them are joined, for templates that insist on alternation).
"""

from __future__ import annotations

import hashlib
import json
import string

from ..digests import DigestCache, digest
from .base import ChatFormatter
from .capabilities import TemplateCapabilities, probe
from .jinja import JinjaFormatter

TOOLS_PROMPT = """# Tools

You may call one or more of these tools to answer the user:
<tools>
{tools}
</tools>

To call a tool, answer with a JSON object holding its name and arguments inside <tool_call></tool_call> tags, one block per call:
<tool_call>
{{"name": "<tool name>", "arguments": {{<arguments as JSON>}}}}
</tool_call>
Tool results come back inside <tool_response></tool_response> tags."""

NO_CAPABILITIES = TemplateCapabilities(
    supports_tools=False,
    supports_tool_calls=False,
    supports_tool_responses=False,
    supports_parallel_tool_calls=False,
    supports_system_role=True,
    requires_object_arguments=False,
    requires_short_ids=False,
    tool_call_format=None,
)


def formatter_capabilities(formatter: ChatFormatter) -> TemplateCapabilities | None:
    """What a formatter renders of tools: probed once per Jinja template; None for the others,
    unless a plug-in declares its own with a tool_capabilities() method."""
    if isinstance(formatter, JinjaFormatter):
        return probe(formatter.template_source, formatter.options.bos_token, formatter.options.eos_token)
    declared = getattr(formatter, "tool_capabilities", None)
    return declared() if callable(declared) else None


def involves_tools(message: dict) -> bool:
    return "tool_calls" in message or "function_call" in message or message.get("role") in ("tool", "function")


def prepare(
    messages: list[dict], tools: list[dict] | None, capabilities: TemplateCapabilities | None
) -> tuple[list[dict], list[dict] | None]:
    """(messages, tools) to render with a template of these capabilities (None: a formatter that
    knows nothing of tools). Messages have text content already (base.normalise_messages)."""
    capabilities = capabilities or NO_CAPABILITIES
    messages = _from_legacy_functions(messages)
    names = _call_names(messages)
    prepared = [_prepare_message(message, capabilities, names) for message in messages]
    prepared = _join_user_turns(prepared)
    if tools and not capabilities.supports_tools:
        return _describe_tools(prepared, tools, capabilities), None
    return prepared, (tools or None)


_TOOLS_PROMPTS = DigestCache(max_entries=32)  # per worker: agents resend the same tools every turn


def tools_prompt(tools: list[dict]) -> str:
    """The text that describes `tools` to a model whose template cannot (written once per tool list)."""
    return _TOOLS_PROMPTS.get(digest(tools), lambda: _write_tools_prompt(tools))


def _write_tools_prompt(tools: list[dict]) -> str:
    return TOOLS_PROMPT.format(tools="\n".join(json.dumps(tool["function"], ensure_ascii=False) for tool in tools))


def short_id(call_id: str) -> str:
    """A 9-letter/digit id standing for `call_id` (Mistral's templates accept no other), the same
    for a call and the tool_call_id of its result."""
    if len(call_id) == 9 and call_id.isalnum():
        return call_id
    digest = int.from_bytes(hashlib.sha256(call_id.encode()).digest()[:8], "big")
    letters = []
    for _ in range(9):
        digest, remainder = divmod(digest, len(_ALPHANUMERIC))
        letters.append(_ALPHANUMERIC[remainder])
    return "".join(letters)


_ALPHANUMERIC = string.ascii_letters + string.digits


def _from_legacy_functions(messages: list[dict]) -> list[dict]:
    """Deprecated history: an assistant's `function_call` and a `function` role's result, as a
    tool call and a tool result (the pair shares an id made from their position)."""
    converted, pending_id = [], None
    for position, message in enumerate(messages):
        if message.get("function_call") and not message.get("tool_calls"):
            pending_id = f"call_function{position}"
            call = {"id": pending_id, "type": "function", "function": message["function_call"]}
            message = {key: value for key, value in message.items() if key != "function_call"} | {"tool_calls": [call]}
        elif message.get("role") == "function":
            message = {**message, "role": "tool", "tool_call_id": pending_id or f"call_function{position}"}
        converted.append(message)
    return converted


def _call_names(messages: list[dict]) -> dict[str, str]:
    """tool_call_id -> the called function's name, to name the results that do not say."""
    return {call.get("id"): call["function"]["name"] for message in messages for call in message.get("tool_calls") or ()}


def _prepare_message(message: dict, capabilities: TemplateCapabilities, names: dict[str, str]) -> dict:
    role = message.get("role")
    if role == "assistant" and message.get("tool_calls"):
        if capabilities.supports_tool_calls:
            return {**message, "tool_calls": [_native_call(call, capabilities) for call in message["tool_calls"]]}
        text = "\n".join(filter(None, [message.get("content"), *map(_call_text, message["tool_calls"])]))
        return _without(message, "tool_calls") | {"content": text}
    if role == "assistant" and "tool_calls" in message:
        return _without(message, "tool_calls")  # [] or null: templates test only for presence
    if role == "tool":
        name = message.get("name") or names.get(message.get("tool_call_id"), "")
        if capabilities.supports_tool_responses:
            call_id = message.get("tool_call_id") or ""
            return {**message, "name": name, "tool_call_id": short_id(call_id) if capabilities.requires_short_ids else call_id}
        return {"role": "user", "content": f"<tool_response>\n{message.get('content', '')}\n</tool_response>", "from_tool": True}
    return message


def _native_call(call: dict, capabilities: TemplateCapabilities) -> dict:
    function = call["function"]
    arguments = function.get("arguments", "{}")
    if capabilities.requires_object_arguments and isinstance(arguments, str):
        arguments = _as_object(arguments)
    elif not capabilities.requires_object_arguments and not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    call_id = call.get("id") or ""
    return {
        "id": short_id(call_id) if capabilities.requires_short_ids else call_id,
        "type": "function",
        "function": {"name": function["name"], "arguments": arguments},
    }


def _as_object(arguments: str):
    """A call's JSON-string arguments as the object a template writes with tojson; text that is not
    JSON stays text (the template then shows what the model wrote)."""
    try:
        return json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return arguments


def _call_text(call: dict) -> str:
    function = call["function"]
    arguments = (
        _as_object(function.get("arguments", "{}")) if isinstance(function.get("arguments"), str) else function.get("arguments")
    )
    body = json.dumps({"name": function["name"], "arguments": arguments}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"


def _join_user_turns(messages: list[dict]) -> list[dict]:
    """Tool results turned user messages, joined with their neighbouring user messages."""
    joined: list[dict] = []
    for message in messages:
        previous = joined[-1] if joined else None
        if (
            previous is not None
            and message.get("role") == "user"
            and previous.get("role") == "user"
            and (message.get("from_tool") or previous.get("from_tool"))
        ):
            joined[-1] = {**previous, "content": previous["content"] + "\n" + message["content"], "from_tool": True}
        else:
            joined.append(message)
    return [_without(message, "from_tool") for message in joined]


def _describe_tools(messages: list[dict], tools: list[dict], capabilities: TemplateCapabilities) -> list[dict]:
    description = tools_prompt(tools)
    if messages and messages[0].get("role") in ("system", "developer"):
        first = messages[0]
        return [{**first, "content": f"{first['content']}\n\n{description}" if first["content"] else description}, *messages[1:]]
    if capabilities.supports_system_role:
        return [{"role": "system", "content": description}, *messages]
    position = next((n for n, message in enumerate(messages) if message.get("role") == "user"), 0)
    target = messages[position]
    return [
        *messages[:position],
        {**target, "content": f"{description}\n\n{target.get('content', '')}"},
        *messages[position + 1 :],
    ]


def _without(message: dict, key: str) -> dict:
    return {name: value for name, value in message.items() if name != key}
