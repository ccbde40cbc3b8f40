"""The Responses API's `mcp` tool and its items (issue 39), as the request's models and the answer's
items, without I/O: what the proxy's tool loop (services/mcp_loop.py) reads and writes.

- The tool: `server_label` and `server_url` (Streamable HTTP, or HTTP+SSE for a path ending in /sse),
  `headers`, `authorization`, `allowed_tools`, `require_approval`; `connector_id` and `tunnel_id`
  name OpenAI-hosted connectors, refused with a 400 that says so.
- Items: `mcp_list_tools` (a server's tools, listed once per conversation and offered to the model
  from it), `mcp_call` (a call the proxy ran, with its output or error), `mcp_approval_request` (a
  call waiting for the client), and the input item `mcp_approval_response` that answers one.
"""

from __future__ import annotations

import secrets
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr, model_validator

from ..errors import InvalidRequest
from ..protocol import STRICT

MCP = "mcp"
LIST_TOOLS, CALL, APPROVAL_REQUEST, APPROVAL_RESPONSE = (
    "mcp_list_tools",
    "mcp_call",
    "mcp_approval_request",
    "mcp_approval_response",
)
ITEM_TYPES = (LIST_TOOLS, CALL, APPROVAL_REQUEST, APPROVAL_RESPONSE)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", **STRICT)


class ToolFilter(_Strict):
    tool_names: list[StrictStr] | None = None
    read_only: bool | None = Field(None, description="Only tools whose annotations say readOnlyHint (or only not).")


class ApprovalFilter(_Strict):
    always: ToolFilter | None = None
    never: ToolFilter | None = None


class McpTool(_Strict):
    """A remote MCP server whose tools the proxy lists, offers to the model and calls itself."""

    type: Literal["mcp"]
    server_label: StrictStr = Field(min_length=1, max_length=64)
    server_url: StrictStr | None = Field(
        None,
        description=(
            'Streamable HTTP, or HTTP+SSE for a path ending in /sse; absent or "config": the server the config '
            "names server_label."
        ),
    )
    connector_id: StrictStr | None = Field(None, description="Refused: an OpenAI-hosted connector.")
    tunnel_id: StrictStr | None = Field(None, description="Refused: an OpenAI-hosted tunnel.")
    server_description: StrictStr | None = None
    headers: dict[str, StrictStr] | None = None
    authorization: StrictStr | None = Field(None, description="Sent as `Authorization: Bearer ...`.")
    allowed_tools: list[StrictStr] | ToolFilter | None = None
    require_approval: Literal["always", "never"] | ApprovalFilter | None = Field(None, description="Default always, as OpenAI's.")
    defer_loading: bool | None = Field(None, description="Accepted; the tools are listed at once.")
    allowed_callers: list[Literal["direct", "programmatic"]] | None = Field(None, description="Accepted and ignored.")

    @model_validator(mode="after")
    def is_reachable(self):
        for hosted in ("connector_id", "tunnel_id"):
            if getattr(self, hosted) is not None:
                raise InvalidRequest(
                    f"{hosted} names an OpenAI-hosted connector, which a local server cannot reach; give server_url",
                    param=hosted,
                    code="not_supported",
                )
        return self

    @property
    def named(self) -> bool:
        """Whether the tool names a server of the config (by its server_label) instead of a URL."""
        return self.server_url in (None, "config")

    def allowed(self):
        """allowed_tools as policy.tool_allowed takes it."""
        allowed = self.allowed_tools
        return allowed.model_dump(exclude_none=True) if isinstance(allowed, ToolFilter) else allowed

    def approval(self):
        """require_approval as policy.needs_approval takes it."""
        approval = self.require_approval
        return approval.model_dump(exclude_none=True) if isinstance(approval, ApprovalFilter) else approval

    def headers_sent(self, configured: dict[str, str] | None = None) -> dict[str, str]:
        """The request's headers and authorization, under the config's (`configured`) for a named server."""
        headers = dict(self.headers or {})
        if self.authorization:
            headers["Authorization"] = f"Bearer {self.authorization}"
        return headers | dict(configured or {})


class ListedTool(BaseModel):
    model_config = ConfigDict(extra="allow", **STRICT)
    name: StrictStr
    description: StrictStr | None = None
    input_schema: dict[str, Any] | None = None
    annotations: dict[str, Any] | None = None


class McpListToolsItem(_Strict):
    type: Literal["mcp_list_tools"]
    id: StrictStr | None = None
    server_label: StrictStr
    tools: list[ListedTool] = Field(max_length=1024)
    error: StrictStr | None = None
    status: StrictStr | None = None


class McpCallItem(_Strict):
    type: Literal["mcp_call"]
    id: StrictStr
    server_label: StrictStr
    name: StrictStr
    arguments: StrictStr
    output: StrictStr | None = None
    error: StrictStr | dict[str, Any] | None = Field(None, description="A string, or OpenAI's error object.")
    approval_request_id: StrictStr | None = None
    status: StrictStr | None = None


class McpApprovalRequestItem(_Strict):
    type: Literal["mcp_approval_request"]
    id: StrictStr
    server_label: StrictStr
    name: StrictStr
    arguments: StrictStr
    status: StrictStr | None = None


class McpApprovalResponseItem(_Strict):
    type: Literal["mcp_approval_response"]
    approval_request_id: StrictStr
    approve: bool
    reason: StrictStr | None = None
    id: StrictStr | None = None


# --- the answer's items ------------------------------------------------------------------------------


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


def list_tools_item(server_label: str, tools: list[dict] | None, error: str | None = None) -> dict:
    return {"id": new_id("mcpl"), "type": LIST_TOOLS, "server_label": server_label, "tools": tools or [], "error": error}


def call_item(call_id: str, server_label: str, name: str, arguments: str, approval_request_id: str | None = None) -> dict:
    """An mcp_call under way (status in_progress); `finished_call` gives it its output or error."""
    return {
        "id": call_id,
        "type": CALL,
        "server_label": server_label,
        "name": name,
        "arguments": arguments,
        "output": None,
        "error": None,
        "approval_request_id": approval_request_id,
        "status": "in_progress",
    }


def finished_call(item: dict, output: str | None, error: dict | None) -> dict:
    """The call with its output, or its error (`tool_error`, `protocol_error`)."""
    return item | {"output": output, "error": error, "status": "failed" if error is not None else "completed"}


TOOL_ERROR, PROTOCOL_ERROR = "mcp_tool_execution_error", "mcp_protocol_error"  # OpenAI's error types


def tool_error(message: str) -> dict:
    """OpenAI's error object for a tool that ran and reported an error."""
    return {"type": TOOL_ERROR, "content": [{"type": "text", "text": message}]}


def protocol_error(message: str, code: int = -32000) -> dict:
    """OpenAI's error object for a server that could not be reached, timed out or broke the protocol."""
    return {"type": PROTOCOL_ERROR, "code": code, "message": message}


def error_text(error) -> str:
    """An mcp_call's error as text: a string as it is, an error object's message or text content."""
    if isinstance(error, str):
        return error
    if isinstance(error.get("message"), str):
        return error["message"]
    content = error.get("content")
    parts = content if isinstance(content, list) else []
    return "\n".join(part.get("text", "") for part in parts if isinstance(part, dict)) or "the call failed"


def approval_request_item(server_label: str, name: str, arguments: str) -> dict:
    return {"id": new_id("mcpr"), "type": APPROVAL_REQUEST, "server_label": server_label, "name": name, "arguments": arguments}


def call_result_text(item) -> str:
    """What the model reads as an mcp_call's result: its output, or its error said as one."""
    if item.error is not None:
        return f"Error from the MCP tool: {error_text(item.error)}"
    return item.output or ""
