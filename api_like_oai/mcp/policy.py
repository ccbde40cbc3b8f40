"""What the tool loop decides, without I/O: which of a server's tools the model is offered, which
calls wait for the client's approval, and whether a round of the model's calls is answered by the
proxy (and the model asked again), ends the response with approval requests, or ends it at the bound.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

RUN, ASK = "run", "ask"  # what one call gets
AGAIN, ANSWER, BOUND = "again", "answer", "bound"  # what a round leads to
TRUNCATION_NOTE = "\n[output truncated by the proxy: {kept} of {total} bytes]"


@dataclass(frozen=True)
class NamedServer:
    """An MCP server the config names (`mcp_servers:`), which a request names by its server_label: at a
    `url`, or a stdio server's `command` (with its arguments), which the proxy runs behind a bridge
    (mcp/bridge.py) whose URL and secret the main process fills in before the workers start."""

    name: str
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    command: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    @property
    def stdio(self) -> bool:
        return bool(self.command)


@dataclass(frozen=True)
class Bounds:
    """What one request may make the proxy do with MCP servers (--mcp-* flags), and the servers the
    config names (no address check: the operator chose them)."""

    connect_timeout: float = 10.0  # seconds to connect and list a server's tools
    call_timeout: float = 60.0  # seconds one tool call may take
    max_output_bytes: int = 64 * 1024  # a tool's output past it is cut, with a note the model reads
    max_tools: int = 128  # tools kept of one server's list
    max_rounds: int = 8  # rounds of calls the proxy answers within one response
    allow_private_urls: bool = False  # server_url may reach private, loopback and link-local addresses
    named_servers: tuple[NamedServer, ...] = ()

    def named(self, name: str) -> NamedServer | None:
        return next((server for server in self.named_servers if server.name == name), None)

    def bridged(self, bridges: dict[str, tuple[str, str]]) -> Bounds:
        """These bounds with each stdio server's bridge (name -> (url, secret)) as its URL and header."""

        def reached(server: NamedServer) -> NamedServer:
            if server.name not in bridges:
                return server
            url, secret = bridges[server.name]
            return replace(server, url=url, headers=(("Authorization", f"Bearer {secret}"),))

        return replace(self, named_servers=tuple(reached(server) for server in self.named_servers))


@dataclass(frozen=True)
class Call:
    """A call of an MCP tool the model made (or the client approved)."""

    call_id: str
    server_label: str
    name: str
    arguments: str


def tool_allowed(tool: dict, allowed) -> bool:
    """Whether `tool` (a listed tool: name, annotations) passes `allowed_tools`: None (all), a list of
    names, or the filter {"tool_names": [...], "read_only": bool}."""
    if allowed is None:
        return True
    if isinstance(allowed, (list, tuple)):
        return tool["name"] in allowed
    names = allowed.get("tool_names")
    if names is not None and tool["name"] not in names:
        return False
    read_only = allowed.get("read_only")
    if read_only is None:
        return True
    return bool((tool.get("annotations") or {}).get("readOnlyHint")) == read_only


def needs_approval(name: str, require_approval) -> bool:
    """Whether a call of `name` waits for the client: "always" (the default, as OpenAI's), "never", or
    {"always": {"tool_names"}, "never": {"tool_names"}} (a tool in neither list needs approval)."""
    if require_approval is None or require_approval == "always":
        return True
    if require_approval == "never":
        return False
    never = (require_approval.get("never") or {}).get("tool_names") or ()
    always = (require_approval.get("always") or {}).get("tool_names") or ()
    return name in always or name not in never


def decide(calls: Sequence[Call], approval_needed: Callable[[Call], bool]) -> list[tuple[str, Call]]:
    """Each call with what it gets: run by the proxy, or asked of the client."""
    return [(ASK if approval_needed(call) else RUN, call) for call in calls]


def after_round(actions: Sequence[tuple[str, Call]], client_calls: int, rounds_done: int, max_rounds: int) -> str:
    """What the round leads to: the model asked AGAIN with the results, the response ends as the
    model's ANSWER (no call run, or calls the client answers or approves), or it ends at the BOUND of
    rounds. `rounds_done` counts this one."""
    if client_calls or not actions or any(action == ASK for action, _ in actions):
        return ANSWER
    return BOUND if rounds_done >= max_rounds else AGAIN


def truncated(text: str, max_bytes: int) -> str:
    """`text`, cut to `max_bytes` of UTF-8 with a note saying so when longer."""
    encoded = text.encode()
    if len(encoded) <= max_bytes:
        return text
    kept = encoded[:max_bytes].decode(errors="ignore")
    return kept + TRUNCATION_NOTE.format(kept=len(kept.encode()), total=len(encoded))


def granted(grants: tuple[str, ...] | None, server: str) -> tuple[str, ...] | None:
    """What a managed key's grants (`server`, or `server.tool` for one tool) give of a named server: the
    tools (empty: all of them), or None when the key has no grant of it. `grants` None: a key from the
    flags or the admin, which may use every named server."""
    if grants is None:
        return ()
    tools = [grant[len(server) + 1 :] for grant in grants if grant.startswith(server + ".")]
    if server in grants:
        return ()
    return tuple(tools) or None


def narrowed(allowed, tools: tuple[str, ...]):
    """`allowed_tools` (as tool_allowed takes it) narrowed to the granted `tools`."""
    if allowed is None:
        return list(tools)
    if isinstance(allowed, (list, tuple)):
        return [name for name in allowed if name in tools]
    names = allowed.get("tool_names")
    return allowed | {"tool_names": [name for name in names if name in tools] if names is not None else list(tools)}
