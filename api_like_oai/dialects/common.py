"""What the dialects' request models share."""

from __future__ import annotations

from ..errors import InvalidRequest


def refuse_tool_types(data, supported: tuple, what_is_supported: str) -> None:
    """A 400 naming the first tool of a raw request body whose `type` is not among `supported`
    (server-side tools: web search, code execution, ...), before the schema says less clearly."""
    tools = data.get("tools") if isinstance(data, dict) else None
    for n, tool in enumerate(tools if isinstance(tools, list) else ()):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if isinstance(kind, str) and kind not in supported:
            raise InvalidRequest(f"tool type {kind!r} is not supported: {what_is_supported}", param=f"tools.{n}.type")
