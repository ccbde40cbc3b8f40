"""The Responses API's tool kinds as the functions a model is offered, and the model's calls of those
functions as the Responses API's items; both ways, so that a call the client sends back in `input`
reaches the prompt under the name the model was offered.

- `function`: offered as it is.
- `namespace`: each of its functions (or custom tools) offered as `namespace.name`, made unique
  against every other offered name; a call comes back as a `function_call` (or `custom_tool_call`)
  with `name` and `namespace` apart, as the API defines them.
- `custom`: freeform text input, offered as a function of one string parameter, `input`; its
  `format` (a Lark or regex grammar) is described to the model, not enforced. A call is a
  `custom_tool_call` with that `input`.
- `local_shell`: offered as the function `local_shell` (a command as an argument list, ...); a call
  is a `local_shell_call` with its `exec` action.
- `tool_search` run by the client (`execution: "client"`): offered as a function; a call is a
  `tool_search_call`, and the tools of the `tool_search_output` items in the input are offered too.
- `mcp`: a server's tools, from its `mcp_list_tools` item, offered by their own names; the proxy runs
  their calls (services/mcp_loop.py).
- Every other kind (`web_search*`, `file_search`, `code_interpreter`, `image_generation`,
  `computer*`, `shell`, `apply_patch`, a server-side `tool_search`, ...) runs on OpenAI's servers or
  needs its own call protocol: it is set aside (left out of the prompt, named in the
  `X-Tools-Set-Aside` response header), never a 400, so an agent that lists it still works.

Pure: no I/O; `Toolbox` is a function of the request's `tools`, made once per request
(`ResponsesRequest.toolbox()`) for the translation, the shape and the headers.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictStr, Tag

from ..backends.events import GenerationEvent
from ..protocol import STRICT, TOOL_NAME
from ..tools.grammar import MAX_SCHEMA_BYTES
from .blocks import arguments_object
from .common import function_tool, named_tool_choice
from .responses_mcp import MCP, McpTool

FUNCTION, CUSTOM, LOCAL_SHELL, NAMESPACE, TOOL_SEARCH = "function", "custom", "local_shell", "namespace", "tool_search"
RUN_HERE = (FUNCTION, CUSTOM, LOCAL_SHELL, NAMESPACE)
CHOICE_SET_ASIDE_HEADER = "X-Tool-Choice-Set-Aside"
INPUT_KEY = "input"  # a custom tool's one parameter
CUSTOM_PARAMETERS = {
    "type": "object",
    "required": [INPUT_KEY],
    "additionalProperties": False,
    "properties": {INPUT_KEY: {"type": "string", "description": "The tool's input, as free text."}},
}
LOCAL_SHELL_PARAMETERS = {
    "type": "object",
    "additionalProperties": False,
    "required": ["command"],
    "properties": {
        "command": {
            "type": "array",
            "items": {"type": "string"},
            "description": 'The program and its arguments, e.g. ["ls", "-la"].',
        },
        "working_directory": {"type": "string"},
        "timeout_ms": {"type": "integer"},
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
        "user": {"type": "string"},
    },
}
LOCAL_SHELL_DESCRIPTION = "Run a command in the user's local shell and read its output."
TOOL_SEARCH_PARAMETERS = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
TOOL_SEARCH_DESCRIPTION = "Search for more tools; those found can be called from the next turn on."


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, **STRICT)


_Callers = Annotated[list[Literal["direct", "programmatic"]] | None, Field(None, description="Accepted and ignored.")]
_Async = Annotated[bool | None, Field(None, alias="async", description="Accepted and ignored: calls are answered at once.")]
_Deferred = Annotated[
    bool | None,
    Field(None, description="Accepted; the tool is offered like the others (a local server has no tool-search service)."),
]


class FunctionTool(_Strict):
    type: Literal["function"]
    name: StrictStr = Field(pattern=TOOL_NAME)
    description: StrictStr | None = None
    parameters: dict[str, Any] | None = Field(None, description="A JSON schema of type object.")
    strict: bool | None = None
    allowed_callers: _Callers = None
    async_: _Async = None
    defer_loading: _Deferred = None
    output_schema: dict[str, Any] | None = Field(None, description="Accepted and ignored.")


class CustomFormat(_Strict):
    type: Literal["text", "grammar"]
    syntax: Literal["lark", "regex"] | None = None
    definition: StrictStr | None = Field(
        None, max_length=MAX_SCHEMA_BYTES, description="Shown to the model with the tool; not enforced."
    )


class CustomToolDefinition(_Strict):
    type: Literal["custom"]
    name: StrictStr = Field(pattern=TOOL_NAME)
    description: StrictStr | None = None
    format: CustomFormat | None = None
    allowed_callers: _Callers = None
    async_: _Async = None
    defer_loading: _Deferred = None


def _kind(value) -> str | None:
    """The tag of a tool (or tool choice) in a raw body or a model: its `type`."""
    return value.get("type") if isinstance(value, dict) else getattr(value, "type", None)


NamespacedTool = Annotated[FunctionTool | CustomToolDefinition, Field(discriminator="type")]


class NamespaceTool(_Strict):
    type: Literal["namespace"]
    name: StrictStr = Field(pattern=TOOL_NAME)
    description: StrictStr | None = None
    tools: list[NamespacedTool] = Field(max_length=512)


class LocalShellTool(_Strict):
    type: Literal["local_shell"]


class ToolSearchTool(_Strict):
    """A tool search the client runs (`execution: "client"`): offered as a function; the tools its
    `tool_search_output` items return are offered from then on. A server-side one is set aside."""

    type: Literal["tool_search"]
    execution: Literal["client"]
    description: StrictStr | None = None
    parameters: dict[str, Any] | None = Field(None, description="A JSON schema of type object.")


def other_than(*names: str) -> dict:
    """The JSON schema of a catch-all's `type`: any string but `names`, which their own models take (so
    that /openapi.json's oneOf has one match per value, as the discriminator has)."""
    return {"not": {"enum": list(names)}}


class SetAsideTool(BaseModel):
    """A tool only OpenAI's servers run (or one of a kind this proxy does not know): set aside."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "not": {  # a client's tool search is ToolSearchTool
                "properties": {"type": {"const": TOOL_SEARCH}, "execution": {"const": "client"}},
                "required": ["type", "execution"],
            }
        },
        **STRICT,
    )
    type: StrictStr = Field(json_schema_extra=other_than(*RUN_HERE, MCP))


def _tool_tag(value) -> str:
    kind = _kind(value)
    if kind == TOOL_SEARCH:
        execution = value.get("execution") if isinstance(value, dict) else getattr(value, "execution", None)
        return TOOL_SEARCH if execution == "client" else "set_aside"
    return kind if kind in RUN_HERE or kind == MCP else "set_aside"


Tool = Annotated[
    Annotated[FunctionTool, Tag(FUNCTION)]
    | Annotated[CustomToolDefinition, Tag(CUSTOM)]
    | Annotated[McpTool, Tag(MCP)]
    | Annotated[NamespaceTool, Tag(NAMESPACE)]
    | Annotated[LocalShellTool, Tag(LOCAL_SHELL)]
    | Annotated[ToolSearchTool, Tag(TOOL_SEARCH)]
    | Annotated[SetAsideTool, Tag("set_aside")],
    Discriminator(_tool_tag),
]


# --- tool_choice -------------------------------------------------------------------------------


class NamedChoice(_Strict):
    type: Literal["function", "custom"]
    name: StrictStr
    namespace: StrictStr | None = Field(None, description="For a function (or custom tool) of a namespace tool.")


class AllowedToolsChoice(_Strict):
    type: Literal["allowed_tools"]
    mode: Literal["auto", "required"]
    tools: list[dict[str, Any]] = Field(max_length=512)


class OtherChoice(BaseModel):
    """`local_shell`, or a tool set aside (hosted tools, mcp, shell, ...): the latter becomes "auto"."""

    model_config = ConfigDict(extra="allow", **STRICT)
    type: StrictStr = Field(json_schema_extra=other_than(FUNCTION, CUSTOM, "allowed_tools"))


def _choice_tag(value) -> str:
    kind = _kind(value)
    return "named" if kind in (FUNCTION, CUSTOM) else "allowed" if kind == "allowed_tools" else "other"


ToolChoice = (
    Literal["none", "auto", "required"]
    | Annotated[
        Annotated[NamedChoice, Tag("named")]
        | Annotated[AllowedToolsChoice, Tag("allowed")]
        | Annotated[OtherChoice, Tag("other")],
        Discriminator(_choice_tag),
    ]
)


# --- what the model is offered -------------------------------------------------------------------


@dataclass(frozen=True)
class Offered:
    """One function the model sees, and what it stands for in the Responses API."""

    name: str  # the name the model sees and writes
    kind: str  # FUNCTION, CUSTOM, LOCAL_SHELL, TOOL_SEARCH or MCP
    tool_name: str  # the tool's own name (inside its namespace, if any)
    namespace: str | None  # its namespace tool; an MCP tool's server_label
    chat_tool: dict  # the chat request's tool
    param: str  # where it came from in the request, for refusals ("tools.4.tools.1")


@dataclass(frozen=True)
class Toolbox:
    """The functions offered for a request's tools, in the request's order, and the tools set aside."""

    offered: tuple[Offered, ...] = ()
    set_aside: tuple[str, ...] = ()

    @functools.cached_property
    def _by_name(self) -> dict[str, Offered]:
        return {offered.name: offered for offered in self.offered}

    def by_name(self, name: str | None) -> Offered | None:
        """The offered function the model calls `name` (the shape asks once per call delta)."""
        return self._by_name.get(name)

    def find(self, kind: str, tool_name: str, namespace: str | None = None) -> Offered | None:
        """The offered function for a tool named as the API names it; a name without a namespace
        may also be the offered name itself, or the only namespaced tool of that name."""
        kinds = (FUNCTION, CUSTOM) if kind in (FUNCTION, CUSTOM) else (kind,)
        candidates = [o for o in self.offered if o.kind in kinds and o.tool_name == tool_name]
        exact = [o for o in candidates if o.namespace == namespace]
        if exact or namespace is not None:
            return exact[0] if exact else None
        return self.by_name(tool_name) or (candidates[0] if len(candidates) == 1 else None)

    def names_of(self, tools: list) -> list[str]:
        """The offered names of `tools` (a tool search's findings), namespaced functions one by one."""
        inner = [(tool, namespace.name) for namespace in tools if namespace.type == NAMESPACE for tool in namespace.tools]
        listed = [(tool, None) for tool in tools if tool.type in (FUNCTION, CUSTOM)] + inner
        return [self.name_for(tool.type, tool.name, namespace) for tool, namespace in listed]

    def name_for(self, kind: str, tool_name: str, namespace: str | None = None) -> str:
        """The name a call of this tool is written under in the prompt (a tool no longer offered keeps
        a name of the same form)."""
        offered = self.find(kind, tool_name, namespace)
        if offered is not None:
            return offered.name
        return f"{namespace}.{tool_name}" if namespace else tool_name


def toolbox(tools: list | None, loaded: list[tuple[str, list]] = (), listed: list[tuple[str, McpTool, list]] = ()) -> Toolbox:
    """The functions offered for `tools` (the request's, validated): names of top-level functions and
    custom tools are kept; namespaced ones, `local_shell` and `tool_search` get names that collide with
    none of them. `loaded`: (where, tools) that a client's tool search returned in the input, offered
    after the request's own unless already offered. `listed`: (where, mcp tool, its server's tools as
    an mcp_list_tools item lists them), offered by their own names when allowed_tools allows them."""
    offering = _Offering({tool.name for tool in tools or () if tool.type in (FUNCTION, CUSTOM)})
    for n, tool in enumerate(tools or ()):
        offering.add(tool, f"tools.{n}", reserved=True)
    for where, found in loaded:
        for m, tool in enumerate(found):
            offering.add(tool, f"{where}.{m}", reserved=False)
    _offer_listed(offering, listed)
    return Toolbox(tuple(offering.offered), tuple(offering.set_aside))


def mcp_toolbox(listed: list[tuple[str, McpTool, list]], taken: set[str]) -> Toolbox:
    """The functions offered for MCP servers' listed tools alone (Anthropic's connector), under names
    none of `taken` (the client's own tools) has."""
    offering = _Offering(set(taken))
    _offer_listed(offering, listed)
    return Toolbox(tuple(offering.offered))


def _offer_listed(offering: _Offering, listed: list[tuple[str, McpTool, list]]) -> None:
    from ..mcp.policy import tool_allowed

    for where, server, server_tools in listed:
        for m, tool in enumerate(server_tools):
            if tool_allowed(tool, server.allowed()):
                offering.add_mcp(server, tool, f"{where}.{m}")


class _Offering:
    """Offered functions collected tool by tool, each under a name no other one has."""

    def __init__(self, reserved: set[str]):
        self.taken = set(reserved)
        self.offered: list[Offered] = []
        self.set_aside: list[str] = []

    def add(self, tool, param: str, reserved: bool) -> None:
        """`reserved`: a top-level name of the request's own, kept as it is."""
        if tool.type == MCP:
            return  # its tools are offered from its mcp_list_tools item (`toolbox`'s `listed`)
        if isinstance(tool, SetAsideTool):
            if tool.type not in self.set_aside:
                self.set_aside.append(tool.type)
        elif tool.type in (FUNCTION, CUSTOM):
            self._function(tool, tool.name, None, param, reserved)
        elif tool.type == NAMESPACE:
            for m, inner in enumerate(tool.tools):
                self._function(inner, f"{tool.name}.{inner.name}", tool, f"{param}.tools.{m}", False)
        else:
            self._built_in(tool, param)

    def add_mcp(self, server: McpTool, tool: dict, param: str) -> None:
        """One tool of an MCP server, offered under its own name (numbered if another has it)."""
        if self._offers(MCP, tool["name"], server.server_label):
            return
        name = _unique(tool["name"], self.taken)
        description = tool.get("description") or ""
        if server.server_description:
            description = f"({server.server_label}: {server.server_description}) {description}".strip()
        chat_tool = function_tool(name, description or None, tool.get("input_schema") or {"type": "object"})
        self.offered.append(Offered(name, MCP, tool["name"], server.server_label, chat_tool, param))

    def _offers(self, kind: str, tool_name: str, namespace: str | None) -> bool:
        return any((o.kind, o.tool_name, o.namespace) == (kind, tool_name, namespace) for o in self.offered)

    def _function(self, tool, preferred: str, namespace: NamespaceTool | None, param: str, reserved: bool) -> None:
        if not reserved and self._offers(tool.type, tool.name, namespace.name if namespace else None):
            return  # listed twice, or found again by a tool search
        name = preferred if reserved else _unique(preferred, self.taken)
        self.offered.append(_offer(tool, name, namespace, param))

    def _built_in(self, tool, param: str) -> None:
        """The one local shell and the one client tool search, as functions."""
        if self._offers(tool.type, tool.type, None):
            return
        name = _unique(tool.type, self.taken)
        if tool.type == LOCAL_SHELL:
            chat_tool = function_tool(name, LOCAL_SHELL_DESCRIPTION, LOCAL_SHELL_PARAMETERS)
        else:
            chat_tool = function_tool(
                name, tool.description or TOOL_SEARCH_DESCRIPTION, tool.parameters or TOOL_SEARCH_PARAMETERS
            )
        self.offered.append(Offered(name, tool.type, tool.type, None, chat_tool, param))


def _offer(tool: FunctionTool | CustomToolDefinition, name: str, namespace: NamespaceTool | None, param: str) -> Offered:
    description = tool.description
    if namespace is not None and namespace.description:
        description = f"({namespace.name}: {namespace.description})" + (f" {description}" if description else "")
    if tool.type == FUNCTION:
        chat_tool = function_tool(name, description, tool.parameters, tool.strict)
    else:
        chat_tool = function_tool(name, _custom_description(description, tool.format), CUSTOM_PARAMETERS)
    return Offered(name, tool.type, tool.name, namespace.name if namespace else None, chat_tool, param)


def _custom_description(description: str | None, input_format: CustomFormat | None) -> str:
    lines = [description] if description else []
    lines.append(f"Its `{INPUT_KEY}` is free text, sent to the tool as it is.")
    if input_format is not None and input_format.type == "grammar" and input_format.definition:
        lines.append(f"The input must follow this {input_format.syntax or 'lark'} grammar:\n{input_format.definition}")
    return "\n".join(lines)


def _unique(preferred: str, taken: set[str]) -> str:
    """`preferred` (cut to the 128 characters a tool name may have), numbered if already taken; taken then."""
    name, number = preferred[:128], 1
    while name in taken:
        number += 1
        suffix = f"_{number}"
        name = preferred[: 128 - len(suffix)] + suffix
    taken.add(name)
    return name


def chat_tools(box: Toolbox, allowed: set[str] | None = None) -> tuple[list[dict], list[str]]:
    """(the chat request's tools, where each one's parameters came from): the offered functions, only
    those in `allowed` (offered names) when the tool choice lists them."""
    chosen = [offered for offered in box.offered if allowed is None or offered.name in allowed]
    return [offered.chat_tool for offered in chosen], [offered.param + ".parameters" for offered in chosen]


@dataclass(frozen=True)
class ChoicePlan:
    """The chat request's tool_choice (None: leave it out), the offered names it allows (None: all),
    and the tool type it named that was set aside, if any."""

    chat_choice: Any = None
    allowed: set[str] | None = None
    set_aside: str | None = None


def plan_choice(choice, box: Toolbox) -> ChoicePlan:
    """The tool_choice of a Responses request, in every form, as the chat request's."""
    if choice is None or isinstance(choice, str):
        return ChoicePlan(choice)
    if choice.type in (FUNCTION, CUSTOM):
        offered = box.find(choice.type, choice.name, choice.namespace)
        # A name among no tools stays as it is: the chat schema's refusal names tool_choice.
        return ChoicePlan(named_tool_choice(offered.name if offered else choice.name))
    if choice.type == "allowed_tools":
        allowed = {offered.name for listed in choice.tools for offered in _listed(listed, box)}
        return ChoicePlan(choice.mode if allowed else None, allowed)
    if choice.type == MCP:
        return _mcp_choice(choice, box)
    offered = box.find(choice.type, choice.type) if choice.type in (LOCAL_SHELL, TOOL_SEARCH) else None
    if offered is not None:
        return ChoicePlan(named_tool_choice(offered.name))
    return ChoicePlan("auto", set_aside=choice.type)


def _mcp_choice(choice, box: Toolbox) -> ChoicePlan:
    """{"type": "mcp", "server_label", "name"}: that tool of the server, or (without a name) one of its
    tools; a server or tool not offered is set aside (auto)."""
    label, name = getattr(choice, "server_label", None), getattr(choice, "name", None)
    tools = [o for o in box.offered if o.kind == MCP and o.namespace == label and name in (None, o.tool_name)]
    if not tools:
        return ChoicePlan("auto", set_aside=MCP)
    if name is not None:
        return ChoicePlan(named_tool_choice(tools[0].name))
    return ChoicePlan("required", {offered.name for offered in tools})


def _listed(listed: dict, box: Toolbox) -> list[Offered]:
    """The offered functions one entry of allowed_tools.tools stands for (none for a tool set aside)."""
    kind, name, namespace = listed.get("type"), listed.get("name"), listed.get("namespace")
    if kind == NAMESPACE:
        return [offered for offered in box.offered if offered.namespace == name]
    if kind in (LOCAL_SHELL, TOOL_SEARCH):
        name = kind
    offered = (
        box.find(kind, name, namespace)
        if isinstance(name, str) and kind in (FUNCTION, CUSTOM, LOCAL_SHELL, TOOL_SEARCH)
        else None
    )
    return [offered] if offered else []


# --- calls, both ways ------------------------------------------------------------------------------


def custom_arguments(tool_input: str) -> str:
    """A custom tool call's `input` as the arguments of the function the model was offered."""
    return json.dumps({INPUT_KEY: tool_input}, ensure_ascii=False)


def custom_input(arguments: str) -> str:
    """The `input` of a custom tool call from the function's arguments: its `input`, or the one string a
    model wrote under another name; "" for no arguments, the arguments' text for anything else (so
    nothing the model wrote is lost)."""
    parsed = arguments_object(arguments)
    strings = [value for value in parsed.values() if isinstance(value, str)]
    if isinstance(parsed.get(INPUT_KEY), str):
        return parsed[INPUT_KEY]
    if len(strings) == 1 and len(parsed) == 1:
        return strings[0]
    return arguments if parsed else ""


def local_shell_arguments(action: dict) -> str:
    """A local_shell_call's `action` as the arguments of the offered `local_shell` function."""
    return json.dumps({key: value for key, value in action.items() if key != "type" and value is not None}, ensure_ascii=False)


def local_shell_action(arguments: str) -> dict:
    """The `exec` action of a local_shell_call from the function's arguments; a command given as one
    string becomes a one-item list."""
    parsed = arguments_object(arguments)
    command = parsed.get("command")
    if isinstance(command, str):
        command = [command]
    env = parsed.get("env")
    return {
        "type": "exec",
        "command": [str(part) for part in command] if isinstance(command, list) else [],
        "env": {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {},
        "timeout_ms": parsed.get("timeout_ms") if isinstance(parsed.get("timeout_ms"), int) else None,
        "working_directory": _str_or_none(parsed.get("working_directory")),
        "user": _str_or_none(parsed.get("user")),
    }


def _str_or_none(value) -> str | None:
    return value if isinstance(value, str) else None


_INPUT_OPENING = re.compile(r'\s*\{\s*"input"\s*:\s*"')
# An escape cut short at the end (an odd backslash, a \u with fewer than 4 digits, or a high surrogate
# whose low half has not come yet): left for the next delta.
_UNFINISHED_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\(?:u[dD][89abAB][0-9a-fA-F]{2}|u[0-9a-fA-F]{0,3})?$")


def partial_custom_input(arguments: str) -> str:
    """As much of a custom call's `input` as the arguments written so far decode to (for the input's
    stream deltas); "" until the string has begun."""
    opening = _INPUT_OPENING.match(arguments)
    if opening is None:
        return ""
    body = arguments[opening.end() :]
    closing = re.search(r'(?<!\\)(\\\\)*"', body)
    if closing:
        body = body[: closing.start() + len(closing[1] or "")]
    else:  # twice: a cut low surrogate leaves its high half at the end
        body = _UNFINISHED_ESCAPE.sub(r"\1", _UNFINISHED_ESCAPE.sub(r"\1", body))
    try:
        return json.loads(f'"{body}"')
    except ValueError:
        return ""


def output_item(offered: Offered | None, name: str, call_id: str, arguments: str) -> dict:
    """The Responses item for a call of the offered function `name` (without id and status): a
    function_call (with its namespace, if any), a custom_tool_call, a local_shell_call or a
    tool_search_call."""
    kind = offered.kind if offered else FUNCTION
    namespace = {"namespace": offered.namespace} if offered and offered.namespace else {}
    tool_name = offered.tool_name if offered else name
    if kind == CUSTOM:
        return {"type": "custom_tool_call", "call_id": call_id, "name": tool_name, **namespace, "input": custom_input(arguments)}
    if kind == LOCAL_SHELL:
        return {"type": "local_shell_call", "call_id": call_id, "action": local_shell_action(arguments)}
    if kind == TOOL_SEARCH:
        return {"type": "tool_search_call", "call_id": call_id, "execution": "client", "arguments": arguments_object(arguments)}
    return {"type": "function_call", "call_id": call_id, "name": tool_name, **namespace, "arguments": arguments}


# --- max_tool_calls --------------------------------------------------------------------------------


def at_most(limit: int):
    """The event transformation that gives out at most `limit` calls: the first delta of a call past
    the limit ends the answer there (finish_reason "tool_calls"), and the upstream generation with it."""

    def transform(events: Iterator[GenerationEvent]) -> Iterator[GenerationEvent]:
        for event in events:
            calls = event.tool_calls or ()
            kept = tuple(delta for delta in calls if delta.index < limit)
            if len(kept) == len(calls):
                yield event
                continue
            if kept:
                yield replace(event, tool_calls=kept, finish_reason=None)
            yield GenerationEvent(
                index=event.index,
                finish_reason="tool_calls",
                prompt_tokens=event.prompt_tokens,
                completion_tokens=event.completion_tokens,
                cached_tokens=event.cached_tokens,
            )
            return

    return transform
