"""What an open dashboard is sent: `live` once a second (models, upstreams, requests in flight) and
`history` when it changes (charts and recent errors, history.py).

Made in two steps, the supervisor's way (plan.decide then one loop that acts): `Collector.collect` does
all the I/O from narrow sources (every worker's requests, the supervisor's status, the upstreams' health
and slots, the fleet's records) into a `Collected`, and `payload` turns that into the frame, pure.

Both frames come from state the proxy keeps anyway, at most once a second per process however many
dashboards are open, and are made by the stream's greenlet: the request path does no work for the
dashboard. Only an upstream's health (every HEALTH_SECONDS) and its slot count (/props, every
PROPS_SECONDS) are asked of the upstreams, never per token. With several workers the requests come
from every worker (siblings.py): each reports its own, with their token rates measured on its clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..errors import ProxyError
from ..fleet.membership import box_of
from ..observability import GENERATING, PREFILL
from .history import UNCHARTED, History

LIVE_SECONDS = 1.0
HISTORY_SECONDS = 5.0
HEALTH_SECONDS = 5.0
PROPS_SECONDS = 60.0


# --- one worker's requests -----------------------------------------------------------------------


@dataclass(frozen=True)
class LiveRequest:
    """One request in flight as its worker reports it: the row the list shows (RequestRecord.live and
    its key) and the token rates it adds to its upstream's row."""

    shown: dict
    prompt_tps: float = 0.0
    generated_tps: float = 0.0

    def to_wire(self) -> dict:
        return {"shown": self.shown, "prompt_tps": self.prompt_tps, "generated_tps": self.generated_tps}

    @classmethod
    def from_wire(cls, fields: dict) -> LiveRequest:
        return cls(fields["shown"], fields["prompt_tps"], fields["generated_tps"])


def live_requests(records: Iterable) -> list[LiveRequest]:
    """This worker's charted requests (RequestRecords), read where they live: their rates are per clock."""
    return [
        LiveRequest({**record.live(), "key": getattr(record, "key_name", None)}, _prompt_rate(record), _generated_rate(record))
        for record in records
        if record.endpoint not in UNCHARTED
    ]


def _prompt_rate(record) -> float:
    """Prompt tokens per second the upstream computes for `record` now (0 unless it is reading it)."""
    progress = record.prefill
    if record.phase != PREFILL or progress is None or progress.elapsed_ms <= 0:
        return 0.0
    return max(progress.processed - progress.cached, 0) / (progress.elapsed_ms / 1000)


def _generated_rate(record) -> float:
    if record.phase != GENERATING or record.usage is None or record.first_token is None:
        return 0.0
    seconds = time.perf_counter() - record.first_token
    return record.usage.completion_tokens / seconds if seconds > 0 else 0.0


# --- collect: the I/O ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelUpstreams:
    """A model the proxy serves and its upstreams' addresses; `counts_slots`: they are llama.cpp's,
    whose /props says how many slots each has."""

    name: str
    urls: tuple[str, ...]
    counts_slots: bool


@dataclass(frozen=True)
class Collected:
    """Everything one `live` frame is made of, read at `time` (wall clock)."""

    time: float
    requests: list[LiveRequest]
    models: list[ModelUpstreams]
    health: dict[str, str]  # url -> "ok", or what is wrong with it
    status: dict | None = None  # the supervisor's (None: the proxy starts no models)
    slots: dict[str, int | None] = field(default_factory=dict)  # url -> llama.cpp's total_slots
    cache_shares: dict[str, float] = field(default_factory=dict)  # url -> share of prompt tokens cached
    fleet: list[dict] | str | None = None  # the boxes' records, or why they are unknown (None: no fleet)
    batches: list[dict] = field(default_factory=list)  # the batches being run (batch/batches.progress)


@dataclass
class Sources:
    """What the collector reads, and nothing else of the app."""

    requests: Callable[[], list[LiveRequest]]  # every worker's requests in flight
    models: Callable[[], Iterable]  # the registry's models (services.models)
    status: Callable[[], dict | None] = lambda: None  # the supervisor's status (None: it starts no models)
    fleet: Callable[[], list[dict]] | None = None  # the fleet's membership records (None: no --fleet)
    batches: Callable[[], list[dict]] = list  # the batches not finished, every key's (none: --store none)


class Collector:
    """The I/O of a live frame; the upstreams' health and slot counts kept between their asks."""

    def __init__(self, sources: Sources):
        self.sources = sources
        self._checked: tuple[float, dict[str, str]] = (0.0, {})  # the health of upstreams started elsewhere
        self._slots: dict[str, tuple[float, int | None]] = {}

    def collect(self, now: float, cache_shares: dict[str, float]) -> Collected:
        models = list(self.sources.models())
        status = self.sources.status()
        started = status["models"] if status is not None else {}
        health = self._checked_health(now, [model for model in models if model.name not in started])
        health = health | started_health(started)
        slots = {
            client.base_url: self._slot_count(client, health.get(client.base_url), now)
            for model in models
            if model.upstream.capabilities.props
            for client in _clients(model)
        }
        return Collected(
            time.time(),
            self.sources.requests(),
            [
                ModelUpstreams(
                    model.name, tuple(client.base_url for client in _clients(model)), model.upstream.capabilities.props
                )
                for model in models
            ],
            health,
            status,
            slots,
            cache_shares,
            self._fleet(),
            self._batches(),
        )

    def _checked_health(self, now: float, models: list) -> dict[str, str]:
        """The health of upstreams the proxy does not start, asked of them every HEALTH_SECONDS."""
        if now - self._checked[0] >= HEALTH_SECONDS:
            checked: dict[str, str] = {}
            for model in models:
                checked |= model.check_health()
            self._checked = (now, checked)
        return self._checked[1]

    def _slot_count(self, client, health: str | None, now: float) -> int | None:
        """The upstream's slots (llama.cpp's /props total_slots), asked again every PROPS_SECONDS."""
        asked_at, slots = self._slots.get(client.base_url, (0.0, None))
        if health == "ok" and (slots is None and now - asked_at >= HEALTH_SECONDS or now - asked_at >= PROPS_SECONDS):
            try:
                slots = client.props().total_slots
            except Exception:  # noqa: BLE001 - any failure leaves the count unknown until the next try
                slots = None
            self._slots[client.base_url] = (now, slots)
        return slots

    def _batches(self) -> list[dict]:
        try:
            return self.sources.batches()
        except ProxyError:  # the store failing: the frame goes out without them
            return []

    def _fleet(self) -> list[dict] | str | None:
        if self.sources.fleet is None:
            return None
        try:
            return self.sources.fleet()
        except ProxyError as exc:  # Redis unreachable past the last membership's expiry
            return exc.message


def started_health(started: dict) -> dict[str, str]:
    """The health of the started models' upstreams, from the supervisor's status: unloaded is a started
    model's resting state, not a failure."""
    return {url: "ok" if own["value"] == "loaded" else own["value"] for own in started.values() for url in own["upstreams"]}


def _clients(model) -> list:
    return model.upstream.servers()


# --- payload: pure -------------------------------------------------------------------------------


def payload(collected: Collected) -> dict:
    """The `live` frame of what was collected."""
    return {
        "time": collected.time,
        "requests": [request.shown for request in collected.requests],
        "models": _models(collected),
        "memory": _memory(collected.status),
        "upstreams": _upstreams(collected),
        "fleet": _fleet(collected.fleet),
        "batches": collected.batches,
    }


def _models(collected: Collected) -> list[dict]:
    started = collected.status["models"] if collected.status is not None else {}
    models = []
    for model in collected.models:
        if model.name in started:
            own = started[model.name]
            models.append(
                {
                    "name": model.name,
                    "started": True,
                    "status": own["value"],
                    "stage": own.get("stage"),
                    "memory_mib": own["memory_mib"],
                    "error": own.get("error"),
                    "devices": own.get("devices"),
                    "draft": own.get("draft"),
                }
            )
        else:  # its upstreams are started by someone else: loaded while one of them answers
            answering = any(collected.health.get(url) == "ok" for url in model.urls)
            models.append(
                {
                    "name": model.name,
                    "started": False,
                    "status": "loaded" if answering else "failed",
                    "stage": None,
                    "memory_mib": None,
                    "error": None if answering else next((collected.health.get(url) for url in model.urls), None),
                }
            )
    return models


def _upstreams(collected: Collected) -> list[dict]:
    rows = []
    for model in collected.models:
        for url in model.urls:
            on_it = [request for request in collected.requests if request.shown["upstream"] == url]
            rows.append(
                {
                    "model": model.name,
                    "url": url,
                    "health": collected.health.get(url, "unknown"),
                    "slots_busy": sum(request.shown["phase"] in (PREFILL, GENERATING) for request in on_it),
                    "slots_total": collected.slots.get(url) if model.counts_slots else None,
                    "prompt_tps": round(sum(request.prompt_tps for request in on_it), 1),
                    "generated_tps": round(sum(request.generated_tps for request in on_it), 1),
                    "cache_share": collected.cache_shares.get(url),
                }
            )
    return rows


def _fleet(fleet: list[dict] | str | None) -> dict | None:
    """The fleet's boxes as this instance knows them (None without --fleet): each box's budget and use,
    its requests in flight and queued, and its models' states; or why the fleet is unknown."""
    if fleet is None:
        return None
    if isinstance(fleet, str):
        return {"boxes": [], "error": fleet}
    boxes = []
    for record in fleet:
        box = box_of(record)
        boxes.append(
            {
                "box": box.address,
                "budget_mib": box.budget_mib,
                "used_mib": box.used_mib,
                "in_flight": record["in_flight"],
                "queued": record["queued"],
                "models": [{"name": name, "state": model.state} for name, model in sorted(box.models.items())],
            }
        )
    return {"boxes": boxes, "error": None}


def _memory(status: dict | None) -> dict | None:
    """The started models' memory against the budget (None: the proxy starts no models)."""
    if status is None:
        return None
    used = sum(model["memory_mib"] for model in status["models"].values() if model["value"] in ("loaded", "loading"))
    devices = [{"device": device, **use} for device, use in status.get("devices", {}).items()]
    return {"budget_mib": status["memory_budget_mib"], "used_mib": used, "devices": devices}


# --- the view the streams share ------------------------------------------------------------------


class LiveView:
    """One per process (app state): the latest `live` and `history` payloads, remade when old."""

    def __init__(self, collector: Collector, history: History):
        self.collector, self.history = collector, history
        self._lock = threading.Lock()
        self._live: tuple[float, dict] = (0.0, {})
        self._history: tuple[float, dict] = (0.0, {})
        self.closed = False

    def close(self) -> None:
        """The worker is shutting down (worker.py): open streams end within a second (a page then
        reconnects, to another worker or the restarted proxy), and the history is saved now."""
        self.closed = True
        self.history.flush()

    def current(self) -> tuple[dict, dict]:
        """(live, history), each remade if older than its period; the same objects until then."""
        now = time.monotonic()
        with self._lock:  # one greenlet makes them while the others wait for the result
            if now - self._history[0] >= HISTORY_SECONDS:
                self._history = (now, self.history.charts())
            if now - self._live[0] >= LIVE_SECONDS:
                collected = self.collector.collect(now, self._history[1].get("cache_shares", {}))
                self._live = (now, payload(collected))
            return self._live[1], self._history[1]


def for_viewer(payload: dict, caller, sees_all: bool) -> dict:
    """`payload` (live or history) as `caller` (access.keys.Caller) may see it: an admin (or a key from
    the flags while no admin key is configured) sees everything; another key its own requests and
    errors, its key's models and their upstreams without addresses, its own series of tokens, no fleet; the
    server-wide counts stay (they name nothing)."""
    if sees_all:
        return payload
    key_name = caller.name
    shown = dict(payload)
    if "requests" in payload:
        shown["requests"] = [{**entry, "upstream": None} for entry in payload["requests"] if entry["key"] == key_name]
    if "errors" in payload:
        shown["errors"] = [entry for entry in payload["errors"] if entry.get("key") == key_name]
    if "batches" in payload:
        shown["batches"] = [entry for entry in payload["batches"] if entry["key"] == key_name]
    if "models" in payload:
        shown["models"] = [entry for entry in payload["models"] if caller.allows(entry["name"])]
    if "upstreams" in payload:
        shown["upstreams"] = [
            {**row, "url": f"{row['model']} #{number}", "cache_share": None}
            for number, row in enumerate(row for row in payload["upstreams"] if caller.allows(row["model"]))
        ]
    if "cache_shares" in payload:
        shown["cache_shares"] = {}
    if payload.get("fleet") is not None:  # the boxes' addresses and every model on them: the operator's
        shown["fleet"] = None
    for window in ("minute", "hour"):
        if window in payload:
            shown[window] = {
                **payload[window],
                "keys": {name: series for name, series in payload[window]["keys"].items() if name == key_name},
            }
    return shown
