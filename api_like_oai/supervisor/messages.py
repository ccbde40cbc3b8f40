"""The supervisor's socket protocol, typed, shared by both ends (listener.py answers, client.py asks).

One connection per request; one JSON line per message. A worker sends one request:
    Acquire(model, unreachable)   -> Wait* then Granted (the connection is then the lease: its end
                                     releases it) or Refused
    Load(model, args, lent_mib, rpc), Unload(model), KeepAlive(model, seconds)   -> Wait* then ModelStatus
    Status()                      -> ServerStatus;  Logs(model) -> LogLines
    Occupancy()                   -> ServerStatus of {"models": {name: occupancy.Occupancy's JSON}}
    Events()                      -> Event per change (the whole status first), until the worker hangs up
Any request may be answered Refused (an unknown model: 404; a full queue: 429; a failed start: 503).

On the wire a request is {"op": ..., its fields}; the replies keep the shapes the workers' callers read
(`SupervisorClient.ask` hands back a reply's JSON): {"wait": stage}, {"ok": true, "urls": [...]},
{"error": ..., "status": ..., "retry_after": ...}, {"status": {...}}, the server's status itself,
{"lines": [...]}, {"event": ...}.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import ClassVar

# --- requests: worker -> supervisor --------------------------------------------------------------


@dataclass(frozen=True)
class Acquire:
    """A lease on `model` once it is loaded; `unreachable`: its replicas the worker could not reach."""

    OP: ClassVar[str] = "acquire"
    model: str
    unreachable: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Load:
    """Load `model`, with a caller's `args` (launch_rules' allowlist) added to its configured command line
    (restarted if they changed; none: the configured launch); `rpc` the helpers a fleet's pool runs on
    (the proxy's own, never a caller's) and `lent_mib` of its memory held by them."""

    OP: ClassVar[str] = "load"
    model: str
    args: list[str] | None = None
    lent_mib: int = 0
    rpc: list[str] | None = None


@dataclass(frozen=True)
class Unload:
    OP: ClassVar[str] = "unload"
    model: str


@dataclass(frozen=True)
class KeepAlive:
    """`model` stays loaded `seconds` idle from now on (0: for ever), until it is stopped."""

    OP: ClassVar[str] = "keep_alive"
    model: str
    seconds: float = 0.0


@dataclass(frozen=True)
class Status:
    OP: ClassVar[str] = "status"


@dataclass(frozen=True)
class Occupancy:
    """How busy each model is (occupancy.py), for the inference pool's metrics."""

    OP: ClassVar[str] = "occupancy"


@dataclass(frozen=True)
class Logs:
    OP: ClassVar[str] = "logs"
    model: str


@dataclass(frozen=True)
class Events:
    OP: ClassVar[str] = "events"


Request = Acquire | Load | Unload | KeepAlive | Status | Occupancy | Logs | Events
REQUESTS: dict[str, type] = {kind.OP: kind for kind in (Acquire, Load, Unload, KeepAlive, Status, Occupancy, Logs, Events)}


class BadMessage(ValueError):
    """A line that is not a request or a reply of this protocol."""


def encode(message) -> bytes:
    """One line: a request or a reply."""
    data = {"op": message.OP, **asdict(message)} if hasattr(message, "OP") else message.to_json()
    return json.dumps(data).encode() + b"\n"


def read_request(line: bytes) -> Request:
    """The request of a worker's line; BadMessage for anything else."""
    try:
        return request_of(json.loads(line))
    except json.JSONDecodeError as exc:
        raise BadMessage(str(exc)) from None


def request_of(data: dict) -> Request:
    """The typed request a worker's line holds; BadMessage for anything else."""
    kind = REQUESTS.get(data.get("op")) if isinstance(data, dict) else None
    if kind is None:
        raise BadMessage(f"not a request: {data!r:.200}")
    values = {name: data[name] for name in (f.name for f in fields(kind)) if name in data}
    try:
        request = kind(**values)
    except TypeError as exc:
        raise BadMessage(str(exc)) from None
    _check(request)
    return request


def _check(request) -> None:
    """Each field of `request` has its declared type (lists: of strings)."""
    for spec in fields(request):
        value = getattr(request, spec.name)
        if spec.type == "str" and not isinstance(value, str) or spec.type == "float" and not isinstance(value, (int, float)):
            raise BadMessage(f"{request.OP}: {spec.name} must be a {spec.type}")
        if spec.type == "int" and not isinstance(value, int):
            raise BadMessage(f"{request.OP}: {spec.name} must be an int")
        if (
            "list" in spec.type
            and value is not None
            and not (isinstance(value, list) and all(isinstance(item, str) for item in value))
        ):
            raise BadMessage(f"{request.OP}: {spec.name} must be a list of strings")


# --- replies: supervisor -> worker ---------------------------------------------------------------


@dataclass(frozen=True)
class Wait:
    """Not yet: what the model's load is doing (or "queued")."""

    stage: str

    def to_json(self) -> dict:
        return {"wait": self.stage}


@dataclass(frozen=True)
class Granted:
    """The lease: the model's ready replicas."""

    urls: list[str]

    def to_json(self) -> dict:
        return {"ok": True, "urls": self.urls}


@dataclass(frozen=True)
class Refused:
    """The request's refusal, with the HTTP status it maps to (client.as_proxy_error)."""

    error: str
    status: int = 503
    retry_after: int | None = None

    def to_json(self) -> dict:
        return {"error": self.error, "status": self.status, "retry_after": self.retry_after}


@dataclass(frozen=True)
class ModelStatus:
    """One model's status after a load, an unload or a keep-alive (service.Managed.status_dict)."""

    status: dict

    def to_json(self) -> dict:
        return {"status": self.status}


@dataclass(frozen=True)
class ServerStatus:
    """Every model's status, the budget and the devices' use (service.Supervisor.status)."""

    status: dict

    def to_json(self) -> dict:
        return self.status


@dataclass(frozen=True)
class LogLines:
    lines: list[str]

    def to_json(self) -> dict:
        return {"lines": self.lines}


@dataclass(frozen=True)
class Event:
    """A change: {"model", "status", "time"}; the first of a stream is the whole ServerStatus's JSON."""

    event: dict

    def to_json(self) -> dict:
        return {"event": self.event}


Reply = Wait | Granted | Refused | ModelStatus | ServerStatus | LogLines | Event


def reply_of(data: dict) -> Reply:
    """The typed reply a supervisor's line holds (by the key that marks each shape)."""
    if not isinstance(data, dict):
        raise BadMessage(f"not a reply: {data!r:.200}")
    if "wait" in data:
        return Wait(data["wait"])
    if data.get("ok"):
        return Granted(data["urls"])
    if "error" in data:
        return Refused(data["error"], data.get("status", 503), data.get("retry_after"))
    if "lines" in data:
        return LogLines(data["lines"])
    if "event" in data:
        return Event(data["event"])
    if "status" in data:
        return ModelStatus(data["status"])
    return ServerStatus(data)
