"""An MCP server URL a request names, checked before the proxy connects: http(s), and every address
its host resolves to public unless --mcp-allow-private-urls (a proxy that connects where a client
says would otherwise reach its own network). The addresses checked are the ones connected to: the
client pins the host to them (`Pinned`), so a DNS answer that changes between the check and the
connection (rebinding) is never used.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..errors import InvalidRequest


@dataclass(frozen=True)
class Pinned:
    """A server URL and the one address its host is connected at."""

    url: str
    host: str
    address: str


def pinned(url: str, param: str, allow_private: bool) -> Pinned:
    """`url` checked and its host resolved once; InvalidRequest (400, naming `param`) if it is not
    http(s), does not resolve, or resolves to a non-public address that is not allowed."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidRequest("server_url must be an http(s) URL", param=param, code="invalid_mcp_server_url")
    try:
        infos = socket.getaddrinfo(
            parts.hostname, parts.port or (443 if parts.scheme == "https" else 80), type=socket.SOCK_STREAM
        )
    except (OSError, UnicodeError):
        raise InvalidRequest(
            f"the MCP server's host {parts.hostname!r} does not resolve", param=param, code="invalid_mcp_server_url"
        ) from None
    addresses = [info[4][0] for info in infos]
    if not allow_private and not all(_public(address) for address in addresses):
        raise InvalidRequest(
            "the MCP server is at a private, loopback or link-local address, which this proxy "
            "does not connect to (--mcp-allow-private-urls)",
            param=param,
            code="invalid_mcp_server_url",
        )
    return Pinned(url, parts.hostname, addresses[0])


def _public(address: str) -> bool:
    return ipaddress.ip_address(address.split("%")[0]).is_global
