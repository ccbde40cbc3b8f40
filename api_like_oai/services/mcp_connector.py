"""Anthropic's MCP connector (`mcp_servers`) on the proxy's tool loop (services/mcp_loop.py): the servers
checked and listed before the model is asked (unless the conversation carries their mcp_tool_listing
blocks), their enabled tools offered beside the client's own, every call run (the connector has no
approvals), the calls and results written as mcp_tool_use / mcp_tool_result blocks by the shape."""

from __future__ import annotations

from dataclasses import dataclass

from ..dialects import anthropic_mcp
from ..dialects.anthropic import MessagesRequest
from ..dialects.responses_mcp import LIST_TOOLS
from ..dialects.responses_tools import Toolbox, mcp_toolbox
from ..mcp.policy import Bounds
from . import mcp_loop


@dataclass
class Connector:
    """A request's MCP servers, listed, and the functions their tools are offered as."""

    servers: dict[str, mcp_loop.Server]
    toolbox: Toolbox
    bounds: Bounds

    def tools(self) -> list[tuple[str, dict]]:
        """(where the server was given, the chat request's tool) of each tool offered: the chat request
        has them with the client's own from the start, so a tool_choice may force one of them."""
        return [(offered.param, offered.chat_tool) for offered in self.toolbox.offered]

    def loop(self, dialect, context, edit_messages=None) -> mcp_loop.ToolLoop:
        return mcp_loop.tool_loop(dialect, self.toolbox, self.servers, self.bounds, [], context, edit_messages=edit_messages)


def listed(request: MessagesRequest, bounds: Bounds, record=None, grants: tuple[str, ...] | None = None) -> Connector:
    """The request's enabled servers, checked (a 400 for a URL that is not public, unless allowed; a 403
    for a server of the config, `url: "config"`, the caller's key is not granted) and listed where the
    conversation has no listing of them."""
    numbered = [
        (n, server, anthropic_mcp.as_mcp_tool(server))
        for n, server in enumerate(request.mcp_servers)
        if anthropic_mcp.enabled(server)
    ]
    servers = mcp_loop.servers_of([(f"mcp_servers.{n}.url", tool) for n, _, tool in numbered], bounds, grants)
    carried = anthropic_mcp.listed_in(request.messages)
    listings = {
        item["server_label"]: item["tools"]
        for item in carried + mcp_loop.prelude(servers, carried, bounds, record)
        if item["type"] == LIST_TOOLS
    }
    toolsets = request.mcp_toolsets()
    offered = [
        (f"mcp_servers.{n}", tool, anthropic_mcp.offered(server, toolsets, listings.get(server.name) or []))
        for n, server, tool in numbered
    ]
    taken = {tool.name for _, tool in request.client_tools()}
    return Connector(servers, mcp_toolbox(offered, taken), bounds)
