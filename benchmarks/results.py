"""The benchmark's results as data, and the targets they are judged against."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


def percentile(values: list[float], fraction: float) -> float:
    """Linear-interpolated percentile (fraction 0.5 is the median); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass
class Machine:
    cpu_model: str
    cores: int
    memory_gib: float
    kernel: str
    python: str
    llama_cpp: str
    proxy_server: str
    load_average: str


@dataclass
class OutputCheck:
    """Whether llama-server and the proxy generated the same completion for the same request."""

    endpoint: str
    direct_tokens: int | None = None  # None: no answer in time
    proxy_tokens: int | None = None
    same_text: bool = False

    def describe(self) -> str:
        if self.direct_tokens is None or self.proxy_tokens is None:
            return f"{self.endpoint}: not checked, no answer in time"
        return (f"{self.endpoint}: direct {self.direct_tokens} tokens, proxy {self.proxy_tokens} tokens, "
                f"{'identical' if self.same_text else 'DIFFERENT'} text")


@dataclass
class GenerationResult:
    """Part 1: one target (direct llama-server or the proxy) under one real-generation workload."""

    endpoint: str  # "completions" or "chat"
    streamed: bool
    clients: int
    target: str  # "direct" or "proxy"
    requests: int
    ttft_p50_ms: float  # first generated text; the whole answer when not streamed
    ttft_p95_ms: float
    total_p50_ms: float
    total_p95_ms: float
    tokens_per_s: float  # per request: completion tokens / total time, median
    other_cpu_share: float  # cores busy with processes outside the benchmark meanwhile
    proxy_cpu_ms_per_request: float | None = None
    cut_short: bool = False  # the time budget ended the rounds early

    @property
    def workload(self) -> tuple[str, bool, int]:
        return self.endpoint, self.streamed, self.clients


@dataclass
class CapacityResult:
    """Parts 2 and 3: the proxy in front of an upstream that answers instantly."""

    endpoint: str
    streamed: bool
    clients: int
    tokens: int  # generated tokens per request
    requests: int
    seconds: float
    requests_per_s: float
    events_per_s: float  # SSE events relayed to clients (without [DONE])
    latency_p50_ms: float
    proxy_cpu_us_per_request: float
    proxy_cpu_us_per_event: float | None
    proxy_cpu_share: float  # CPU seconds per wall second: 1.0 is one core busy
    upstream_cpu_share: float
    client_cpu_share: float
    other_cpu_share: float  # processes outside the benchmark
    errors: int
    cpu_spread: float = math.nan  # (max − min) / mean of the windows' proxy CPU per request: the noise


@dataclass
class StartupResult:
    seconds: list[float]  # process start to the first answered /v1/completions, per run
    idle_rss_mb: float  # gunicorn master + worker, summed
    idle_pss_mb: float
    idle_rss_per_process_mb: list[float]  # the master first, then the worker(s)

    @property
    def median_seconds(self) -> float:
        return percentile(self.seconds, 0.5)


@dataclass
class TargetCheck:
    name: str
    goal: str
    measured: str
    met: bool


@dataclass
class BenchmarkResults:
    machine: Machine
    output_checks: list[OutputCheck] = field(default_factory=list)
    generation: list[GenerationResult] = field(default_factory=list)
    capacity: list[CapacityResult] = field(default_factory=list)
    chat_vs_completions: list[CapacityResult] = field(default_factory=list)
    paced: list[CapacityResult] = field(default_factory=list)  # upstream events paced like a real model
    marginal_cpu_us_per_event: float = math.nan
    peak_rss_mb: float = math.nan
    startup: StartupResult | None = None
    duration_s: float = 0.0

    def generation_pairs(self) -> list[tuple[GenerationResult, GenerationResult]]:
        """(direct, proxy) for each workload, in measurement order."""
        direct = {r.workload: r for r in self.generation if r.target == "direct"}
        return [(direct[r.workload], r) for r in self.generation if r.target == "proxy"]

    def targets(self) -> list[TargetCheck]:
        return [self._ttft_target(), self._tokens_per_s_target(), self._cpu_per_event_target(),
                self._requests_per_s_target(), self._idle_memory_target(), self._startup_target()]

    def _ttft_target(self) -> TargetCheck:
        added = {f"{d.endpoint}": p.ttft_p50_ms - d.ttft_p50_ms
                 for d, p in self.generation_pairs() if d.streamed and d.clients == 1}
        worst = max(added.values(), default=math.nan)
        measured = ", ".join(f"{name} {value:+.2f} ms" for name, value in added.items())
        return TargetCheck("TTFT added by the proxy, p50 (streamed, 1 client)", "≤ 2 ms", measured, worst <= 2.0)

    def _tokens_per_s_target(self) -> TargetCheck:
        ratios = {f"{d.endpoint}/{d.clients}c": p.tokens_per_s / d.tokens_per_s
                  for d, p in self.generation_pairs() if d.streamed}
        worst = min(ratios.values(), default=math.nan)
        measured = ", ".join(f"{name} {ratio:.1%}" for name, ratio in ratios.items())
        return TargetCheck("streamed tokens/s through the proxy vs direct", "≥ 99%", measured, worst >= 0.99)

    def _cpu_per_event_target(self) -> TargetCheck:
        instant = {f"instant {r.clients}c": r.proxy_cpu_us_per_event for r in self.capacity
                   if r.streamed and r.endpoint == "completions"}
        paced = {f"paced {r.clients}c": r.proxy_cpu_us_per_event for r in self.paced if r.streamed}
        per_event = {**instant, **paced}
        worst = max(per_event.values(), default=math.nan)
        measured = ", ".join(f"{name} {value:.0f} µs" for name, value in per_event.items())
        return TargetCheck("proxy CPU per relayed streamed event (all-in)", "< 50 µs", measured, worst < 50)

    def _requests_per_s_target(self) -> TargetCheck:
        rates = {r.clients: r.requests_per_s for r in self.capacity if not r.streamed and r.endpoint == "completions"}
        best = max(rates.values(), default=math.nan)
        measured = ", ".join(f"{value:.0f} at {clients}c" for clients, value in rates.items())
        return TargetCheck("non-streamed req/s, instant upstream (best)", "≥ 1000", measured, best >= 1000)

    def _idle_memory_target(self) -> TargetCheck:
        rss = self.startup.idle_rss_mb if self.startup else math.nan
        pss = self.startup.idle_pss_mb if self.startup else math.nan
        return TargetCheck("idle memory, RSS of master + worker", "< 80 MB",
                           f"{rss:.1f} MB (PSS {pss:.1f} MB)", rss < 80)

    def _startup_target(self) -> TargetCheck:
        seconds = self.startup.median_seconds if self.startup else math.nan
        return TargetCheck("start-up to the first served request, median", "< 1 s", f"{seconds:.2f} s", seconds < 1.0)
