"""The fleet's settings (--fleet, --advertise, --fleet-secret-file), read once at start-up."""

from __future__ import annotations

from dataclasses import dataclass, field

HEARTBEAT_SECONDS = 1.0  # a box writes its record this often
EXPIRY_SECONDS = 5.0  # a record not renewed for this long is gone: its box left the fleet
SECRET_HEADER = "X-Fleet-Secret"  # noqa: S105 - the header's name, not a secret
CALLER_HEADER = "X-Fleet-Caller"  # the client's key name, checked at the front, for the box's log
ROUTE_HEADER = "X-Fleet-Route"  # why the front chose this box, for the box's log
GRANTS_HEADER = "X-Fleet-MCP-Grants"  # a tenant's grants of named MCP servers, comma-separated ("": none)
TENANT_HEADER = "X-Fleet-Tenant"  # "1": the front's client sees only its own (no address, no model steering)


@dataclass(frozen=True)
class FleetSettings:
    redis_url: str
    secret: str = field(default="", repr=False)  # from --fleet-secret-file: never in a log or a repr
    advertise: str | None = None  # a box: the URL the other instances reach it at; None: a front only
    heartbeat_seconds: float = HEARTBEAT_SECONDS
    expiry_seconds: float = EXPIRY_SECONDS
    rpc_lend_mib: int = 0  # --rpc-lend: memory this box lends to pooled models through its rpc-server
    rpc_server: str | None = None  # the rpc-server binary (llama.cpp's RPC backend)

    def to_dict(self) -> dict:
        """What the member process needs (never the secret: it makes no fleet calls)."""
        return {
            "redis_url": self.redis_url,
            "advertise": self.advertise,
            "heartbeat_seconds": self.heartbeat_seconds,
            "expiry_seconds": self.expiry_seconds,
        }

    @property
    def advertised_host(self) -> str | None:
        from urllib.parse import urlsplit

        return urlsplit(self.advertise).hostname if self.advertise else None
