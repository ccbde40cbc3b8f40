"""The benchmark's results as data, and the targets they are judged against."""

from __future__ import annotations

import dataclasses
import math
import statistics
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field

BEFORE = "before"  # a ratio row's target: the proxy at another revision (`scripts/bench --quick --against REV`)

DASHBOARD_TARGET = 0.05  # at most 5% more CPU per token with the dashboard's stream open (benchmarks/dashboard.py)


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
        return (
            f"{self.endpoint}: direct {self.direct_tokens} tokens, proxy {self.proxy_tokens} tokens, "
            f"{'identical' if self.same_text else 'DIFFERENT'} text"
        )


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
    llama_threads: int = 2  # llama-server's --threads

    @property
    def workload(self) -> tuple[str, bool, int, int]:
        return self.endpoint, self.streamed, self.clients, self.llama_threads


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
class PacedResult:
    """Part 2b: chat streams against an upstream that paces its tokens like a real model."""

    worker_class: str
    clients: int
    interval_ms: float
    seconds: float
    tokens_per_s: float  # text frames relayed inside the window
    carried_share: float  # tokens_per_s / what the streams would carry with no wait in the proxy
    proxy_cpu_us_per_token: float  # all-in: the proxy's CPU in the window / tokens relayed in it
    proxy_cpu_share: float
    other_cpu_share: float
    errors: int
    connections: str = "keep-alive"  # or "new per stream": each stream on a connection of its own


@dataclass
class AgentTurnResult:
    """A recorded agent turn replayed to the app in-process (benchmarks/agent_turns.py)."""

    name: str
    bytes: int  # the recorded body
    tools: int  # tools replayed
    removed: list[str]  # parts the proxy still refuses, taken out
    rounds: int
    cold_cpu_ms: float  # median, a tool list and system prompt not seen before
    warm_cpu_ms: float  # median, the same turn again
    cold_hold_max_ms: float  # the longest CPU stretch without a switch to the event loop
    warm_hold_max_ms: float


@dataclass
class StalledStreamsResult:
    """16 paced streams alone, then beside recorded Claude Code turns replayed back to back."""

    clients: int
    interval_ms: float
    turn: str
    gaps_alone: int  # inter-token gaps measured
    gaps_with_turns: int
    p99_alone_ms: float
    p99_with_turns_ms: float
    max_alone_ms: float
    max_with_turns_ms: float
    turns: int  # turns answered meanwhile
    turn_errors: int
    proxy_cpu_ms_per_turn: float  # the proxy's CPU with the turns minus without, per turn (/proc)

    @property
    def growth_ms(self) -> float:
        return self.p99_with_turns_ms - self.p99_alone_ms


@dataclass
class ToolCallResult:
    """Part 2d: the same streamed chat answered with plain text and with a tool call parsed out of it."""

    clients: int
    tokens: int
    plain_cpu_us_per_token: float
    tool_call_cpu_us_per_token: float
    calls_parsed: bool  # the tool-call stream came back as tool_calls deltas, not as text
    errors: int

    @property
    def extra_share(self) -> float:
        return self.tool_call_cpu_us_per_token / self.plain_cpu_us_per_token - 1


@dataclass
class StoreResult:
    """Part 2e: the same non-streamed Responses request, stored on SQLite (store: true) and not."""

    clients: int
    stateless_p50_ms: float
    stored_p50_ms: float
    stateless_cpu_us_per_request: float
    stored_cpu_us_per_request: float
    retrievable: bool  # a stored answer came back the same from GET /v1/responses/{id}
    errors: int

    @property
    def added_p50_ms(self) -> float:
        return self.stored_p50_ms - self.stateless_p50_ms


@dataclass
class SocketResult:
    """Part 2f: a 10-turn agent session over one Responses WebSocket against the same turns over HTTP."""

    turns: int
    http_first_event_p50_ms: float
    socket_first_event_p50_ms: float
    http_cpu_us_per_turn: float
    socket_cpu_us_per_turn: float
    errors: int
    sessions: int = 0  # of each transport (0: the row as it was before 2026-12-06's evening, windows of ten)
    # the sessions' 25th and 75th percentiles of the figures above (each session's median first event,
    # each session's CPU per turn): the row's spread
    http_first_event_quartiles_ms: list[float] = field(default_factory=list)
    socket_first_event_quartiles_ms: list[float] = field(default_factory=list)
    http_cpu_quartiles_us: list[float] = field(default_factory=list)
    socket_cpu_quartiles_us: list[float] = field(default_factory=list)
    # socket ÷ HTTP within each pair (the two sessions of a pair ran back to back, under the same load):
    # the median and quartiles of the pairs' ratios, steadier than the ratio of the medians on a busy machine
    first_event_pair_ratios: list[float] = field(default_factory=list)
    cpu_pair_ratios: list[float] = field(default_factory=list)


@dataclass
class BatchLaneResult:
    """benchmarks/batch_lane.py (issue 51): chats' time to first token while a batch saturates the slots
    (in the lane, preempting; and the same lines as plain requests) against the idle box, and the lane's
    throughput against the lines sent straight to llama-server."""

    slots: int
    idle_ttft_ms: list[float]
    lane_ttft_ms: list[float]  # a batch in the lane on every slot it may: a chat preempts a line or finds a kept slot
    plain_ttft_ms: list[float]  # the same lines as ordinary requests on every slot: nothing preempted
    preemptions: int  # lines preempted while the lane's chats ran (/metrics)
    lines: int  # the throughput batch's
    lane_seconds: float
    lane_tokens: int
    direct_seconds: float
    direct_tokens: int
    errors: int
    load_average: str = ""
    # the lane's chats again through a proxy with --batch-free-slots more_free (one line beside people)
    more_free_ttft_ms: list[float] = field(default_factory=list)
    more_free: int = 0
    more_free_preemptions: int = 0

    def ttft_p50(self, condition: str) -> float:
        return percentile([ms for ms in getattr(self, f"{condition}_ttft_ms") if not math.isnan(ms)], 0.5)

    def ttft_ratio(self, condition: str) -> float:
        """The condition's p50 time to first token ÷ the idle box's."""
        idle = self.ttft_p50("idle")
        return self.ttft_p50(condition) / idle if idle else math.nan

    @property
    def throughput_ratio(self) -> float:
        """The lane's completion tokens per second ÷ the lines' sent straight to llama-server."""
        if not self.lane_seconds or not self.direct_seconds or not self.direct_tokens:
            return math.nan
        return (self.lane_tokens / self.lane_seconds) / (self.direct_tokens / self.direct_seconds)


@dataclass
class ManyStreamsResult:
    """Part 2c: many concurrent paced streams, each started once and read to its end."""

    streams: int
    tokens: int
    interval_ms: float
    whole: int  # streams that came back complete: every frame and [DONE]
    seconds: float  # from the first start to the last end
    ideal_seconds: float  # one stream's length at the upstream's pace, plus the stagger
    proxy_cpu_us_per_token: float
    upstream_cpu_seconds: float
    peak_rss_mb: float


@dataclass
class GatewayResult:
    """Part 2d: latency at a fixed request rate, direct to the instant upstream and through the proxy."""

    rate: int
    requests: int  # through the proxy
    direct_p50_ms: float
    direct_p99_ms: float
    proxy_p50_ms: float
    proxy_p99_ms: float
    errors: int

    @property
    def added_p50_ms(self) -> float:
        return self.proxy_p50_ms - self.direct_p50_ms

    @property
    def added_p99_ms(self) -> float:
        return self.proxy_p99_ms - self.direct_p99_ms


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
class ModelsDirStartupResult:
    """Issue 42: start-up with a --models-dir of `files` real GGUF files, the header cache cold."""

    files: int
    seconds: list[float]  # process start to the first answered /v1/models, per run
    header_ms: list[float]  # each file's header read alone (gguf_header.read_header, no cache)
    one_file_seconds: list[float] = field(default_factory=list)  # the same with one file, alternated

    @property
    def median_seconds(self) -> float:
        return percentile(self.seconds, 0.5)

    @property
    def one_file_median_seconds(self) -> float:
        return percentile(self.one_file_seconds, 0.5) if self.one_file_seconds else math.nan


@dataclass
class RoutingTurn:
    """One turn of one session in the routing row (issue 20): what the prompt cost the upstream."""

    routing: str  # "least-busy" or "prefix"
    session: int
    turn: int  # from 1
    prompt_tokens: int
    cached_tokens: int  # of prompt_tokens, taken from llama.cpp's cache (the proxy's usage)
    ttft_ms: float

    @property
    def prefilled_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens

    @property
    def cached_share(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else math.nan


@dataclass
class RoutingResult:
    """Multi-turn sessions over two real llama-servers, least-busy routing against prefix routing."""

    sessions: int
    turns: int
    prefix_tokens: int  # each session's own prefix, tokens (the system prompt)
    reply_tokens: int
    pause_seconds: tuple[float, float]
    upstream_flags: str
    samples: list[RoutingTurn] = field(default_factory=list)
    seconds: float = 0.0
    load_average: str = ""  # at the start of the row: it may run apart from the rest (--only routing)

    def later_turns(self, routing: str) -> list[RoutingTurn]:
        """Turns 2 and on: where a session's earlier prompt could be in a cache."""
        return [s for s in self.samples if s.routing == routing and s.turn > 1]

    def read_again(self, routing: str) -> int:
        """Later turns whose prompt was mostly computed again: the session had moved to the other server."""
        return sum(s.cached_share < 0.5 for s in self.later_turns(routing))


@dataclass
class SwapRequest:
    """One streamed request of the swaps workload (issue 24): two models, a budget for one."""

    setup: str  # "router" (llama-server --models-max 1) or "proxy" (models on demand)
    client: int
    model: str
    sent_s: float  # from the start of the workload
    ttft_ms: float  # to the first generated text (keep-alive comments are not text)
    total_ms: float
    ok: bool  # 200, and the stream ended whole ([DONE] after a finish_reason)
    waited_for_swap: bool  # its model was not loaded at some moment between sending and the first token
    error: str = ""

    @property
    def ended_s(self) -> float:
        return self.sent_s + self.total_ms / 1000


@dataclass
class SwapSetup:
    """One side of the swaps row: how it was started, and what it did over the workload."""

    setup: str  # "router", "proxy"; "router open", "proxy open" for the open-loop workload
    command: str
    loads: int  # processes started for a model during the workload
    load_average: str = ""
    stage_s: dict = field(default_factory=dict)  # the proxy's swap stages over the window, seconds (its status)


@dataclass
class LoadTiming:
    """One model's load, alternated: llama-server started directly (to /health 200, polled every 20 ms
    as the proxy polls it) and the proxy's POST /models/load with nothing else loaded."""

    model: str
    direct_ms: list[float] = field(default_factory=list)
    proxy_ms: list[float] = field(default_factory=list)
    proxy_child_ms: list[float] = field(default_factory=list)  # the supervisor's own start-to-health, same loads

    @property
    def added_ms(self) -> float:
        """The proxy's load above llama-server's own start, medians of the alternated runs."""
        return percentile(self.proxy_ms, 0.5) - percentile(self.direct_ms, 0.5)

    @property
    def added_in_run_ms(self) -> float:
        """The proxy's load above the start of the very child it waited for, median."""
        return percentile([p - c for p, c in zip(self.proxy_ms, self.proxy_child_ms, strict=True)], 0.5)


@dataclass
class AgentSwapTurn:
    """A recorded agent turn on model A: cold, warm, and after A was swapped out for B and back."""

    slot_save: bool
    prompt_tokens: int
    cold_ms: float
    warm_ms: float
    swap_out_ms: float  # POST /models/load B (A saved, if slot_save, and stopped; B started)
    swap_back_ms: float  # POST /models/load A (started, and its slots restored if slot_save)
    after_swap_ms: float
    after_swap_cached_tokens: int

    @property
    def after_swap_ratio(self) -> float:
        return self.after_swap_ms / self.warm_ms if self.warm_ms else math.nan


@dataclass
class SwapsResult:
    """Issue 24, section 5: models on demand against llama-server's router mode, side by side."""

    models: list[str]
    clients: int
    seconds: float
    max_tokens: int
    llama_args: str
    setups: list[SwapSetup] = field(default_factory=list)
    requests: list[SwapRequest] = field(default_factory=list)
    loads: list[LoadTiming] = field(default_factory=list)
    agent_turn: str = ""  # which recorded turn, and what was cut from it to fit the context
    agent: list[AgentSwapTurn] = field(default_factory=list)
    measured_at: str = ""
    open_rate: float = 0.0  # the open-loop workload's requests per second (issue 42); 0: not measured

    def of(self, setup: str) -> list[SwapRequest]:
        return [r for r in self.requests if r.setup == setup]

    def answered(self, setup: str) -> int:
        """Whole answers that ended within their workload window (`sent_s` counts from its start)."""
        return sum(r.ok and r.ended_s <= self.seconds for r in self.of(setup))

    def failed(self, setup: str) -> int:
        return sum(not r.ok for r in self.of(setup))

    def swaps(self, setup: str) -> int:
        """Swaps the side made, over all its windows."""
        return sum(s.loads for s in self.setups if s.setup == setup)

    def windows(self, setup: str) -> int:
        return sum(s.setup == setup for s in self.setups)


@dataclass
class FrontCell:
    """One target of a ratio row (issue 29): the floor, the proxy, LiteLLM's proxy, or llama-server direct."""

    target: str  # "floor", "proxy", "litellm" or "direct"
    requests: int
    seconds: float
    cpu_us_per_request: float  # the target's process tree; NaN for llama-server itself
    cpu_us_per_token: float  # per relayed token (paced rows), else NaN
    errors: int
    ttft_p50_ms: float = math.nan  # real generation
    tokens_per_s: float = math.nan  # real generation: per request, median; paced: relayed per second
    # CPU rows: the cost in each of its windows; a request-cost row's floor and proxy: in each of its blocks
    window_costs: list[float] = field(default_factory=list)


@dataclass
class RatioRow:
    """One workload with its targets measured in alternating windows (ABBA), in one sitting."""

    name: str
    kind: str  # "request": CPU per request; "token": CPU per paced token; "generation": a real llama-server
    clients: int
    cells: list[FrontCell]
    load_average: str  # when the row ended
    block_seconds: float = 0.0  # request-cost rows: how long each block of window_costs lasted

    def cell(self, target: str) -> FrontCell | None:
        return next((c for c in self.cells if c.target == target), None)

    def cost(self, target: str) -> float:
        """CPU per request, or per token in a paced row."""
        cell = self.cell(target)
        if cell is None:
            return math.nan
        return cell.cpu_us_per_token if self.kind == "token" else cell.cpu_us_per_request

    def over_floor(self, target: str) -> float:
        return self.cost(target) / self.cost("floor")

    def ttft_added_ms(self, target: str) -> float:
        cell, direct = self.cell(target), self.cell("direct")
        return cell.ttft_p50_ms - direct.ttft_p50_ms if cell and direct else math.nan

    def tokens_ratio(self, target: str) -> float:
        cell, direct = self.cell(target), self.cell("direct")
        return cell.tokens_per_s / direct.tokens_per_s if cell and direct else math.nan

    def ahead_of_litellm(self) -> bool:
        """Cheaper in CPU, or (real generation) less TTFT added and tokens/s as high."""
        if self.errors(("proxy",)) > self.errors(("litellm",)):
            return False
        if self.kind == "generation":
            return self.ttft_added_ms("proxy") < self.ttft_added_ms("litellm") and self.tokens_ratio(
                "proxy"
            ) >= self.tokens_ratio("litellm")
        return self.cost("proxy") < self.cost("litellm")

    def noise(self, of: tuple[str, ...] = ("floor", "proxy", BEFORE)) -> float:
        """How far the proxy's cost could read from the earlier proxy's (`--against`) by the machine alone.
        A request-cost row: twice the standard error of proxy ÷ earlier proxy over its blocks (block_error;
        19 times in 20 within it). Another CPU row: how far one target's windows differ from each other, the
        widest among `of`: (max − min) ÷ median of its window costs."""
        if self.kind == "request" and self.cell(BEFORE):
            return 2 * self.floor_error("proxy", BEFORE)
        spreads = [
            (max(c.window_costs) - min(c.window_costs)) / statistics.median(c.window_costs)
            for c in self.cells
            if c.target in of and len(c.window_costs) > 1 and all(map(math.isfinite, c.window_costs))
        ]
        return max(spreads, default=math.nan)

    def floor_error(self, target: str = "proxy", floor: str = "floor") -> float:
        """A request-cost row's standard error of `target` ÷ `floor`, a share of it (see block_error); NaN
        for a row measured before the interleaved blocks (its separate windows are no blocks: results.json
        of an earlier whole run, shown beside a part measured alone)."""
        cell, under = self.cell(target), self.cell(floor)
        if not (cell and under and self.block_seconds):
            return math.nan
        return block_error(under.window_costs, cell.window_costs)

    def errors(self, of: tuple[str, ...] = ("direct", "floor", "proxy")) -> int:
        """Failed requests of the proxy and the neighbours it is divided by (LiteLLM's count against it alone)."""
        return sum(c.errors for c in self.cells if c.target in of)


REQUEST_ERROR_BOUND = 0.015  # a request-cost row's standard error (block_error): two runs then agree within 5%


def block_error(floor: list[float], front: list[float]) -> float:
    """The standard error of a front's cost ÷ the floor's, a share of it, from a request-cost row's blocks:
    block b is the same seconds for both (their phases interleaved, benchmarks/ratios.py), `floor[b]` and
    `front[b]` their costs in it. The standard deviation of the blocks' ratios ÷ √blocks ÷ their mean.
    Two runs each within e of the truth differ by more than 2.8 e one time in twenty: e ≤ 1.8% would be
    two runs within 5%, and the bound is 1.5%, since blocks next to each other are alike (the machine
    drifts), which this understates. NaN under three blocks."""
    ratios = [f / b for b, f in zip(floor, front, strict=False) if b > 0 and math.isfinite(f) and math.isfinite(b)]
    if len(ratios) < 3:
        return math.nan
    return statistics.stdev(ratios) / math.sqrt(len(ratios)) / statistics.mean(ratios)


@dataclass
class RatiosResult:
    """The ratio rows (benchmarks/ratios.py), with when and under what load they ran."""

    measured_at: str
    load_average: str  # at the start
    llama_threads: int
    litellm: str  # its version and how it ran
    rows: list[RatioRow] = field(default_factory=list)
    seconds: float = 0.0
    against: str = ""  # `--against REV`: the revision (and its commit) whose proxy ran beside this tree's

    def of_kind(self, kind: str) -> list[RatioRow]:
        return [r for r in self.rows if r.kind == kind]


ONE_LINE_CHAT = "one-line chat"  # the agent turns' neighbour: a one-line chat to the same app (agent_turns.py)
REQUEST_ERROR_TARGET = "request-cost rows: proxy ÷ floor, its standard error over the row's blocks (issue 54)"


@dataclass
class TargetCheck:
    name: str
    goal: str
    measured: str
    met: bool


@dataclass
class OllamaRow:
    """A row of benchmarks/ollama_rows.py (issue 38): /api/chat beside /v1/chat/completions."""

    name: str
    cpu_us: dict[str, float] = field(default_factory=dict)  # route -> proxy CPU per request (µs)
    ttft_ms: dict[str, float] = field(default_factory=dict)  # target -> TTFT p50 (ms), "direct" too
    requests: dict[str, int] = field(default_factory=dict)
    errors: int = 0
    load_average: str = ""

    @property
    def cpu_ratio(self) -> float:
        return self.cpu_us["ollama"] / self.cpu_us["openai"] if self.cpu_us.get("openai") else math.nan

    def ttft_added_ms(self, route: str) -> float:
        return self.ttft_ms[route] - self.ttft_ms["direct"]


@dataclass
class TtftRow:
    """One API's row of benchmarks/ttft_rows.py (issue 54): the time to the first text of each pair of
    requests, llama-server direct (on `direct_path`) and through the proxy, in the order they ran."""

    api: str
    direct_path: str
    direct_ms: list[float] = field(default_factory=list)  # pair i is (direct_ms[i], proxy_ms[i])
    proxy_ms: list[float] = field(default_factory=list)
    errors: int = 0  # pairs with a failed or textless answer on either side (left out)
    load_average: str = ""
    seconds: float = 0.0  # the whole part's, all APIs

    def add(self, direct: float | None, proxy: float | None) -> None:
        if direct is None or proxy is None:
            self.errors += 1
            return
        self.direct_ms.append(direct)
        self.proxy_ms.append(proxy)

    def attempts(self) -> int:
        return len(self.direct_ms) + self.errors

    def direct_p50_ms(self) -> float:
        return percentile(self.direct_ms, 0.5) if self.direct_ms else math.nan

    def proxy_p50_ms(self) -> float:
        return percentile(self.proxy_ms, 0.5) if self.proxy_ms else math.nan

    def added_ms(self) -> float:
        """What the proxy adds: the median of the pairs' differences."""
        return _median_difference(range(len(self.direct_ms)), self.direct_ms, self.proxy_ms)

    def halves_ms(self) -> tuple[float, float]:
        """The added time of each half of the pairs: pairs 0-1, 4-5, ... and 2-3, 6-7, ... (the order
        within a pair is swapped every other pair, so each half has both orders alike)."""
        indices = range(len(self.direct_ms))
        return tuple(
            _median_difference([i for i in indices if (i // 2) % 2 == half], self.direct_ms, self.proxy_ms) for half in (0, 1)
        )

    def agreement_ms(self) -> float:
        """How far apart the halves' added times are (NaN until both have pairs)."""
        first, second = self.halves_ms()
        return abs(first - second)


def _median_difference(indices, direct: list[float], proxy: list[float]) -> float:
    differences = [proxy[i] - direct[i] for i in indices]
    return statistics.median(differences) if differences else math.nan


@dataclass
class DashboardResult:
    clients: int
    interval_ms: float
    dashboards: int  # event streams open in the "open" windows
    closed_us_per_token: list[float] = field(default_factory=list)
    open_us_per_token: list[float] = field(default_factory=list)
    frames_received: int = 0  # by the dashboards, over their windows
    open_seconds: float = 0.0
    errors: int = 0
    load_average: str = ""
    idle_cpu_ms_per_s: dict[str, list[float]] = field(default_factory=dict)  # no traffic: "closed", "open"
    tokens_per_s: list[float] = field(default_factory=list)  # relayed, in the closed windows

    @property
    def added_share(self) -> float:
        """How much more CPU a token costs with the stream open: median open / median closed - 1."""
        return statistics.median(self.open_us_per_token) / statistics.median(self.closed_us_per_token) - 1

    @property
    def implied_share(self) -> float:
        """The open stream's own CPU a second (no traffic, open minus closed) over the proxy's CPU a
        second in the closed windows: what the A/B windows should find, without their noise."""
        stream_ms = statistics.median(self.idle_cpu_ms_per_s["open"]) - statistics.median(self.idle_cpu_ms_per_s["closed"])
        proxy_ms = statistics.median(self.tokens_per_s) * statistics.median(self.closed_us_per_token) / 1000
        return stream_ms / proxy_ms


@dataclass
class RerankRow:
    """The row of benchmarks/rerank_row.py (issue 40): /v1/rerank through the proxy beside llama-server's own."""

    name: str
    time_ms: dict[str, float] = field(default_factory=dict)  # target ("direct", "proxy") -> time per request p50
    proxy_cpu_us: float = math.nan  # the proxy's CPU per request
    requests: dict[str, int] = field(default_factory=dict)
    errors: int = 0
    load_average: str = ""

    @property
    def time_ratio(self) -> float:
        return self.time_ms["proxy"] / self.time_ms["direct"] if self.time_ms.get("direct") else math.nan

    @property
    def cpu_share(self) -> float:
        """The proxy's CPU per request ÷ the direct call's time."""
        return self.proxy_cpu_us / (self.time_ms["direct"] * 1000) if self.time_ms.get("direct") else math.nan


@dataclass
class BenchmarkResults:
    machine: Machine
    output_checks: list[OutputCheck] = field(default_factory=list)
    generation: list[GenerationResult] = field(default_factory=list)
    capacity: list[CapacityResult] = field(default_factory=list)
    chat_vs_completions: list[CapacityResult] = field(default_factory=list)
    paced: list[PacedResult] = field(default_factory=list)  # upstream tokens paced like a real model
    agent_turns: list[AgentTurnResult] = field(default_factory=list)
    stalled_streams: StalledStreamsResult | None = None
    tool_call: ToolCallResult | None = None
    store: StoreResult | None = None
    socket: SocketResult | None = None  # benchmarks/socket_turns.py (issue 50)
    batch: BatchLaneResult | None = None  # benchmarks/batch_lane.py (issue 51)
    many_streams: ManyStreamsResult | None = None
    gateway: list[GatewayResult] = field(default_factory=list)
    marginal_cpu_us_per_event: float = math.nan
    peak_rss_mb: float = math.nan
    startup: StartupResult | None = None
    models_dir_startup: ModelsDirStartupResult | None = None  # issue 42
    routing: RoutingResult | None = None
    swaps: SwapsResult | None = None
    ratios: RatiosResult | None = None  # issue 29: the proxy beside the floor, LiteLLM and llama-server
    dashboard: DashboardResult | None = None  # benchmarks/dashboard.py
    ollama: list[OllamaRow] = field(default_factory=list)  # benchmarks/ollama_rows.py (issue 38)
    rerank: list[RerankRow] = field(default_factory=list)  # benchmarks/rerank_row.py (issue 40)
    ttft: list[TtftRow] = field(default_factory=list)  # benchmarks/ttft_rows.py (issue 54)
    duration_s: float = 0.0
    # Parts measured again on their own after the whole run (`--only`): part -> when and under what load.
    measured_alone: dict[str, str] = field(default_factory=dict)

    def generation_pairs(self) -> list[tuple[GenerationResult, GenerationResult]]:
        """(direct, proxy) for each workload, in measurement order."""
        direct = {r.workload: r for r in self.generation if r.target == "direct"}
        return [(direct[r.workload], r) for r in self.generation if r.target == "proxy"]

    def targets(self) -> list[TargetCheck]:
        return [
            *self._agent_turn_targets(),
            self._stalled_target(),
            *(
                target
                for threads in self._llama_threads()
                for target in (self._ttft_target(threads), self._tokens_per_s_target(threads))
            ),
            *self._ratio_targets(),
            self._paced_share_target(),
            self._many_streams_target(),
            self._idle_memory_target(),
            self._startup_target(),
            *self._models_dir_startup_targets(),
            self._tool_call_target(),
            *self._routing_targets(),
            self._store_target(),
            socket_target(self.socket),
            *batch_targets(self.batch),
            *self._swap_targets(),
            dashboard_target(self.dashboard),
        ]

    def _routing_targets(self) -> list[TargetCheck]:
        """Issue 20: at turns 2-8 each prompt ≥ 90% from cache, and TTFT ≥ 3x lower than least-busy. TTFT
        is judged on the mean: a move costs one turn a whole prompt's reading, which a median of the
        turns hides once fewer than half of them moved; the median is shown beside it."""
        cache_name, ttft_name = (
            "prefix routing: share of each prompt from cache, turns 2+ (issue 20)",
            "prefix routing: mean TTFT vs least-busy, turns 2+ (issue 20)",
        )
        r = self.routing
        prefix, least_busy = (r.later_turns("prefix"), r.later_turns("least-busy")) if r else ([], [])
        if not prefix or not least_busy:
            return [
                TargetCheck(cache_name, "≥ 90%", "not measured", False),
                TargetCheck(ttft_name, "≥ 3x lower", "not measured", False),
            ]
        worst_share = min(s.cached_share for s in prefix)
        shares = (
            f"lowest {worst_share:.1%}, median {percentile([s.cached_share for s in prefix], 0.5):.1%} "
            f"(least-busy: lowest {min(s.cached_share for s in least_busy):.1%}, "
            f"median {percentile([s.cached_share for s in least_busy], 0.5):.1%})"
        )
        mean = {
            name: sum(s.ttft_ms for s in turns) / len(turns) for name, turns in (("prefix", prefix), ("least-busy", least_busy))
        }
        median = {
            name: percentile([s.ttft_ms for s in turns], 0.5) for name, turns in (("prefix", prefix), ("least-busy", least_busy))
        }
        ratio = mean["least-busy"] / mean["prefix"]
        measured = (
            f"{mean['prefix']:,.0f} vs {mean['least-busy']:,.0f} ms ({ratio:.1f}x lower; medians "
            f"{median['prefix']:,.0f} vs {median['least-busy']:,.0f} ms)"
        )
        return [
            TargetCheck(cache_name, "≥ 90%", shares, worst_share >= 0.9),
            TargetCheck(ttft_name, "≥ 3x lower", measured, ratio >= 3),
        ]

    def _swap_targets(self) -> list[TargetCheck]:
        """Issue 24: against router mode on the same workload, no failed request, fewer swaps, more
        answers and a lower worst TTFT; a load costs ≤ 50 ms above llama-server's own start; an agent
        turn after a swap with slot_save within 2x of a warm one (the swap back timed apart)."""
        prefix = "models on demand vs router mode, 2 models, memory for 1 (issue 24): "
        named = [
            (prefix + "failed requests", "0"),
            (prefix + "swaps (loads)", "fewer"),
            (prefix + "answered in the window", "more"),
            (prefix + "worst TTFT", "lower"),
            ("models on demand: the proxy's cost of a load above its llama-server's start, median (issue 24)", "≤ 50 ms"),
            ("agent turn after a swap, slot_save, vs a warm turn (issue 24)", "≤ 2x"),
        ]
        s = self.swaps
        if s is None or not s.of("proxy") or not s.of("router"):
            return [TargetCheck(name, goal, "not measured", False) for name, goal in named]
        return [
            *(TargetCheck(name, goal, *judge(s)) for (name, goal), judge in zip(named, SWAP_JUDGES, strict=False)),
            _load_cost(*named[4], s),
            _agent_after_swap(*named[5], s),
        ]

    def _store_target(self) -> TargetCheck:
        name = "storing a non-streamed response on SQLite: latency added, p50 (issue 17)"
        r = self.store
        if r is None:
            return TargetCheck(name, "≤ 1 ms", "not measured", False)
        measured = (
            f"{r.added_p50_ms:+.2f} ms ({r.stored_p50_ms:.2f} vs {r.stateless_p50_ms:.2f} ms, {r.clients} client"
            f"{'' if r.retrievable else ', NOT retrievable'})"
        )
        return TargetCheck(name, "≤ 1 ms", measured, r.retrievable and r.errors == 0 and r.added_p50_ms <= 1.0)

    def _llama_threads(self) -> list[int]:
        return sorted({r.llama_threads for r in self.generation}, reverse=True) or [2]

    def _agent_turn_targets(self) -> list[TargetCheck]:
        one_line = next((t for t in self.agent_turns if t.name == ONE_LINE_CHAT), None)
        turns = [t for t in self.agent_turns if t.name != ONE_LINE_CHAT]
        if not turns:
            return [TargetCheck("agent turns", "measured", "not measured", False)]
        if one_line is None:
            warm = TargetCheck("agent turn replayed warm ÷ a one-line chat, proxy CPU", "≤ 2x", "not measured", False)
        else:
            ratios = {t.name: t.warm_cpu_ms / one_line.warm_cpu_ms for t in turns}
            warm = TargetCheck(
                "agent turn replayed warm ÷ a one-line chat, proxy CPU",
                "≤ 2x",
                ", ".join(f"{name} {ratio:.1f}x" for name, ratio in ratios.items())
                + f" (one-line chat {one_line.warm_cpu_ms:.2f} ms)",
                max(ratios.values()) <= 2,
            )
        checks = [warm]
        for name, goal, limit, value in (
            ("agent turn, proxy CPU, tools and system prompt new (cold)", "≤ 5 ms", 5.0, lambda t: t.cold_cpu_ms),
            (
                "agent turn, longest hold of the event loop (cold or warm)",
                "≤ 5 ms",
                5.0,
                lambda t: max(t.cold_hold_max_ms, t.warm_hold_max_ms),
            ),
        ):
            measured = ", ".join(f"{t.name} {value(t):.2f}" for t in turns)
            checks.append(TargetCheck(name, goal, measured + " ms", max(value(t) for t in turns) <= limit))
        return checks

    def _stalled_target(self) -> TargetCheck:
        name = "no stalled streams: p99 inter-token gap growth, 16 streams @ 8 ms beside agent turns"
        r = self.stalled_streams
        if r is None:
            return TargetCheck(name, "≤ 2 ms", "not measured", False)
        measured = (
            f"{r.growth_ms:+.2f} ms (p99 {r.p99_alone_ms:.2f} → {r.p99_with_turns_ms:.2f} ms, "
            f"{r.turns} turns, {r.turn_errors} refused)"
        )
        return TargetCheck(name, "≤ 2 ms", measured, r.growth_ms <= 2.0 and r.turns > 0 and r.turn_errors == 0)

    def _tool_call_target(self) -> TargetCheck:
        name = "streamed tool call: proxy CPU per token over plain text (issue 10)"
        r = self.tool_call
        if r is None:
            return TargetCheck(name, "≤ +20%", "not measured", False)
        measured = (
            f"{r.tool_call_cpu_us_per_token:.1f} vs {r.plain_cpu_us_per_token:.1f} µs per token "
            f"({r.extra_share:+.0%}, {r.clients} clients{'' if r.calls_parsed else ', calls NOT parsed'})"
        )
        return TargetCheck(name, "≤ +20%", measured, r.calls_parsed and r.errors == 0 and r.extra_share <= 0.2)

    def _streamed_pairs(self, threads: int) -> dict[str, tuple[GenerationResult, GenerationResult]]:
        return {
            f"{d.endpoint}/{d.clients}c": (d, p) for d, p in self.generation_pairs() if d.streamed and d.llama_threads == threads
        }

    def _ttft_target(self, threads: int) -> TargetCheck:
        added = {name: p.ttft_p50_ms - d.ttft_p50_ms for name, (d, p) in self._streamed_pairs(threads).items()}
        return _judged(
            f"TTFT added by the proxy, p50 (streamed, 1 and 4 clients), llama-server --threads {threads}",
            "≤ 1 ms",
            added,
            lambda value: f"{value:+.2f} ms",
            lambda worst: worst <= 1.0,
            max,
        )

    def _tokens_per_s_target(self, threads: int) -> TargetCheck:
        ratios = {
            name: p.tokens_per_s / d.tokens_per_s if d.requests and p.requests else math.nan
            for name, (d, p) in self._streamed_pairs(threads).items()
        }
        return _judged(
            f"streamed tokens/s through the proxy vs direct, llama-server --threads {threads}",
            "≥ 99%",
            ratios,
            lambda value: f"{value:.1%}",
            lambda worst: worst >= 0.99,
            min,
        )

    def _default_paced(self, connections: str = "keep-alive") -> list[PacedResult]:
        return [r for r in self.paced if r.worker_class == "gevent" and r.connections == connections]

    def _paced_share_target(self) -> TargetCheck:
        shares = {f"{r.clients} @ {r.interval_ms:g} ms": r.carried_share for r in self._default_paced()}
        worst = min(shares.values(), default=math.nan)
        measured = ", ".join(f"{name}: {value:.2f}" for name, value in shares.items())
        return TargetCheck("tokens relayed / what the paced streams would carry", "≥ 0.9", measured, worst >= 0.9)

    def _many_streams_target(self) -> TargetCheck:
        m = self.many_streams
        if m is None:
            return TargetCheck("concurrent paced streams, 1 worker, all complete", "1000", "not measured", False)
        return TargetCheck(
            f"{m.streams} concurrent paced streams, 1 worker, all complete",
            "1000 of 1000",
            f"{m.whole} of {m.streams} whole in {m.seconds:.1f} s (pace alone: {m.ideal_seconds:.1f} s)",
            m.whole == m.streams >= 1000,
        )

    def _ratio_targets(self) -> list[TargetCheck]:
        """Issue 29: the proxy against its neighbours in the same rows (benchmarks/ratios.py)."""
        r = self.ratios
        named = [
            ("non-streamed CPU per request, proxy ÷ floor (instant upstream)", "≤ 1.25x"),
            ("paced streams: CPU per relayed token, proxy ÷ floor", "≤ 1.25x"),
            ("TTFT added vs llama-server direct, p50 (ratio rows)", "≤ 1 ms"),
            ("streamed tokens/s through the proxy ÷ direct (ratio rows)", "≥ 0.99"),
            ("ahead of LiteLLM's proxy on every row", "every row"),
            (REQUEST_ERROR_TARGET, f"≤ {REQUEST_ERROR_BOUND:.1%}"),
        ]
        if r is None or not r.rows:
            return [TargetCheck(name, goal, "not measured", False) for name, goal in named]
        whole = [row for row in r.of_kind("request") if row.name.startswith("non-streamed")]
        generation = r.of_kind("generation")
        return [
            _ratio_judged(*named[0], whole, lambda row: row.over_floor("proxy"), "{:.2f}x", max, lambda v: v <= 1.25),
            _ratio_judged(
                *named[1], r.of_kind("token"), lambda row: row.over_floor("proxy"), "{:.2f}x", max, lambda v: v <= 1.25
            ),
            _ratio_judged(*named[2], generation, lambda row: row.ttft_added_ms("proxy"), "{:+.2f} ms", max, lambda v: v <= 1.0),
            _ratio_judged(*named[3], generation, lambda row: row.tokens_ratio("proxy"), "{:.3f}", min, lambda v: v >= 0.99),
            TargetCheck(
                *named[4],
                "; ".join(f"{row.name}: {'ahead' if row.ahead_of_litellm() else 'BEHIND'}" for row in r.rows),
                all(row.ahead_of_litellm() for row in r.rows),
            ),
            _ratio_judged(
                *named[5],
                r.of_kind("request"),
                lambda row: row.floor_error() * 100,
                "±{:.1f}%",
                max,
                lambda v: v <= REQUEST_ERROR_BOUND * 100,
            ),
            *([_against_target(r)] if r.against else []),
        ]

    def _idle_memory_target(self) -> TargetCheck:
        rss = self.startup.idle_rss_mb if self.startup else math.nan
        pss = self.startup.idle_pss_mb if self.startup else math.nan
        return TargetCheck("idle memory, PSS of master + worker", "≤ 55 MB", f"{pss:.1f} MB (RSS summed {rss:.1f} MB)", pss <= 55)

    def _startup_target(self) -> TargetCheck:
        seconds = self.startup.median_seconds if self.startup else math.nan
        return TargetCheck("start-up to the first served request, median", "< 1 s", f"{seconds:.2f} s", seconds < 1.0)

    def _models_dir_startup_targets(self) -> list[TargetCheck]:
        """Issue 42: ≤ 1 s to the first answered /v1/models with ten GGUF files, ≤ 50 ms a file read cold."""
        s = self.models_dir_startup
        first = "start-up with --models-dir of 10 GGUF files, to the first /v1/models, median (issue 42)"
        per_file = "a GGUF file's header read, cache cold, slowest file (issue 42)"
        if s is None or not s.seconds:
            return [TargetCheck(first, "≤ 1 s", "not measured", False), TargetCheck(per_file, "≤ 50 ms", "not measured", False)]
        return [
            TargetCheck(
                first, "≤ 1 s", f"{s.median_seconds:.2f} s (one file: {s.one_file_median_seconds:.2f} s)", s.median_seconds <= 1.0
            ),
            TargetCheck(
                per_file,
                "≤ 50 ms",
                f"{max(s.header_ms):.1f} ms (median {percentile(s.header_ms, 0.5):.1f} ms)",
                max(s.header_ms) <= 50,
            ),
        ]


def _judged(name: str, goal: str, values: dict[str, float], show, passes, worst_of) -> TargetCheck:
    """A target over several workloads: met only if every one was measured and passes."""
    unmeasured = [key for key, value in values.items() if math.isnan(value)]
    measured = ", ".join(f"{key} {show(value)}" for key, value in values.items() if not math.isnan(value))
    if unmeasured:
        measured += ("; " if measured else "") + "not measured (no rounds in time): " + ", ".join(unmeasured)
    known = [value for value in values.values() if not math.isnan(value)]
    return TargetCheck(name, goal, measured, bool(known) and not unmeasured and passes(worst_of(known)))


def _ratio_judged(name: str, goal: str, rows: list[RatioRow], value, show: str, worst_of, passes) -> TargetCheck:
    """A ratio target over rows: met when every row was measured without errors and the worst passes."""
    if not rows:
        return TargetCheck(name, goal, "not measured", False)
    values = [value(row) for row in rows]
    measured = "; ".join(
        f"{row.name}: {'not measured' if math.isnan(v) else show.format(v)}"
        + (f" ({row.errors()} errors)" if row.errors() else "")
        for row, v in zip(rows, values, strict=True)
    )
    known = [v for v in values if not math.isnan(v)]
    met = len(known) == len(values) and not any(row.errors() for row in rows) and passes(worst_of(known))
    return TargetCheck(name, goal, measured, met)


def _swap_side(s: SwapsResult, measure) -> tuple[float, float]:
    """(the proxy's, router mode's) value of `measure(s, setup)`."""
    return measure(s, "proxy"), measure(s, "router")


def _judge(measure, show, better) -> Callable[[SwapsResult], tuple[str, bool]]:
    def judge(s: SwapsResult) -> tuple[str, bool]:
        proxy, router = _swap_side(s, measure)
        return f"{show(proxy)} (router mode: {show(router)})", better(proxy, router)

    return judge


def _loads(s: SwapsResult, setup: str) -> int:
    return s.swaps(setup)


def _worst_ttft_s(s: SwapsResult, setup: str) -> float:
    return max((r.ttft_ms for r in s.of(setup) if r.ok), default=math.nan) / 1000


SWAP_JUDGES = (
    _judge(SwapsResult.failed, str, lambda proxy, _router: proxy == 0),
    _judge(_loads, str, lambda proxy, router: proxy < router),
    _judge(SwapsResult.answered, str, lambda proxy, router: proxy > router),
    _judge(_worst_ttft_s, lambda value: f"{value:.1f} s", lambda proxy, router: proxy < router),
)


def _load_cost(name: str, goal: str, s: SwapsResult) -> TargetCheck:
    if not s.loads:
        return TargetCheck(name, goal, "not measured", False)
    """Judged on each load against the start of the very llama-server it waited for: two separate starts of
    llama-server differ by seconds on a busy machine, which the medians of a few alternated runs do not
    cancel (they are shown beside it)."""
    measured = "; ".join(
        f"{t.model} {t.added_in_run_ms:+.0f} ms (medians of {len(t.proxy_ms)} alternated loads: "
        f"{percentile(t.proxy_ms, 0.5):,.0f} ms through the proxy, {percentile(t.direct_ms, 0.5):,.0f} "
        f"ms llama-server alone, {t.added_ms:+,.0f} ms)"
        for t in s.loads
    )
    return TargetCheck(name, goal, measured, max(t.added_in_run_ms for t in s.loads) <= 50)


def _agent_after_swap(name: str, goal: str, s: SwapsResult) -> TargetCheck:
    kept = next((t for t in s.agent if t.slot_save), None)
    if kept is None:
        return TargetCheck(name, goal, "not measured", False)
    lost = next((t for t in s.agent if not t.slot_save), None)
    measured = f"{kept.after_swap_ms / 1000:.2f} vs {kept.warm_ms / 1000:.2f} s ({kept.after_swap_ratio:.1f}x; " + (
        f"without slot_save {lost.after_swap_ms / 1000:.1f} s, {lost.after_swap_ratio:.0f}x)" if lost else ")"
    )
    return TargetCheck(name, goal, measured, kept.after_swap_ratio <= 2)


def load(raw: dict) -> BenchmarkResults:
    """The results as results.json holds them, to add one part measured on its own (`--only`); the
    targets it lists are left out: they are judged again."""
    return _built(BenchmarkResults, raw)


def _built(cls, raw: dict):
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: _value(hints[f.name], raw[f.name]) for f in dataclasses.fields(cls) if f.name in raw})


def _value(hint, raw):
    if raw is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list:
        return [_value(args[0], item) for item in raw]
    if origin is types.UnionType:
        return _value(next(arg for arg in args if arg is not type(None)), raw)
    return _built(hint, raw) if dataclasses.is_dataclass(hint) else raw


def _against_target(r: RatiosResult) -> TargetCheck:
    """`--against REV`: no CPU row costs more than the proxy at REV by more than the row's own noise."""
    rows = [row for row in r.rows if row.kind != "generation" and row.cell(BEFORE)]
    verdicts = [(row, row.cost("proxy") / row.cost(BEFORE), row.noise()) for row in rows]
    return TargetCheck(
        f"CPU rows: proxy ÷ the proxy at {r.against}, each within the row's noise",
        "≤ 1 + noise",
        "; ".join(f"{row.name}: {ratio:.2f}x (noise {noise:.0%})" for row, ratio, noise in verdicts),
        bool(verdicts) and all(ratio <= 1 + noise for _, ratio, noise in verdicts),
    )


def socket_target(r: SocketResult | None) -> TargetCheck:
    name = "10-turn agent session over one Responses WebSocket vs HTTP: first event p50 and proxy CPU per turn (issue 50)"
    if r is None:
        return TargetCheck(name, "socket ≤ HTTP on both", "not measured", False)
    measured = (
        f"first event {r.socket_first_event_p50_ms:.2f} vs {r.http_first_event_p50_ms:.2f} ms; CPU "
        f"{r.socket_cpu_us_per_turn:,.0f} vs {r.http_cpu_us_per_turn:,.0f} µs a turn; {r.errors} errors"
    )
    if len(r.cpu_pair_ratios) == 3:  # paired sessions: judged by the pairs' median ratios (steadier under load)
        measured += (
            f"; socket ÷ HTTP within pairs: first event {r.first_event_pair_ratios[1]:.3f}, CPU {r.cpu_pair_ratios[1]:.3f}"
        )
        faster, cheaper = r.first_event_pair_ratios[1] <= 1, r.cpu_pair_ratios[1] <= 1
    else:
        faster = r.socket_first_event_p50_ms <= r.http_first_event_p50_ms
        cheaper = r.socket_cpu_us_per_turn <= r.http_cpu_us_per_turn
    return TargetCheck(name, "socket ≤ HTTP on both", measured, r.errors == 0 and faster and cheaper)


def batch_targets(r: BatchLaneResult | None) -> list[TargetCheck]:
    """Issue 51: chats' TTFT with a batch on every slot ÷ idle (≤ 1.25x with preemption; without it
    reported, not judged), and the lane's throughput ÷ its lines run straight on llama-server (≥ 0.9x)."""
    ttft = "chats' time to first token, p50, a batch on every slot ÷ the idle box, with preemption (issue 51)"
    throughput = "a batch's tokens per second in the lane ÷ its lines sent straight to llama-server (issue 51)"
    if r is None:
        return [TargetCheck(ttft, "≤ 1.25x", "not measured", False), TargetCheck(throughput, "≥ 0.9x", "not measured", False)]
    measured = (
        f"{r.ttft_ratio('lane'):.2f}x ({r.ttft_p50('lane'):.0f} vs {r.ttft_p50('idle'):.0f} ms, {r.preemptions} "
        f"preemptions; without preemption, the lines as plain requests: {r.ttft_ratio('plain'):.2f}x, "
        f"{r.ttft_p50('plain'):.0f} ms; with --batch-free-slots {r.more_free}: {r.ttft_ratio('more_free'):.2f}x, "
        f"{r.ttft_p50('more_free'):.0f} ms; {r.errors} errors)"
    )
    rate = (
        f"{r.throughput_ratio:.2f}x ({r.lane_tokens / r.lane_seconds if r.lane_seconds else math.nan:.1f} vs "
        f"{r.direct_tokens / r.direct_seconds if r.direct_seconds else math.nan:.1f} tokens/s, {r.lines} lines)"
    )
    return [
        TargetCheck(ttft, "≤ 1.25x", measured, r.errors == 0 and r.ttft_ratio("lane") <= 1.25),
        TargetCheck(throughput, "≥ 0.9x", rate, r.errors == 0 and r.throughput_ratio >= 0.9),
    ]


def dashboard_target(result: DashboardResult | None):
    name = "dashboard's event stream open: proxy CPU per relayed token vs closed, paced streams (issue 26)"
    if result is None or not result.open_us_per_token or not result.closed_us_per_token:
        return TargetCheck(name, "≤ 5% more", "not measured", False)
    measured = (
        f"{result.added_share:+.1%} (implied by the stream's own CPU: {result.implied_share:+.1%}; "
        f"medians {statistics.median(result.open_us_per_token):.1f} vs "
        f"{statistics.median(result.closed_us_per_token):.1f} µs, {len(result.open_us_per_token)} windows each, "
        f"{result.clients} streams @ {result.interval_ms:g} ms)"
    )
    return TargetCheck(name, "≤ 5% more", measured, result.added_share <= DASHBOARD_TARGET and result.errors == 0)
