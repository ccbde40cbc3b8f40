"""One access-log line and the Prometheus metrics per request, from a RequestRecord.

The record is filled as the request goes (model, upstream, token counts, first token time) and
closed once: after the response for plain answers, at the end of the stream for streams. Prompts,
completions and keys never reach it; with --log-prompts the prompt is logged separately.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.multiprocess import MultiProcessCollector

access_log = logging.getLogger("api_like_oai.access")

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Metrics:
    """The proxy's Prometheus metrics, in a registry of their own (one per app).

    With --workers N, gunicorn's master sets PROMETHEUS_MULTIPROC_DIR (server.py) before the
    workers import prometheus_client: every worker then writes its values to files there, and
    collected() sums the files of all workers, so /metrics reports the whole server."""

    def __init__(self):
        self.registry = CollectorRegistry()
        self._add_request_metrics()
        self._add_upstream_metrics()
        self._add_key_metrics()
        self._add_mcp_and_stream_metrics()
        self._add_fleet_and_audio_metrics()
        self._add_batch_metrics()
        self._children: dict[tuple, object] = {}

    def _add_request_metrics(self) -> None:
        """Every request's count, tokens and timings."""
        self.requests = Counter(
            "api_like_oai_requests",
            "Requests by endpoint, model and status",
            ["endpoint", "model", "status"],
            registry=self.registry,
        )
        self.tokens = Counter(
            "api_like_oai_tokens", "Tokens by model and kind (prompt, completion)", ["model", "kind"], registry=self.registry
        )
        self.time_to_first_token = Histogram(
            "api_like_oai_time_to_first_token_seconds",
            "Time to first token",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.duration = Histogram(
            "api_like_oai_request_duration_seconds",
            "Request duration",
            ["endpoint", "model"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.prefill_seconds = Histogram(
            "api_like_oai_prefill_seconds",
            "Seconds llama.cpp took to read a "
            "prompt (its own prompt_progress.time_ms), from prefill start to the "
            "first token, queueing excluded",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def _add_upstream_metrics(self) -> None:
        """The upstreams' errors, their prompt caches at work, and the choice among a model's upstreams."""
        self.upstream_errors = Counter(
            "api_like_oai_upstream_errors", "Errors from upstream servers", ["upstream", "code"], registry=self.registry
        )
        self.cached_prompt_tokens = Counter(
            "api_like_oai_cached_prompt_tokens",
            "Prompt tokens llama.cpp took from its cache instead of computing them",
            ["model"],
            registry=self.registry,
        )
        self.routing = Counter(
            "api_like_oai_routing",
            "Upstream choices by whether the upstream held the prompt's "
            "prefix (result hit/miss) and why it was chosen (reason: prefix, session, least-busy, "
            "overloaded; failover when it failed to start the request; restart after waiting for a crashed "
            "model's restart; only for a model with one upstream)",
            ["model", "result", "reason"],
            registry=self.registry,
        )

    def _add_key_metrics(self) -> None:
        """The keys' limits at work, and the per-key counts of --metrics-per-key."""
        self.limit_refusals = Counter(
            "api_like_oai_limit_refusals",
            "Requests refused with a 429 by the key "
            "limit they were over (max_parallel, rpm, tpm, tokens_per_day, "
            "audio_seconds_per_day)",
            ["limit"],
            registry=self.registry,
        )
        self.limits_unchecked = Counter(
            "api_like_oai_limits_unchecked",
            "Requests whose key limits could not be checked, the store failing; outcome: refused (closed) or let run (open)",
            ["outcome"],
            registry=self.registry,
        )
        self.key_requests = Counter(
            "api_like_oai_key_requests",
            "Requests per managed key (--metrics-per-key)",
            ["key", "model", "status"],
            registry=self.registry,
        )
        self.key_tokens = Counter(
            "api_like_oai_key_tokens",
            "Tokens per managed key and kind (--metrics-per-key)",
            ["key", "kind"],
            registry=self.registry,
        )

    def _add_mcp_and_stream_metrics(self) -> None:
        """MCP calls, the streams being relayed, and the requests waiting for a slot."""
        self.mcp_calls = Counter(
            "api_like_oai_mcp_calls",
            "MCP tool calls the proxy ran for requests (tool "
            "tools/list: a listing), by server label, tool and outcome (ok, error); past 256 "
            "server and tool pairs a process counts the rest as other",
            ["server", "tool", "outcome"],
            registry=self.registry,
        )
        self.mcp_call_seconds = Histogram(
            "api_like_oai_mcp_call_seconds",
            "Seconds an MCP tool call (or listing) took",
            ["server", "tool"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.streams_in_flight = Gauge(
            "api_like_oai_streams_in_flight", "Streams being relayed now", registry=self.registry, multiprocess_mode="livesum"
        )
        # A front relays a request to a box without generating (no stream counted above): an autoscaler of
        # fronts reads this one (the Helm chart's HPA).
        self.requests_in_flight = Gauge(
            "api_like_oai_requests_in_flight",
            "Requests being answered now, any API (a fleet's front: those it relays too)",
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        self.slot_waiting = Gauge(
            "api_like_oai_slot_waiting",
            "Requests waiting in the proxy for a free upstream slot, by their key's priority",
            ["priority"],
            registry=self.registry,
            multiprocess_mode="livesum",
        )

    def _add_batch_metrics(self) -> None:
        """The batch runners' lines (batch/runner.py)."""
        self.batch_lines = Counter(
            "api_like_oai_batch_lines",
            "Batch lines answered by outcome (completed, failed), and preempted (stopped for an interactive "
            "request, to run again)",
            ["outcome"],
            registry=self.registry,
        )
        self.batch_lines_pending = Gauge(
            "api_like_oai_batch_lines_pending",
            "Lines of the batches being run that have no result yet",
            registry=self.registry,
            multiprocess_mode="livesum",
        )

    def slot_waiting_noted(self, priority: str, delta: int) -> None:
        """A request begins (+1) or ends (-1) waiting for a slot (access.priority.SlotQueue's on_wait)."""
        self.slot_waiting.labels(priority).inc(delta)

    def _add_fleet_and_audio_metrics(self) -> None:
        """A fleet front's relays to its boxes, and the audio transcribed."""
        self.fleet_relays = Counter(
            "api_like_oai_fleet_relays",
            "Requests a fleet's front relayed to a box, by box, "
            "route (prefix, loaded, loading, restored, fits, evict, busy) and status",
            ["box", "route", "status"],
            registry=self.registry,
        )
        self.fleet_passed_over = Counter(
            "api_like_oai_fleet_passed_over",
            "Boxes a front passed over for the next candidate: unreachable, or refusing (503)",
            ["box"],
            registry=self.registry,
        )
        self.audio_seconds = Counter(
            "api_like_oai_audio_seconds",
            "Seconds of audio transcribed or translated, by model (from each file's header)",
            ["model"],
            registry=self.registry,
        )

    def child(self, metric, *values: str):
        """`metric.labels(*values)`, looked up once: prometheus_client checks the values and takes a lock
        (a gevent lock in the worker) on every labels() call, and every request closes with six of them.
        As many as prometheus_client keeps itself: one per set of label values."""
        key = (metric, values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*values)
        return found

    def count_key(self, entry) -> None:
        """One finished request of a managed key (access.usage.UsageEntry), labelled by the key's name."""
        self.child(self.key_requests, entry.key, entry.model, "error" if entry.errors else "ok").inc()
        self.child(self.key_tokens, entry.key, "prompt").inc(entry.prompt_tokens)
        self.child(self.key_tokens, entry.key, "completion").inc(entry.completion_tokens)

    def collected(self) -> CollectorRegistry:
        """The registry to serve: this process's, or every worker's summed in multiprocess mode."""
        directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if not directory:
            return self.registry
        registry = CollectorRegistry()
        MultiProcessCollector(registry, directory)
        return registry


_UNTRACED = contextlib.nullcontext()


ONE_SPAN_STAGES = frozenset({"admission"})  # timed in several steps before the generation, traced as one


def stage(record: RequestRecord | None, name: str):
    """A context manager timing the stage `name` of the request (admission, render, store) for its
    trace: a span each time, but one for all of the ONE_SPAN_STAGES (from the first start to the last
    end). Nothing is timed without traces."""
    if record is None or record.tracing is None:
        return _UNTRACED
    return _timed(record.stages, name)


@contextlib.contextmanager
def _timed(stages: list[list], name: str):
    started = time.perf_counter()
    try:
        yield
    finally:
        earlier = next((entry for entry in stages if entry[0] == name), None) if name in ONE_SPAN_STAGES else None
        if earlier is None:
            stages.append([name, started, time.perf_counter()])
        else:
            earlier[2] = time.perf_counter()


@dataclass
class McpStep:
    """One MCP listing or call a request made (services/mcp_loop.observed), for its trace (a span with
    its server, tool and error) and the dashboard (the request's steps, running ones included)."""

    server: str
    tool: str  # the tool called, or "tools/list" for a listing
    method: str  # MCP's method: tools/list or tools/call
    started: float = field(default_factory=time.perf_counter)
    ended: float | None = None
    error_type: str | None = None  # the item's error type (mcp_protocol_error, mcp_tool_execution_error)
    error: str | None = None

    def shown(self, now: float) -> dict:
        """As the dashboard shows it (the error cut short)."""
        return {
            "server": self.server,
            "tool": self.tool,
            "seconds": round((self.ended or now) - self.started, 3),
            "running": self.ended is None,
            "error": self.error[:STEP_ERROR_CHARS] if self.error else None,
        }


STEP_ERROR_CHARS = 300
SHOWN_STEPS = 20  # the last ones a request shows on the dashboard


class LiveRequests:
    """The requests of this process not yet closed, by request id: what a live view (the dashboard)
    reads. A record adds itself when it opens and leaves when it closes; reading takes a snapshot.
    No lock: each of these is one operation on a dict, which the interpreter does whole (a snapshot's
    list() too), whichever worker class's threads call them; a lock here cost every request a gevent
    lock's Python on its way to its first token (issue 54)."""

    def __init__(self):
        self._records: dict[str, RequestRecord] = {}

    def add(self, record: RequestRecord) -> None:
        self._records[record.request_id] = record

    def discard(self, record: RequestRecord) -> None:
        self._records.pop(record.request_id, None)

    def get(self, request_id: str) -> RequestRecord | None:
        return self._records.get(request_id)

    def records(self) -> list[RequestRecord]:
        """Every open request's record, oldest first (read, never changed, by the dashboard)."""
        return list(self._records.values())

    def snapshot(self) -> list[dict]:
        """RequestRecord.live() of every open request, oldest first."""
        return [record.live() for record in self.records()]


# A request's phases, in order (RequestRecord.phase): waiting for the upstream to take it (parsing,
# rendering, the upstream's queue), waiting for a model the proxy loads, llama.cpp reading the prompt
# (RequestRecord.prefill says how far), tokens coming.
QUEUED, LOADING_MODEL, PREFILL, GENERATING = "queued", "loading model", "prefill", "generating"


@dataclass(slots=True)  # a request's first token waits on its making: slots make it and its reads cheaper
class RequestRecord:
    endpoint: str
    metrics: Metrics
    log_format: str = "text"
    started: float = field(default_factory=time.perf_counter)
    request_id: str = field(default_factory=lambda: os.urandom(8).hex())
    model: str = "-"
    upstream: str = "-"
    route: str = "-"  # why the upstream was chosen (routing.Route.reason)
    status: int = 200
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # of prompt_tokens, those llama.cpp took from its cache
    audio_seconds: float = 0.0  # of the audio it sends (files' headers): a managed key's usage counts them
    first_token: float | None = None
    error_code: str | None = None
    error_reason: str | None = None  # the error's message, for the dashboard's recent errors
    key_name: str | None = None  # the caller's key (access.keys.Caller.name), for the dashboard
    priority: str | None = None  # asked by the request (service_tier, its priority header); its key's caps it
    closed: bool = False
    on_close: list = field(default_factory=list)  # called with the record once it is closed (access/: usage)
    # The live view (LiveRequests): where the request is now; how far its prompt was read (a
    # backends.events.PromptProgress); its UsageCounter while it generates (counts read, not copied,
    # so the token path pays nothing); the switch that stops it (inflight.InFlight.track's).
    live_requests: LiveRequests | None = None
    phase: str = QUEUED
    prefill: object | None = None
    usage: object | None = None
    stop_switch: object | None = None  # services/inflight.StopSwitch, while it generates
    # Traces (tracing.Tracing, None when off): when each stage ran (perf_counter), exported at close.
    tracing: object | None = None
    traceparent: str | None = None  # the client's W3C trace context, continued
    requested_model: str | None = None  # the name the client asked for (model is the one served)
    stages: list[list] = field(default_factory=list)  # [name, start, end] in the order they ended
    upstream_at: float | None = None  # the request went to its upstream
    prefill_at: float | None = None  # the upstream started reading the prompt (its first progress)
    prompt_read_at: float | None = None  # the answer's first event arrived
    generated_at: float | None = None  # the generation ended (counted)
    mcp_steps: list[McpStep] = field(default_factory=list)  # the MCP listings and calls it made, in order

    def __post_init__(self):
        if self.live_requests is not None:  # a request of the app's (not one a test or a tool makes)
            self.live_requests.add(self)
            self.metrics.requests_in_flight.inc()

    def token_arrived(self) -> None:
        if self.first_token is None:
            self.first_token = time.perf_counter()
            self.phase = GENERATING

    def prompt_progress(self, progress) -> None:
        """llama.cpp read more of the prompt (a PromptProgress)."""
        if self.prefill_at is None:
            self.prefill_at = time.perf_counter()
        self.phase, self.prefill = PREFILL, progress

    def sent_upstream(self, url: str) -> None:
        self.upstream = url
        if self.upstream_at is None:
            self.upstream_at = time.perf_counter()

    def prompt_read(self) -> None:
        """The prompt is read (the answer's first event came): its prefill time goes to the metrics."""
        self.prompt_read_at = time.perf_counter()
        if self.prefill is not None and self.phase == PREFILL:
            self.phase = GENERATING
            self.metrics.child(self.metrics.prefill_seconds, self.model).observe(self.prefill.elapsed_ms / 1000)

    def live(self) -> dict:
        """Where the request is now, as the dashboard shows it (no prompt, no key)."""
        now = time.perf_counter()
        generated = self.usage.completion_tokens if self.usage is not None else 0
        generating_for = now - self.first_token if self.first_token is not None else 0.0
        return {
            "request_id": self.request_id,
            "endpoint": self.endpoint,
            "model": self.model,
            "upstream": self.upstream,
            "phase": self.phase,
            "elapsed_seconds": round(now - self.started, 3),
            "prefill_percent": round(self.prefill.fraction * 100, 1) if self.prefill is not None else None,
            "prompt_tokens": self.prefill.total if self.prefill is not None else None,
            "generated_tokens": generated,
            "tokens_per_second": round(generated / generating_for, 2) if generating_for > 0 else None,
            "stoppable": self.stop_switch is not None,
            **self.shown_steps(now),
        }

    def mcp_step(self, server: str, tool: str, method: str) -> McpStep:
        """An MCP listing or call starting now (the caller ends it)."""
        step = McpStep(server, tool, method)
        self.mcp_steps.append(step)
        return step

    def shown_steps(self, now: float | None = None) -> dict:
        """{"mcp": its last MCP steps as the dashboard shows them}, or nothing for a request without any."""
        if not self.mcp_steps:
            return {}
        now = time.perf_counter() if now is None else now
        return {"mcp": [step.shown(now) for step in self.mcp_steps[-SHOWN_STEPS:]]}

    def stop(self, finish_reason: str = "stop") -> bool:
        """End this request's generation now (as stop-generation does), with `finish_reason`; whether it
        was generating."""
        if self.stop_switch is None:
            return False
        self.stop_switch.set(finish_reason)
        return True

    def count(self, prompt_tokens: int | None, completion_tokens: int | None, cached_tokens: int | None = 0) -> None:
        """The generation's token counts, once it ended."""
        self.generated_at = time.perf_counter()
        self.prompt_tokens += prompt_tokens or 0
        self.completion_tokens += completion_tokens or 0
        self.cached_tokens += cached_tokens or 0

    def routed(self, reason: str, hit: bool) -> None:
        """One upstream choice (a request with n choices makes n): counted now, the last one logged."""
        self.route = reason
        self.metrics.child(self.metrics.routing, self.model, "hit" if hit else "miss", reason).inc()

    def fail(self, status: int, code: str | None, reason: str | None = None) -> None:
        self.status, self.error_code = status, code
        if reason is not None:
            self.error_reason = reason

    def close(self) -> None:
        """Log the access line and update the metrics; only the first call counts."""
        if self.closed:
            return
        self.closed = True
        if self.live_requests is not None:
            self.live_requests.discard(self)
            self.metrics.requests_in_flight.dec()
        total = time.perf_counter() - self.started
        ttft = self.first_token - self.started if self.first_token else None
        metrics = self.metrics
        metrics.child(metrics.requests, self.endpoint, self.model, str(self.status)).inc()
        metrics.child(metrics.duration, self.endpoint, self.model).observe(total)
        if ttft is not None:
            metrics.child(metrics.time_to_first_token, self.model).observe(ttft)
        metrics.child(metrics.tokens, self.model, "prompt").inc(self.prompt_tokens)
        metrics.child(metrics.tokens, self.model, "completion").inc(self.completion_tokens)
        metrics.child(metrics.cached_prompt_tokens, self.model).inc(self.cached_tokens)
        if self.error_code and self.status >= 502:
            metrics.child(metrics.upstream_errors, self.upstream, self.error_code).inc()
        if access_log.isEnabledFor(logging.INFO):  # the line is not made for a log that drops it
            access_log.info(self._line(total, ttft))
        for finish in self.on_close:
            finish(self)
        if self.tracing is not None:
            self.tracing.export(self, time.perf_counter())

    def _line(self, total: float, ttft: float | None) -> str:
        fields = {
            "request_id": self.request_id,
            "endpoint": self.endpoint,
            "model": self.model,
            "upstream": self.upstream,
            "route": self.route,
            "status": self.status,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "completion_tokens": self.completion_tokens,
            "ttft_ms": round(ttft * 1000, 1) if ttft is not None else None,
            "total_ms": round(total * 1000, 1),
        }
        if self.log_format == "json":
            return json.dumps(fields)
        return " ".join(f"{key}={value}" for key, value in fields.items())


def lifecycle_metrics(status: dict) -> bytes:
    """The supervisor's numbers (models the proxy starts) in Prometheus' text format, from its status."""
    from prometheus_client.exposition import generate_latest

    return generate_latest(
        MadeFamilies([*_model_families(status["models"]), *_draft_families(status["models"]), *_budget_families(status)])
    )


def _model_families(models: dict) -> list:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    families = [
        GaugeMetricFamily("api_like_oai_model_loaded", "1 if the started model is loaded", labels=["model"]),
        GaugeMetricFamily("api_like_oai_model_memory_mib", "A started model's memory estimate", labels=["model"]),
        CounterMetricFamily("api_like_oai_model_loads", "Loads of a started model", labels=["model"]),
        CounterMetricFamily("api_like_oai_model_load_seconds", "Seconds spent loading", labels=["model"]),
        CounterMetricFamily("api_like_oai_model_evictions", "Unloads to make room for another model", labels=["model"]),
        CounterMetricFamily("api_like_oai_model_failures", "Failed starts and crashes", labels=["model"]),
        CounterMetricFamily(
            "api_like_oai_model_restored_tokens",
            "KV cache tokens restored after loads (slot_save), as llama-server confirmed them",
            labels=["model"],
        ),
        CounterMetricFamily(
            "api_like_oai_model_restore_failures",
            "Slot restores refused or not taking (each a warning in the log)",
            labels=["model"],
        ),
    ]
    for name, model in models.items():
        values = (
            model["value"] == "loaded",
            model["memory_mib"],
            model["loads"],
            model["load_seconds"],
            model["evictions"],
            model["failures"],
            model["restored_tokens"],
            model["restore_failures"],
        )
        for family, value in zip(families, values, strict=True):
            family.add_metric([name], float("nan") if value is None else float(value))  # an estimate not read yet
    return families


def _draft_families(models: dict) -> list:
    """The draft models' tokens proposed and accepted, and the rate (models with `draft:` only)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    drafted = CounterMetricFamily("api_like_oai_model_draft_tokens", "Tokens the draft model proposed", labels=["model"])
    accepted = CounterMetricFamily(
        "api_like_oai_model_draft_accepted_tokens", "Draft tokens the model accepted", labels=["model"]
    )
    rate = GaugeMetricFamily(
        "api_like_oai_model_draft_acceptance_rate", "Accepted of proposed draft tokens, since the proxy started", labels=["model"]
    )
    for name, model in models.items():
        draft = model.get("draft")
        if draft is not None:
            drafted.add_metric([name], float(draft["drafted_tokens"]))
            accepted.add_metric([name], float(draft["accepted_tokens"]))
            if draft["acceptance_rate"] is not None:
                rate.add_metric([name], float(draft["acceptance_rate"]))
    return [drafted, accepted, rate]


# The Gateway API Inference Extension's model-server protocol, one series per model: the endpoint
# picker's engineConfigs entry names these (deploy/helm/api-like-oai: the EPP's config), with the
# label model="..." picking its pool's model, as vLLM's num_requests_waiting, num_requests_running,
# kv_cache_usage_perc (0..1) and cache_config_info are read.
POOL_WAITING = "api_like_oai_pool_requests_waiting"
POOL_RUNNING = "api_like_oai_pool_requests_running"
POOL_KV_USAGE = "api_like_oai_pool_kv_cache_usage_perc"
POOL_CACHE_INFO = "api_like_oai_pool_cache_config_info"


def pool_metrics(occupancy: dict) -> bytes:
    """The model-server protocol's gauges in Prometheus' text format, from the supervisor's occupancy
    (supervisor/occupancy.py: {"models": {name: {...}}})."""
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.exposition import generate_latest

    waiting = GaugeMetricFamily(POOL_WAITING, "Requests the box holds for the model that no slot runs yet", labels=["model"])
    running = GaugeMetricFamily(POOL_RUNNING, "The model's slots processing a request", labels=["model"])
    usage = GaugeMetricFamily(POOL_KV_USAGE, "The model's KV cache in use, 0..1 (tokens held over its size)", labels=["model"])
    info = GaugeMetricFamily(
        POOL_CACHE_INFO,
        "The model's KV cache: block_size tokens per block, num_gpu_blocks blocks",
        labels=["model", "block_size", "num_gpu_blocks"],
    )
    for name, model in occupancy["models"].items():
        waiting.add_metric([name], float(model["waiting"]))
        running.add_metric([name], float(model["running"]))
        usage.add_metric([name], float(model["kv_utilisation"]))
        info.add_metric([name, str(model["block_tokens"]), str(model["blocks"])], 1.0)
    return generate_latest(MadeFamilies([waiting, running, usage, info]))


def _budget_families(status: dict) -> list:
    from prometheus_client.core import GaugeMetricFamily

    budget = GaugeMetricFamily("api_like_oai_memory_budget_mib", "The started models' memory budget")
    budget.add_metric([], status["memory_budget_mib"])
    device_budget = GaugeMetricFamily(
        "api_like_oai_device_budget_mib",
        "The started models' budget on a device (gpu0, gpu1, ..., cpu; memory: one pool)",
        labels=["device"],
    )
    device_used = GaugeMetricFamily(
        "api_like_oai_device_used_mib", "What the loaded models take of a device's budget, by their estimates", labels=["device"]
    )
    for device, use in status.get("devices", {}).items():
        device_budget.add_metric([device], use["budget_mib"])
        device_used.add_metric([device], use["used_mib"])
    return [budget, device_budget, device_used]


class MadeFamilies:
    """A collector of metric families already made (what prometheus_client's generate_latest takes)."""

    def __init__(self, families: list):
        self.families = families

    def collect(self) -> list:
        return self.families
