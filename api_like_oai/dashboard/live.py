"""What an open dashboard is sent: `live` once a second (models, upstreams, requests in flight) and
`history` when it changes (charts and recent errors, history.py).

Both are made from state the proxy keeps anyway (the live requests' records, the supervisor's
status, the history's buckets), at most once a second per process however many dashboards are open,
and read by the stream's greenlet: the request path does no work for the dashboard. Only an
upstream's health (every HEALTH_SECONDS) and its slot count (/props, every PROPS_SECONDS) are asked
of the upstreams, never per token.
"""

from __future__ import annotations

import threading
import time

from ..errors import ProxyError
from ..fleet.membership import box_of
from ..observability import GENERATING, PREFILL
from .history import UNCHARTED, History

LIVE_SECONDS = 1.0
HISTORY_SECONDS = 5.0
HEALTH_SECONDS = 5.0
PROPS_SECONDS = 60.0


class LiveView:
    """One per process (app state): the latest `live` and `history` payloads, remade when old."""

    def __init__(self, state, history: History):
        self.state, self.history = state, history
        self._lock = threading.Lock()
        self._live: tuple[float, dict] = (0.0, {})
        self._history: tuple[float, dict] = (0.0, {})
        self._health: tuple[float, dict[str, str]] = (0.0, {})
        self._slots: dict[str, tuple[float, int | None]] = {}
        self.closed = False

    def close(self) -> None:
        """The worker is shutting down (worker.py): open streams end within a second (a page then
        reconnects, to another worker or the restarted proxy), and the history is saved now."""
        self.closed = True
        self.history.flush()

    def current(self) -> tuple[dict, dict]:
        """(live, history), each remade if older than its period; the same objects until then."""
        now = time.monotonic()
        with self._lock:   # one greenlet makes them while the others wait for the result
            if now - self._history[0] >= HISTORY_SECONDS:
                self._history = (now, self.history.charts())
            if now - self._live[0] >= LIVE_SECONDS:
                self._live = (now, self._make_live(now))
            return self._live[1], self._history[1]

    # --- live ------------------------------------------------------------------------------------

    def _make_live(self, now: float) -> dict:
        records = [record for record in self.state.inflight.requests.records() if record.endpoint not in UNCHARTED]
        requests = [{**record.live(), "key": getattr(record, "key_name", None)} for record in records]
        status = self.state.supervisor.ask("status") if self.state.supervisor is not None else None
        health = self._upstream_health(now, status)
        return {"time": time.time(), "requests": requests, "models": self._models(status, health),
                "memory": _memory(status), "upstreams": self._upstreams(records, health, now),
                "fleet": _fleet(self.state.fleet)}

    def _models(self, status: dict | None, health: dict[str, str]) -> list[dict]:
        started = status["models"] if status is not None else {}
        models = []
        for model in self.state.registry.models.values():
            if model.name in started:
                own = started[model.name]
                models.append({"name": model.name, "started": True, "status": own["value"],
                               "stage": own.get("stage"), "memory_mib": own["memory_mib"], "error": own.get("error"),
                               "devices": own.get("devices"), "draft": own.get("draft")})
            else:   # its upstreams are started by someone else: loaded while one of them answers
                urls = [client.base_url for client in _clients(model)]
                answering = any(health.get(url) == "ok" for url in urls)
                models.append({"name": model.name, "started": False, "status": "loaded" if answering else "failed",
                               "stage": None, "memory_mib": None,
                               "error": None if answering else next((health.get(url) for url in urls), None)})
        return models

    def _upstreams(self, records: list, health: dict[str, str], now: float) -> list[dict]:
        shares = self._history[1].get("cache_shares", {})
        rows = []
        for model in self.state.registry.models.values():
            for client in _clients(model):
                url = client.base_url
                on_it = [record for record in records if record.upstream == url]
                rows.append({"model": model.name, "url": url, "health": health.get(url, "unknown"),
                             "slots_busy": sum(record.phase in (PREFILL, GENERATING) for record in on_it),
                             "slots_total": self._slot_count(client, health.get(url), now) if model.upstream.capabilities.props
                             else None,
                             "prompt_tps": round(sum(_prompt_rate(record) for record in on_it), 1),
                             "generated_tps": round(sum(_generated_rate(record) for record in on_it), 1),
                             "cache_share": shares.get(url)})
        return rows

    def _upstream_health(self, now: float, status: dict | None) -> dict[str, str]:
        if now - self._health[0] < HEALTH_SECONDS:
            return self._health[1]
        started = status["models"] if status is not None else {}
        health: dict[str, str] = {}
        for model in self.state.registry.models.values():
            if model.name in started:   # unloaded is a started model's resting state, not a failure
                value = started[model.name]["value"]
                health |= {url: "ok" if value == "loaded" else value for url in started[model.name]["upstreams"]}
            else:
                health |= model.check_health()
        self._health = (now, health)
        return health

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


def _clients(model) -> list:
    return model.upstream.servers()


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


def _fleet(fleet) -> dict | None:
    """The fleet's boxes as this instance knows them (None without --fleet): each box's budget and use,
    its requests in flight and queued, and its models' states; or why the fleet is unknown."""
    if fleet is None:
        return None
    try:
        records = fleet.membership.current()
    except ProxyError as exc:   # Redis unreachable past the last membership's expiry
        return {"boxes": [], "error": exc.message}
    boxes = []
    for record in records:
        box = box_of(record)
        boxes.append({"box": box.address, "budget_mib": box.budget_mib, "used_mib": box.used_mib,
                      "in_flight": record["in_flight"], "queued": record["queued"],
                      "models": [{"name": name, "state": model.state} for name, model in sorted(box.models.items())]})
    return {"boxes": boxes, "error": None}


def _memory(status: dict | None) -> dict | None:
    """The started models' memory against the budget (None: the proxy starts no models)."""
    if status is None:
        return None
    used = sum(model["memory_mib"] for model in status["models"].values() if model["value"] in ("loaded", "loading"))
    devices = [{"device": device, **use} for device, use in status.get("devices", {}).items()]
    return {"budget_mib": status["memory_budget_mib"], "used_mib": used, "devices": devices}


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
    if "models" in payload:
        shown["models"] = [entry for entry in payload["models"] if caller.allows(entry["name"])]
    if "upstreams" in payload:
        shown["upstreams"] = [{**row, "url": f"{row['model']} #{number}", "cache_share": None}
                              for number, row in enumerate(row for row in payload["upstreams"] if caller.allows(row["model"]))]
    if "cache_shares" in payload:
        shown["cache_shares"] = {}
    if payload.get("fleet") is not None:   # the boxes' addresses and every model on them: the operator's
        shown["fleet"] = None
    for window in ("minute", "hour"):
        if window in payload:
            shown[window] = {**payload[window], "keys": {name: series for name, series in payload[window]["keys"].items()
                                                         if name == key_name}}
    return shown
