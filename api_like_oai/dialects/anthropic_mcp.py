"""Anthropic's MCP connector (`mcp_servers`, beta `mcp-client-2025-04-04` and later), without I/O: the
request's servers as the `mcp` tools the proxy's tool loop runs (services/mcp_loop.py), the blocks it
writes (`mcp_tool_use`, `mcp_tool_result`) and reads back in the conversation (those two, and
`mcp_tool_listing`, whose tools are not listed again).

Both shapes of the connector are taken: a server's `tool_configuration` ({enabled, allowed_tools}, the
2025-04-04 beta), and an `mcp_toolset` tool naming the server ({default_config, configs} per tool, the
later betas). The connector has no approvals: every call is run.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from ..protocol import STRICT
from .responses_mcp import CALL, LIST_TOOLS, McpTool, error_text

TOOLSET = "mcp_toolset"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)


class ToolConfiguration(_Strict):
    enabled: bool | None = None
    allowed_tools: list[StrictStr] | None = None


class McpServerDefinition(_Strict):
    type: Literal["url"]
    url: StrictStr
    name: StrictStr = Field(min_length=1, max_length=64)
    authorization_token: StrictStr | None = Field(None, description="Sent as `Authorization: Bearer ...`.")
    tool_configuration: ToolConfiguration | None = None


class McpToolUseBlock(_Strict):
    type: Literal["mcp_tool_use"]
    id: StrictStr
    name: StrictStr
    server_name: StrictStr
    input: dict[str, Any]
    cache_control: dict[str, Any] | None = None


class _TextPart(_Strict):
    type: Literal["text"]
    text: StrictStr
    citations: list[dict[str, Any]] | None = None
    cache_control: dict[str, Any] | None = None


class McpToolResultBlock(_Strict):
    type: Literal["mcp_tool_result"]
    tool_use_id: StrictStr
    is_error: bool | None = None
    content: StrictStr | list[_TextPart] | None = None
    cache_control: dict[str, Any] | None = None


class McpToolListingBlock(BaseModel):
    model_config = ConfigDict(extra="allow", **STRICT)
    type: Literal["mcp_tool_listing"]
    mcp_server_name: StrictStr
    tools: list[dict[str, Any]] = Field(max_length=1024)


def enabled(server: McpServerDefinition) -> bool:
    return server.tool_configuration is None or server.tool_configuration.enabled is not False


def as_mcp_tool(server: McpServerDefinition) -> McpTool:
    """A server as a Responses `mcp` tool run without approval (its tool filters are `offered`'s, after
    the listing)."""
    return McpTool(
        type="mcp",
        server_label=server.name,
        server_url=server.url,
        require_approval="never",
        authorization=server.authorization_token,
    )


def offered(server: McpServerDefinition, toolsets: list[dict], tools: list[dict]) -> list[dict]:
    """Of a server's listed `tools`, those the request enables: its allowed_tools, then the mcp_toolset
    that names it (default_config.enabled, overridden per tool by configs)."""
    configuration = server.tool_configuration
    if configuration is not None and configuration.allowed_tools is not None:
        tools = [tool for tool in tools if tool["name"] in configuration.allowed_tools]
    toolset = next((toolset for toolset in toolsets if toolset.get("mcp_server_name") == server.name), None)
    if toolset is None:
        return tools
    default = (toolset.get("default_config") or {}).get("enabled", True)
    configs = toolset.get("configs") or {}
    return [tool for tool in tools if (configs.get(tool["name"]) or {}).get("enabled", default)]


def listed_in(messages) -> list[dict]:
    """The tool listings the conversation carries back (mcp_tool_listing blocks), as mcp_list_tools items."""
    return [
        {"type": LIST_TOOLS, "server_label": block.mcp_server_name, "tools": block.tools}
        for message in messages
        if not isinstance(message.content, str)
        for block in message.content
        if block.type == "mcp_tool_listing"
    ]


def result_text(block: McpToolResultBlock) -> str:
    """What the model reads of an mcp_tool_result sent back."""
    content = block.content
    text = content if isinstance(content, str) else "\n".join(part.text for part in content or ())
    return f"Error from the MCP tool: {text}" if block.is_error else text or ""


# --- the answer's blocks ------------------------------------------------------------------------------


def blocks_of(item: dict, done: bool) -> list[dict]:
    """The Anthropic blocks one step of the proxy's items adds: a call's mcp_tool_use when it starts,
    its mcp_tool_result when it is done; nothing of listings."""
    if item["type"] != CALL:
        return []
    if not done:
        return [_use_block(item)]
    return [_result_block(item)]


def content_of(item: dict) -> list[dict]:
    """A finished item's blocks in a whole message: a call's use and result."""
    return [_use_block(item), _result_block(item)] if item["type"] == CALL else []


def _use_block(item: dict) -> dict:
    try:
        arguments = json.loads(item["arguments"] or "{}")
    except ValueError:
        arguments = {}
    return {
        "type": "mcp_tool_use",
        "id": item["id"],
        "name": item["name"],
        "server_name": item["server_label"],
        "input": arguments if isinstance(arguments, dict) else {},
    }


def _result_block(item: dict) -> dict:
    failed = item.get("error") is not None
    text = error_text(item["error"]) if failed else item.get("output") or ""
    return {
        "type": "mcp_tool_result",
        "tool_use_id": item["id"],
        "is_error": failed,
        "content": [{"type": "text", "text": text, "citations": None}],
    }
