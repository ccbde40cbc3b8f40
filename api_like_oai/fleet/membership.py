"""Who is in the fleet, in Redis: each box's record under a key that expires unless renewed (its
heartbeat), and the set of addresses that names them.

    api-like-oai:fleet:box:<address>   JSON record (box_record), PX = the expiry (5 s): a box that
                                       stops renewing it (killed, partitioned) leaves within 5 s
    api-like-oai:fleet:boxes           SET of addresses; a front drops those whose record expired

A front reads the records at most every REFRESH_SECONDS per worker (two round trips: SMEMBERS, MGET)
and keeps the last it read: while Redis does not answer it places by them for the expiry from its first
failure, then answers 503 naming Redis (FleetUnavailable), never a 500.
"""

from __future__ import annotations

import json
import logging
import threading
import time

from ..errors import FleetUnavailable
from .placement import Box, ModelOnBox
from .settings import FleetSettings

log = logging.getLogger("api_like_oai.fleet")

PREFIX = "api-like-oai:fleet:"
BOXES_KEY = PREFIX + "boxes"
REFRESH_SECONDS = 0.5
REDIS_TIMEOUT_SECONDS = 1.0
# A model seen on a box is the fleet's for this long after its last box left: a 503 (its boxes are gone,
# retry), not a 404 (no such model), while a box restarts or another takes it over.
REMEMBERED_SECONDS = 3600.0


def box_key(address: str) -> str:
    return PREFIX + "box:" + address


def connect(redis_url: str):
    import redis  # the `redis` extra, imported only with --fleet

    return redis.Redis.from_url(
        redis_url, socket_timeout=REDIS_TIMEOUT_SECONDS, socket_connect_timeout=REDIS_TIMEOUT_SECONDS, health_check_interval=0
    )


def box_record(
    address: str,
    status: dict,
    static_models: list[str],
    saved: list[str],
    now: float,
    lending: dict | None = None,
    spread: dict[str, int] | None = None,
    default: str | None = None,
) -> dict:
    """A box's record from its supervisor's status (`{"op": "status"}`) and its models with fixed
    upstreams (always loaded, no memory counted); `lending`: its rpc-server's endpoint and what it lends;
    `spread`: the models its config keeps on several boxes (`boxes:`), and on how many; `default`: the
    model it serves a request naming none (a front's default model, FleetFront.default_model)."""
    models = {name: {"state": "loaded", "memory_mib": 0, "in_flight": 0, "queued": 0, "pinned": True} for name in static_models}
    for name, model in status.get("models", {}).items():
        models[name] = {
            "state": model["value"],
            "memory_mib": model["memory_mib"],
            "in_flight": model["in_flight"],
            "queued": model["queued"],
            "pinned": model.get("pinned", False),
            "borrows": _borrowed(model.get("args", ())),
            "boxes": (spread or {}).get(name, 1),
        }
    return {
        "address": address,
        "budget_mib": status.get("memory_budget_mib", 0),
        "models": models,
        "saved": sorted(saved),
        "in_flight": sum(m["in_flight"] for m in models.values()),
        "queued": sum(m["queued"] for m in models.values()),
        "time": now,
        "rpc": lending,
        "default": default,
    }


def _borrowed(args) -> list[str]:
    """The rpc-servers (host:port) a pooled model's `--rpc` flag names: loans no other pool may take."""
    args = list(args)
    return args[args.index("--rpc") + 1].split(",") if "--rpc" in args[:-1] else []


def box_of(record: dict) -> Box:
    """The placement's view of a record."""
    models = {
        name: ModelOnBox(
            model["state"],
            model["memory_mib"],
            model["in_flight"],
            model["queued"],
            model["pinned"],
            tuple(model.get("borrows", ())),
            model.get("boxes", 1),
        )
        for name, model in record["models"].items()
    }
    lending = record.get("rpc") or {}
    return Box(
        record["address"],
        record["budget_mib"],
        models,
        frozenset(record.get("saved", ())),
        lending.get("endpoint"),
        lending.get("lend_mib", 0),
    )


def publish(connection, record: dict, expiry_seconds: float) -> None:
    """One heartbeat: the record written with its expiry, its address named in the set (one round trip)."""
    pipe = connection.pipeline(transaction=False)
    pipe.set(box_key(record["address"]), json.dumps(record), px=int(expiry_seconds * 1000))
    pipe.sadd(BOXES_KEY, record["address"])
    pipe.execute()


def withdraw(connection, address: str) -> None:
    """A box leaving on purpose: gone at once instead of at its record's expiry."""
    pipe = connection.pipeline(transaction=False)
    pipe.delete(box_key(address))
    pipe.srem(BOXES_KEY, address)
    pipe.execute()


class Membership:
    """A front's view of the boxes: read from Redis at most every REFRESH_SECONDS, the last read kept
    through a Redis outage for the records' expiry."""

    def __init__(self, settings: FleetSettings, connection=None, clock=time.monotonic):
        self.settings = settings
        self.connection = connection if connection is not None else connect(settings.redis_url)
        self.clock = clock
        self.records: list[dict] = []
        self.read_at: float | None = None  # when Redis last answered
        self.failing_since: float | None = None  # the first read that failed since it last answered
        self.tried_at: float | None = None
        self.reading = threading.Lock()  # one read at a time (gevent patches it for the worker)
        self.seen: dict[str, float] = {}  # every model a record named, and when it last did (this worker's)

    def boxes(self) -> list[Box]:
        return [box_of(record) for record in self.current()]

    def current(self) -> list[dict]:
        """The boxes' records; FleetUnavailable once Redis has failed for the expiry (counted from its
        first failure, not from the last read: a front idle for a minute still has its records), or
        before it ever answered. A request that comes while the first read is under way waits for it;
        one that comes during a later read is placed by the records it replaces."""
        now = self.clock()
        if self.tried_at is None or now - self.tried_at >= REFRESH_SECONDS:
            self.tried_at = now
            with self.reading:
                self._refresh(now)
        elif self.read_at is None:
            with self.reading:
                pass
        failing_for = now - self.failing_since if self.failing_since is not None else 0.0
        if self.read_at is None or failing_for > self.settings.expiry_seconds:
            raise FleetUnavailable(
                f"the fleet's Redis ({self._where()}) has not answered for "
                f"{max(failing_for, self.settings.expiry_seconds):g} s: which boxes serve "
                "the model is unknown"
            )
        return self.records

    def remembered(self) -> set[str]:
        """The models a box's record named within REMEMBERED_SECONDS: the fleet's, boxes or none."""
        now = self.clock()
        return {name for name, seen_at in self.seen.items() if now - seen_at <= REMEMBERED_SECONDS}

    def forget(self) -> None:
        """Read again on the next request (a box refused or did not answer)."""
        self.tried_at = None

    def _refresh(self, now: float) -> None:
        try:
            self.records = self._read()
            self.read_at, self.failing_since = now, None
            self.seen.update((name, now) for record in self.records for name in record["models"])
        except Exception as exc:  # noqa: BLE001 - any failure of Redis: keep the last records for their expiry
            self.failing_since = self.failing_since if self.failing_since is not None else now
            log.warning(
                "fleet: Redis (%s) unreadable, placing by the records read %s: %s",
                self._where(),
                "never" if self.read_at is None else f"{now - self.read_at:.1f} s ago",
                exc,
            )

    def _read(self) -> list[dict]:
        addresses = sorted(member.decode() for member in self.connection.smembers(BOXES_KEY))
        if not addresses:
            return []
        values = self.connection.mget([box_key(address) for address in addresses])
        gone = [address for address, value in zip(addresses, values, strict=True) if value is None]
        if gone:
            self.connection.srem(BOXES_KEY, *gone)
        return [json.loads(value) for value in values if value is not None]

    def _where(self) -> str:
        kwargs = self.connection.connection_pool.connection_kwargs
        return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"
