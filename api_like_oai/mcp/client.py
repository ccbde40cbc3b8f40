"""An MCP server's tools listed and called through the official `mcp` SDK.

The SDK is asyncio; the proxy's worker is gevent, whose greenlets cannot each run an asyncio loop
(the running loop is per OS thread). Each use runs a loop of its own in gevent's thread pool
(offload.off_the_loop), on the unpatched selector, so the worker's other streams go on meanwhile.
A connection reaches the host only at the address `addresses.pinned` checked. Failures of every kind
(connect, timeout, protocol, a tool's own error) are `McpFailure`, whose message the model and the
client read; nothing of the SDK reaches the layers above.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ..offload import event_loop_active, off_the_loop
from .addresses import Pinned
from .policy import Bounds, truncated


class McpFailure(Exception):
    """Listing or calling failed; the message says why, for the item's `error`."""


class McpToolError(McpFailure):
    """The tool ran and reported an error (its result's is_error); the message is its output."""


@dataclass(frozen=True)
class Endpoint:
    """Where a server is, and the headers every request to it carries."""

    target: Pinned
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def legacy_sse(self) -> bool:
        """HTTP+SSE (the 2024 transport) for a URL whose path ends in /sse, else Streamable HTTP."""
        return urlsplit(self.target.url).path.rstrip("/").endswith("/sse")


def list_tools(endpoint: Endpoint, bounds: Bounds) -> list[dict]:
    """The server's tools as the Responses API lists them (name, description, input_schema, annotations),
    the first bounds.max_tools of them."""

    async def listing(client):
        result = await client.list_tools()
        return [_listed(tool) for tool in result.tools[: bounds.max_tools]]

    return _run(endpoint, listing, bounds.connect_timeout, bounds.connect_timeout)


def call_tool(endpoint: Endpoint, name: str, arguments: dict, bounds: Bounds) -> str:
    """The tool's output as text (its text parts, else its structured content as JSON), cut to
    bounds.max_output_bytes with a note; McpFailure when the tool reports an error."""

    async def calling(client):
        return await client.call_tool(name, arguments)

    result = _run(endpoint, calling, bounds.connect_timeout + bounds.call_timeout, bounds.connect_timeout)
    text = _text_of(result)
    if result.is_error:
        raise McpToolError(truncated(text or "the tool failed", bounds.max_output_bytes))
    return truncated(text, bounds.max_output_bytes)


def _listed(tool) -> dict:
    annotations = tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else None
    return {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema, "annotations": annotations}


def _text_of(result) -> str:
    texts = [block.text for block in result.content if getattr(block, "type", None) == "text"]
    if texts:
        return "\n".join(texts)
    if result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return json.dumps([block.model_dump(by_alias=True, exclude_none=True) for block in result.content], ensure_ascii=False)


def _run(endpoint: Endpoint, use, timeout: float, connect_timeout: float):
    """`use(client)` on a connected mcp.Client, within `timeout` seconds, off the event loop."""
    # httpx2 logs every request at INFO: the proxy logs each listing and call once (services/mcp_loop.py).
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    try:
        return off_the_loop(_in_own_loop, endpoint, use, timeout, connect_timeout)
    except McpFailure:
        raise
    except (TimeoutError, asyncio.TimeoutError):
        raise McpFailure(f"the MCP server did not answer within {timeout:g} s") from None
    except Exception as exc:  # noqa: BLE001 - the SDK's and the network's errors all become the item's error
        raise McpFailure(f"the MCP server failed: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    """The innermost message of an exception group (anyio's task groups wrap what failed)."""
    while getattr(exc, "exceptions", None):  # a BaseExceptionGroup (Python 3.11+, or the exceptiongroup backport)
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _in_own_loop(endpoint: Endpoint, use, timeout: float, connect_timeout: float):
    """Run in a thread of its own: a fresh asyncio loop on the selector gevent did not patch."""
    loop = asyncio.SelectorEventLoop(_selector())
    try:
        return loop.run_until_complete(asyncio.wait_for(_session(endpoint, use, connect_timeout), timeout))
    finally:
        # A transport a cancelled call left behind is closed here, while this thread's loop (and, under
        # gevent, its hub) still exists; collected later, its socket's close would meet a destroyed one.
        gc.collect()
        loop.close()


def _selector():
    if not event_loop_active():
        import selectors

        return selectors.DefaultSelector()
    from gevent import monkey

    return monkey.get_original("selectors", "DefaultSelector")()


async def _session(endpoint: Endpoint, use, connect_timeout: float):
    from mcp import Client

    async with Client(_transport(endpoint, connect_timeout)) as client:
        return await use(client)


def _transport(endpoint: Endpoint, connect_timeout: float):
    """The SDK's transport for the endpoint, its HTTP client connecting only at the pinned address."""
    from mcp.client.sse import sse_client
    from mcp.client.streamable_http import streamable_http_client

    def http_client(headers=None, timeout=None, auth=None):
        return _pinned_http_client(endpoint, connect_timeout, headers, auth)

    if endpoint.legacy_sse:
        return sse_client(
            endpoint.target.url, headers=endpoint.headers, timeout=connect_timeout, httpx_client_factory=http_client
        )
    return streamable_http_client(endpoint.target.url, http_client=http_client(endpoint.headers))


def _pinned_http_client(endpoint: Endpoint, connect_timeout: float, headers, auth):
    import httpcore2
    import httpx2

    transport = httpx2.AsyncHTTPTransport()
    # httpx2 takes no network backend; its pool is rebuilt with one that connects at the pinned address
    # (TLS still checks the certificate against the host name).
    transport._pool = httpcore2.AsyncConnectionPool(
        ssl_context=transport._pool._ssl_context, network_backend=_PinnedBackend(endpoint.target)
    )
    timeout = httpx2.Timeout(connect_timeout, read=300.0)
    return httpx2.AsyncClient(transport=transport, headers=headers or {}, timeout=timeout, auth=auth)


class _PinnedBackend:
    """httpcore2's network backend, connecting the pinned host at its checked address only."""

    def __init__(self, target: Pinned):
        import httpcore2

        self.target = target
        self.inner = httpcore2.AnyIOBackend()

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        import httpcore2

        if host != self.target.host:
            raise httpcore2.ConnectError(f"{host} is not the MCP server's host")
        return await self.inner.connect_tcp(
            self.target.address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        import httpcore2

        raise httpcore2.ConnectError("no Unix sockets for an MCP server")

    async def sleep(self, seconds):
        await self.inner.sleep(seconds)
