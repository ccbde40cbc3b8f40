"""MCP tools run by the proxy inside one Responses answer (issue 39): a loop around the one event stream.

A round is a generation whose calls of MCP tools the proxy answers itself: the calls are held out of
the events, run (or, where require_approval says so, turned into mcp_approval_request items), written
as mcp_call items, and the model is asked again with their results, until it answers without one,
asks for an approval, calls a function the client runs, or reaches the bound of rounds
(--mcp-max-rounds, max_tool_calls), which ends the response as incomplete. What each round leads to
is mcp.policy's pure decision; the listing and calling are mcp.client's.

Before the first round (`prelude`) each server of the request without an mcp_list_tools item in the
conversation is listed (once per conversation: a continued one, or an input that carries the item,
lists nothing), and the calls the client approved or denied since (mcp_approval_response) are run or
refused. The items made meet the model through the conversation (the translation reads them) and
the client through the answer's output, first.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from pydantic import TypeAdapter

from ..backends.events import BEFORE_ANSWER, GenerationEvent, ItemStep
from ..dialects import responses_mcp as items
from ..dialects.responses_tools import Toolbox
from ..errors import InvalidRequest, PermissionDenied, UpstreamUnavailable
from ..mcp import policy
from ..mcp.addresses import pinned
from ..mcp.client import Endpoint, McpFailure, McpToolError, call_tool, list_tools
from ..protocol import ChatCompletionRequest
from .merge import close

log = logging.getLogger("api_like_oai")
_MESSAGES = TypeAdapter(ChatCompletionRequest.model_fields["messages"].annotation)


@dataclass(frozen=True)
class Server:
    """One mcp tool of the request, with where the proxy connects for it."""

    tool: items.McpTool
    endpoint: Endpoint


def servers_of(
    tools: list[tuple[str, items.McpTool]], bounds: policy.Bounds, grants: tuple[str, ...] | None = None
) -> dict[str, Server]:
    """The servers of (where the URL was sent, mcp tool) by server_label, each URL checked and pinned
    (a 400 naming where, for one that is not public unless allowed); a tool naming a server of the
    config gets that one, if the caller's `grants` (policy.granted) give it (else a 403)."""
    servers = {}
    for param, tool in tools:
        if tool.named:
            servers[tool.server_label] = _named(tool, param, bounds, grants)
            continue
        target = pinned(tool.server_url, param, bounds.allow_private_urls)
        servers[tool.server_label] = Server(tool, Endpoint(target, tool.headers_sent()))
    return servers


def _named(tool: items.McpTool, param: str, bounds: policy.Bounds, grants: tuple[str, ...] | None) -> Server:
    label = tool.server_label
    server = bounds.named(label)
    if server is None:
        known = ", ".join(named.name for named in bounds.named_servers) or "none"
        raise InvalidRequest(
            f"no MCP server named {label!r} in the config (named: {known}); give server_url",
            param=param.rsplit(".", 1)[0] + ".server_label",
        )
    tools = policy.granted(grants, label)
    if tools is None:
        raise PermissionDenied(f"this key is not granted the MCP server {label!r}")
    if tools:  # a grant of some tools: the others are not offered, whatever allowed_tools says
        tool = tool.model_copy(update={"allowed_tools": policy.narrowed(tool.allowed(), tools)})
    if server.url is None:  # a stdio server whose bridge this process was not given (mcp/stdio.py)
        raise UpstreamUnavailable(f"the stdio MCP server {label!r} is not running: the proxy starts it when it starts")
    target = pinned(server.url, param, allow_private=True)  # the operator's choice: no address check
    return Server(tool, Endpoint(target, tool.headers_sent(dict(server.headers))))


def grants_of(caller, fleet_grants: tuple[str, ...] | None = None) -> tuple[str, ...] | None:
    """The named servers (and tools) the caller (access.keys.Caller) may use: a managed key's grants
    (none unless given), every one for the admin and for keys from the flags (None); on a box, those a
    front sent for its tenant (`fleet_grants`)."""
    if fleet_grants is not None:
        return fleet_grants
    if caller is None or caller.admin or caller.record is None:
        return None
    return caller.record.mcp_servers or ()


def with_servers_tools(tools: list, servers: dict[str, Server]) -> list:
    """The request's tools, each mcp tool as its server took it (narrowed by the key's grants)."""
    return [servers[tool.server_label].tool if tool.type == items.MCP else tool for tool in tools]


def tool_loop(
    dialect,
    toolbox: Toolbox,
    servers: dict[str, Server],
    bounds: policy.Bounds,
    made: list[dict],
    context,
    per_round=None,
    max_calls: int | None = None,
    edit_messages=None,
) -> ToolLoop:
    """The MCP rounds around a dialect request's events (admission.DialectRequest); `per_round` (an
    event transformation: max_tool_calls' cut) applies to every round's events, the first included,
    `edit_messages` (chat.MessageEdit) to every round's messages."""
    from .chat import chained, start_chat

    def next_round(chat_request):
        chat = start_chat(chat_request, dialect.model, context, max_tokens_is_bound=True, edit_messages=edit_messages)
        steps = chained([step for step in (chat.transform, per_round) if step is not None])
        return _released(chat.events, steps)

    return ToolLoop(dialect.chat, toolbox, servers, bounds, made, next_round, max_calls, context.record)


# --- before the first round --------------------------------------------------------------------------


def prelude(servers: dict[str, Server], conversation: list[dict], bounds: policy.Bounds, record=None) -> list[dict]:
    """The items made before the model is asked: a listing of each server the conversation has none
    of, then the approved calls run (and the denied ones refused) that no mcp_call answers yet.
    `record` (the request's RequestRecord) gets each listing and call as a span and in /metrics."""
    listed = {item["server_label"] for item in conversation if item.get("type") == items.LIST_TOOLS}
    made = [_listing(label, server, bounds, record) for label, server in servers.items() if label not in listed]
    return made + [
        _approved(request, response, servers, bounds, record) for request, response in _answered_approvals(conversation)
    ]


def _listing(label: str, server: Server, bounds: policy.Bounds, record) -> dict:
    try:
        with observed(record, label, LISTING):
            tools = list_tools(server.endpoint, bounds)
    except McpFailure as exc:
        return items.list_tools_item(label, [], str(exc))
    # As OpenAI's: the item lists the tools imported, those allowed_tools lets through.
    return items.list_tools_item(label, [tool for tool in tools if policy.tool_allowed(tool, server.tool.allowed())])


LISTING = "tools/list"  # the "tool" a listing is observed as
_SERIES_CAP = 256  # (server, tool) label pairs per process; the labels are the requests' own names
_series: set[tuple[str, str]] = set()


@contextlib.contextmanager
def observed(record, server: str, tool: str):
    """One MCP listing or call: a step of the request's record (a span of its trace, with its server,
    tool and error; a line of its detail on the dashboard), counted and timed in /metrics by server,
    tool and outcome, and a log line; what it raises goes on."""
    started, outcome = time.monotonic(), "error"
    step = record.mcp_step(server, tool, LISTING if tool == LISTING else "tools/call") if record is not None else None
    try:
        yield
        outcome = "ok"
    except McpFailure as exc:
        if step is not None:
            step.error_type = items.TOOL_ERROR if isinstance(exc, McpToolError) else items.PROTOCOL_ERROR
            step.error = str(exc)
        raise
    finally:
        seconds = time.monotonic() - started
        log.info("mcp %s %s: %s in %.3f s", server, tool, outcome, seconds)
        if record is not None:
            step.ended = time.perf_counter()
            _count(record, server, tool, outcome, seconds)


def _count(record, server: str, tool: str, outcome: str, seconds: float) -> None:
    if (server, tool) not in _series and len(_series) >= _SERIES_CAP:
        server = tool = "other"
    _series.add((server, tool))
    record.metrics.child(record.metrics.mcp_calls, server, tool, outcome).inc()
    record.metrics.child(record.metrics.mcp_call_seconds, server, tool).observe(seconds)


def _answered_approvals(conversation: list[dict]) -> list[tuple[dict, dict]]:
    """(approval request, its response) for each answered request no mcp_call has followed yet."""
    requests = {item["id"]: item for item in conversation if item.get("type") == items.APPROVAL_REQUEST}
    done = {item.get("approval_request_id") for item in conversation if item.get("type") == items.CALL}
    return [
        (requests[item["approval_request_id"]], item)
        for item in conversation
        if item.get("type") == items.APPROVAL_RESPONSE
        and item["approval_request_id"] in requests
        and item["approval_request_id"] not in done
    ]


def _approved(request: dict, response: dict, servers: dict[str, Server], bounds: policy.Bounds, record) -> dict:
    call = policy.Call(items.new_id("mcp"), request["server_label"], request["name"], request["arguments"])
    started = items.call_item(call.call_id, call.server_label, call.name, call.arguments, request["id"])
    if not response.get("approve"):
        reason = f": {response['reason']}" if response.get("reason") else ""
        return items.finished_call(started, None, items.tool_error(f"the user did not approve this call{reason}"))
    return run_call(call, started, servers, bounds, record)


def run_call(call: policy.Call, started: dict, servers: dict[str, Server], bounds: policy.Bounds, record=None) -> dict:
    """The mcp_call item `started`, finished with the call's output or its error (never raised)."""
    server = servers.get(call.server_label)
    if server is None:
        return items.finished_call(
            started, None, items.protocol_error(f"the MCP server {call.server_label!r} is not among this request's tools")
        )
    try:
        arguments = json.loads(call.arguments or "{}")
    except ValueError:
        return items.finished_call(started, None, items.tool_error("the arguments are not JSON"))
    try:
        with observed(record, call.server_label, call.name):
            output = call_tool(server.endpoint, call.name, arguments if isinstance(arguments, dict) else {}, bounds)
    except McpToolError as exc:
        return items.finished_call(started, None, items.tool_error(str(exc)))
    except McpFailure as exc:
        return items.finished_call(started, None, items.protocol_error(str(exc)))
    return items.finished_call(started, output, None)


# --- the rounds -------------------------------------------------------------------------------------


@dataclass
class _Round:
    """One generation's events as the loop reads them: MCP calls held out, the rest passed on."""

    is_mcp: Callable[[str | None], bool]
    calls: dict[int, list] = field(default_factory=dict)  # delta index -> [id, name, arguments]
    held: set[int] = field(default_factory=set)  # the indices of MCP calls
    cut: set[int] = field(default_factory=set)  # of those, the one whose arguments the token limit cut
    client_calls: int = 0
    text: list[str] = field(default_factory=list)
    finish: GenerationEvent | None = None

    def take(self, event: GenerationEvent) -> GenerationEvent | None:
        """What of `event` goes on to the client (None: nothing); its finish is held for the loop."""
        if event.text:
            self.text.append(event.text)
        passed = tuple(delta for delta in event.tool_calls or () if not self._held(delta))
        if event.finish_reason:
            self.finish = event
        if passed == tuple(event.tool_calls or ()) and not event.finish_reason:
            return event
        kept = replace(event, tool_calls=passed or None, finish_reason=None)
        return kept if kept.text or kept.reasoning or kept.tool_calls else None

    def _held(self, delta) -> bool:
        if delta.index not in self.calls:
            self.calls[delta.index] = [delta.id, delta.name, ""]
            if self.is_mcp(delta.name):
                self.held.add(delta.index)
            else:
                self.client_calls += 1
        self.calls[delta.index][2] += delta.arguments or ""
        if delta.cut and delta.index in self.held:
            self.cut.add(delta.index)
        return delta.index in self.held

    def mcp_calls(self, label_of: Callable[[str], tuple[str, str]]) -> list[policy.Call]:
        return [
            policy.Call(
                self.calls[index][0] or items.new_id("mcp"), *label_of(self.calls[index][1]), self.calls[index][2] or "{}"
            )
            for index in sorted(self.held - self.cut)  # a cut call is never run: its arguments are a prefix
        ]


def answered_before(made: list[dict]) -> bool:
    """Whether the prelude ran calls (approved ones) before the model is asked."""
    return any(item["type"] == items.CALL for item in made)


def choice_satisfied(chat: ChatCompletionRequest) -> ChatCompletionRequest:
    """`chat` once the response has had a call: a tool_choice that forced one (as OpenAI's, it holds
    the response's first call) becomes auto, so the model may answer with the results."""
    if chat.tool_choice in (None, "auto", "none"):
        return chat
    return chat.model_copy(update={"tool_choice": "auto"})


def _released(events: Iterator, steps: Callable | None) -> Iterator[GenerationEvent]:
    """A later round's events without those before its answer (its acceptance, llama.cpp's prompt
    progress: only the first round's reader takes them off the front), transformed by `steps`; closing
    them releases the upstream."""
    try:
        answer = (event for event in events if not isinstance(event, BEFORE_ANSWER))
        yield from steps(answer) if steps else answer
    finally:
        close(events)


class ToolLoop:
    """The event transformation that runs a response's MCP rounds (see the module's docstring)."""

    def __init__(
        self,
        chat: ChatCompletionRequest,
        toolbox: Toolbox,
        servers: dict[str, Server],
        bounds: policy.Bounds,
        made: list[dict],
        next_round: Callable,
        max_calls: int | None = None,
        record=None,
    ):
        """`next_round(chat_request) -> events` starts one more generation (tool-parsed); `made`: the
        prelude's items, given out first."""
        self.chat, self.toolbox, self.servers, self.bounds = chat, toolbox, servers, bounds
        self.made, self.next_round, self.max_calls, self.record = made, next_round, max_calls, record
        self.messages = [message.model_dump(exclude_none=True) for message in chat.messages]

    def is_mcp(self, name: str | None) -> bool:
        offered = self.toolbox.by_name(name)
        return offered is not None and offered.kind == items.MCP

    def label_of(self, name: str) -> tuple[str, str]:
        offered = self.toolbox.by_name(name)
        return offered.namespace, offered.tool_name

    def __call__(self, events: Iterator[GenerationEvent]) -> Iterator[GenerationEvent]:
        for item in self.made:
            yield from _whole(item)
        rounds, calls_run, totals = 0, 0, _Totals()
        upstream = None
        try:
            while True:
                current = _Round(self.is_mcp)
                for event in events:
                    passed = current.take(totals.added(event))
                    if passed is not None:
                        yield passed
                calls = current.mcp_calls(self.label_of)
                rounds, calls_run = rounds + bool(calls), calls_run + len(calls)
                actions = policy.decide(calls, self._needs_approval)
                results = yield from self._answered(actions)
                step = policy.after_round(actions, current.client_calls, rounds, self._max_rounds(calls_run))
                if step != policy.AGAIN:
                    yield from _finished(current, step)
                    return
                totals.round_ended(current.finish)
                self._extend(current, results)
                close(upstream)
                events = upstream = self.next_round(self._next_request())
        finally:
            close(upstream)

    def _next_request(self) -> ChatCompletionRequest:
        """The chat request of the next round: the conversation so far, any tool_choice satisfied."""
        return choice_satisfied(self.chat.model_copy(update={"messages": _MESSAGES.validate_python(self.messages)}))

    def _max_rounds(self, calls_run: int) -> int:
        """The rounds allowed: --mcp-max-rounds, and none more once max_tool_calls calls have run."""
        if self.max_calls is not None and calls_run >= self.max_calls:
            return 0
        return self.bounds.max_rounds

    def _needs_approval(self, call: policy.Call) -> bool:
        return policy.needs_approval(call.name, self.servers[call.server_label].tool.approval())

    def _answered(self, actions) -> Iterator[GenerationEvent]:
        """Each call run (its item added, then done) or asked of the client; returns (call, item) run."""
        results = []
        for action, call in actions:
            if action == policy.ASK:
                yield from _whole(items.approval_request_item(call.server_label, call.name, call.arguments))
                continue
            started = items.call_item(call.call_id, call.server_label, call.name, call.arguments)
            yield GenerationEvent(item=ItemStep(started, done=False))
            finished = run_call(call, started, self.servers, self.bounds, self.record)
            yield GenerationEvent(item=ItemStep(finished, done=True))
            results.append((call, finished))
        return results

    def _extend(self, current: _Round, results: list) -> None:
        """The round as the next one's conversation: the assistant's text and calls, then their results."""
        calls = [
            {"id": call.call_id, "type": "function", "function": {"name": self._offered_name(call), "arguments": call.arguments}}
            for call, _ in results
        ]
        self.messages.append({"role": "assistant", "content": "".join(current.text) or None, "tool_calls": calls})
        self.messages += [
            {
                "role": "tool",
                "tool_call_id": call.call_id,
                "content": items.call_result_text(items.McpCallItem.model_validate(item)),
            }
            for call, item in results
        ]

    def _offered_name(self, call: policy.Call) -> str:
        offered = self.toolbox.find(items.MCP, call.name, call.server_label)
        return offered.name if offered else call.name


def _whole(item: dict) -> Iterator[GenerationEvent]:
    yield GenerationEvent(item=ItemStep(item, done=False))
    yield GenerationEvent(item=ItemStep(item, done=True))


def _finished(current: _Round, step: str) -> Iterator[GenerationEvent]:
    """The held finish event of the last round, with why the response ends: the bound of rounds, calls
    the client answers, an answer after the proxy's calls, or the model's own reason."""
    finish = current.finish
    if finish is None:
        return
    if step == policy.BOUND:
        reason = "tool_rounds"
    elif current.client_calls:
        reason = "tool_calls"
    else:
        reason = "stop" if current.held and not current.cut else finish.finish_reason
    yield replace(finish, tool_calls=None, text="", reasoning="", finish_reason=reason)


class _Totals:
    """The counts of the rounds before, added to each event's own (an event counts its generation)."""

    def __init__(self):
        self.prompt = self.completion = self.cached = 0

    def added(self, event: GenerationEvent) -> GenerationEvent:
        if not (self.prompt or self.completion) or event.prompt_tokens is None and event.completion_tokens is None:
            return event
        return replace(
            event,
            prompt_tokens=(event.prompt_tokens or 0) + self.prompt,
            completion_tokens=(event.completion_tokens or 0) + self.completion,
            cached_tokens=(event.cached_tokens or 0) + self.cached,
        )

    def round_ended(self, finish: GenerationEvent | None) -> None:
        """`finish` (already added to) holds the totals so far."""
        if finish is not None:
            self.prompt, self.completion = finish.prompt_tokens or 0, finish.completion_tokens or 0
            self.cached = finish.cached_tokens or 0
