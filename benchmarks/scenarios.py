"""The measurements: real generation direct vs through the proxy; the proxy's capacity in front of
an instant upstream and its CPU per event with a paced one; chat vs completions for the same
prompt; start-up time and idle memory."""

from __future__ import annotations

import asyncio
import http.client
import json
import math
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import agent_turns as agent_turns_module
from .client import Connection, FrameCounter, LoadWindow, Sample, closed_loop, encode_post, open_loop
from .processes import Service, system_busy_seconds
from .results import (
    AgentTurnResult,
    CapacityResult,
    GatewayResult,
    GenerationResult,
    ManyStreamsResult,
    OutputCheck,
    PacedResult,
    StalledStreamsResult,
    StartupResult,
    StoreResult,
    ToolCallResult,
    percentile,
)

GENERATED_TOKENS = 64
SEED = 42
PROMPT = "The history of the Roman Empire"
CHAT_MESSAGES = [{"role": "user", "content": "Write a long story about a dragon who learns to bake bread."}]
PACED_TOKEN_INTERVAL_MS = 8.0  # about llama-server's pace with the test model here (~120 tokens/s)
# (concurrent streams, ms between two tokens of one stream): the loads of issue 13
PACED_LOADS = ((16, 8.0), (64, 8.0), (256, 40.0))
MANY_STREAMS, MANY_STREAMS_INTERVAL_MS, MANY_STREAMS_TOKENS = 1000, 100.0, 32
GATEWAY_RATES = (100, 500)  # requests per second, open loop
PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Plan:
    """How much to measure; `quick()` is a smoke test of the whole pipeline."""

    rounds_per_clients: tuple[tuple[int, int], ...] = ((1, 24), (4, 10))  # (clients, rounds per target)
    capacity_clients: tuple[int, ...] = (1, 16, 64)
    reference_clients: int = 16  # for the marginal cost of an event and chat vs completions
    capacity_seconds: float = 3.0
    warmup_seconds: float = 0.5
    repeats: int = 3  # measurement windows per capacity cell, spread over passes
    generation_budget_seconds: float = 240.0  # all real-generation workloads of one llama-server variant, at most
    startup_runs: int = 3
    paced_seconds: float = 5.0  # one window per paced row
    gateway_seconds: float = 4.0  # per rate and target, `repeats` times
    many_streams: int = MANY_STREAMS
    agent_turn_rounds: int = 40  # cold and warm replays per recorded turn
    stalled_seconds: float = 12.0  # paced streams alone, and as long beside agent turns
    stalled_rounds: int = 4  # alternating windows of each

    @classmethod
    def quick(cls) -> Plan:
        return cls(rounds_per_clients=((1, 2), (4, 1)), capacity_seconds=0.5, warmup_seconds=0.2,
                   repeats=1, startup_runs=1, generation_budget_seconds=30.0, paced_seconds=1.0,
                   gateway_seconds=0.5, many_streams=100, agent_turn_rounds=5, stalled_seconds=2.0,
                   stalled_rounds=2)


def mode_name(streamed: bool) -> str:
    return "streamed" if streamed else "whole"


def generation_body(endpoint: str, streamed: bool, tokens: int = GENERATED_TOKENS, prompt: dict | None = None) -> dict:
    """The request both targets get: greedy, seeded, `tokens` long."""
    content = prompt or ({"prompt": PROMPT} if endpoint == "completions" else {"messages": CHAT_MESSAGES})
    return {"model": "bench", **content, "max_tokens": tokens, "temperature": 0, "seed": SEED, "stream": streamed}


def post_json(url: str, body: dict, timeout: float = 120.0) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(),  # noqa: S310 - loopback only
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - loopback only
        return json.load(response)


# --- part 1: real generation, direct vs through the proxy ------------------------------------

def check_same_output(direct_url: str, proxy_url: str, endpoint: str, timeout: float = 60.0) -> OutputCheck:
    """Send the non-streamed request to both; the token counts and whether the texts are equal.
    Not checked (no exception) when an answer takes longer than `timeout` seconds."""
    body = generation_body(endpoint, False)
    try:
        answers = [post_json(url + PATHS[endpoint], body, timeout) for url in (direct_url, proxy_url)]
    except TimeoutError:  # a read timeout; connecting over loopback does not time out
        return OutputCheck(endpoint)
    texts = [a["choices"][0].get("text") or a["choices"][0]["message"]["content"] for a in answers]
    direct, proxy = (a["usage"]["completion_tokens"] for a in answers)
    return OutputCheck(endpoint, direct, proxy, texts[0] == texts[1])


def alternating(round_number: int) -> tuple[str, str]:
    """ABBA order, so that neither target always goes first."""
    return ("direct", "proxy") if round_number % 2 == 0 else ("proxy", "direct")


@dataclass
class GenerationRig:
    """llama-server and the proxy in front of it; CPU snapshots of both, of us and of everything."""

    direct: Service
    proxy: Service
    plan: Plan

    def snapshot(self) -> dict[str, float]:
        return {"direct": self.direct.tree().cpu_seconds(), "proxy": self.proxy.tree().cpu_seconds(),
                "client": time.process_time(), "system": system_busy_seconds(), "time": time.perf_counter()}


@dataclass
class Rounds:
    """Samples per target, the proxy's CPU time over its rounds, and whether time ran out."""

    samples: dict[str, list[Sample]] = field(default_factory=lambda: {"direct": [], "proxy": []})
    proxy_cpu_seconds: float = 0.0
    cut_short: bool = False


class AlternatingRounds:
    """Rounds of `clients` concurrent identical requests to one target at a time, alternating
    between llama-server and the proxy, until `rounds` are done or `deadline` passes."""

    def __init__(self, rig: GenerationRig, endpoint: str, streamed: bool, clients: int, deadline: float):
        body = generation_body(endpoint, streamed)
        self.rig, self.streamed, self.deadline = rig, streamed, deadline
        self.services = {"direct": rig.direct, "proxy": rig.proxy}
        self.requests = {name: encode_post(s.port, PATHS[endpoint], body) for name, s in self.services.items()}
        self.connections = {name: [Connection(s.port) for _ in range(clients)] for name, s in self.services.items()}
        self.outcome = Rounds()

    async def run(self, rounds: int) -> Rounds:
        try:
            for target in self.services:
                await self.one_round(target)  # warm-up: connections, slots, prompt cache
            for round_number in range(rounds):
                for target in alternating(round_number):
                    await self.measured_round(target)
        except asyncio.TimeoutError:
            self.outcome.cut_short = True  # the round in flight is dropped
        finally:
            for connection in self.connections["direct"] + self.connections["proxy"]:
                connection.close()
        return self.outcome

    async def measured_round(self, target: str) -> None:
        cpu_before = self.rig.proxy.tree().cpu_seconds()
        self.outcome.samples[target] += await self.one_round(target)
        if target == "proxy":
            self.outcome.proxy_cpu_seconds += self.rig.proxy.tree().cpu_seconds() - cpu_before

    async def one_round(self, target: str) -> list[Sample]:
        time_left = self.deadline - time.perf_counter()
        if time_left <= 0:
            raise asyncio.TimeoutError
        sends = (c.send(self.requests[target], watch_text=self.streamed) for c in self.connections[target])
        batch = await asyncio.wait_for(asyncio.gather(*sends), timeout=time_left)
        if any(s.status != 200 for s in batch):
            raise RuntimeError(f"{target} answered {[s.status for s in batch]}")
        return batch


async def compare_generation(rig: GenerationRig, endpoint: str, streamed: bool, clients: int, rounds: int,
                             deadline: float) -> list[GenerationResult]:
    """The direct and the proxy result of one workload, measured in alternating rounds."""
    before = rig.snapshot()
    outcome = await AlternatingRounds(rig, endpoint, streamed, clients, deadline).run(rounds)
    return summarise_rounds(endpoint, streamed, clients, outcome, other_cpu_share(before, rig.snapshot()))


async def generation_table(rig: GenerationRig, progress: Callable[[str], None]) -> list[GenerationResult]:
    """Every workload (endpoint x streamed x clients); each gets an equal share of the time left."""
    workloads = [(endpoint, streamed, clients, rounds) for clients, rounds in rig.plan.rounds_per_clients
                 for endpoint in PATHS for streamed in (True, False)]
    budget_end = time.perf_counter() + rig.plan.generation_budget_seconds
    results = []
    for index, (endpoint, streamed, clients, rounds) in enumerate(workloads):
        progress(f"real generation: {endpoint} {mode_name(streamed)}, {clients} clients")
        deadline = time.perf_counter() + (budget_end - time.perf_counter()) / (len(workloads) - index)
        results += await compare_generation(rig, endpoint, streamed, clients, rounds, deadline)
    return results


def other_cpu_share(before: dict[str, float], after: dict[str, float]) -> float:
    """Cores busy, on average, with processes other than the ones snapshotted."""
    spent = {name: after[name] - before[name] for name in before}
    ours = sum(value for name, value in spent.items() if name not in ("system", "time"))
    return max(spent["system"] - ours, 0.0) / spent["time"]


def summarise_rounds(endpoint: str, streamed: bool, clients: int, outcome: Rounds,
                     other_cpu: float) -> list[GenerationResult]:
    proxy_count = len(outcome.samples["proxy"])
    proxy_ms = outcome.proxy_cpu_seconds * 1000 / proxy_count if proxy_count else math.nan
    results = [summarise_generation(endpoint, streamed, clients, target, outcome.samples[target], other_cpu,
                                    proxy_ms if target == "proxy" else None) for target in ("direct", "proxy")]
    for result in results:
        result.cut_short = outcome.cut_short
    return results


def summarise_generation(endpoint: str, streamed: bool, clients: int, target: str, samples: list[Sample],
                         other_cpu: float, proxy_cpu_ms: float | None) -> GenerationResult:
    ttfts = [s.ttft * 1000 for s in samples]
    totals = [s.total * 1000 for s in samples]
    return GenerationResult(
        endpoint, streamed, clients, target, len(samples),
        ttft_p50_ms=percentile(ttfts, 0.5), ttft_p95_ms=percentile(ttfts, 0.95),
        total_p50_ms=percentile(totals, 0.5), total_p95_ms=percentile(totals, 0.95),
        tokens_per_s=percentile([GENERATED_TOKENS / s.total for s in samples], 0.5),
        other_cpu_share=other_cpu, proxy_cpu_ms_per_request=proxy_cpu_ms)


# --- parts 2 and 3: the proxy in front of an instant upstream ---------------------------------

@dataclass
class CapacityRig:
    """The proxy under load, the fake upstream behind it, and what to snapshot around a window."""

    proxy: Service
    upstream: Service
    plan: Plan

    def snapshot(self) -> dict[str, float]:
        return {"proxy": self.proxy.tree().cpu_seconds(), "upstream": self.upstream.tree().cpu_seconds(),
                "client": time.process_time(), "system": system_busy_seconds()}

    async def load(self, body: dict, path: str, clients: int) -> LoadWindow:
        request = encode_post(self.proxy.port, path, body)
        return await closed_loop(self.proxy.port, request, clients, self.plan.capacity_seconds,
                                 self.plan.warmup_seconds, self.snapshot)


def summarise_capacity(endpoint: str, streamed: bool, clients: int, tokens: int,
                       windows: list[LoadWindow]) -> CapacityResult:
    """One result from one or more measurement windows of the same workload."""
    samples = [s for w in windows for s in w.samples]
    seconds = sum(w.seconds for w in windows)
    spent = {name: sum(w.spent(name) for w in windows) for name in ("proxy", "upstream", "client", "system")}
    other = max(spent["system"] - spent["proxy"] - spent["upstream"] - spent["client"], 0.0)
    events = sum(s.events for s in samples)
    count = max(len(samples), 1)
    return CapacityResult(
        endpoint, streamed, clients, tokens, len(samples), seconds,
        requests_per_s=len(samples) / seconds, events_per_s=events / seconds,
        latency_p50_ms=percentile([s.total * 1000 for s in samples], 0.5),
        proxy_cpu_us_per_request=spent["proxy"] * 1e6 / count,
        proxy_cpu_us_per_event=spent["proxy"] * 1e6 / events if streamed and events else None,
        proxy_cpu_share=spent["proxy"] / seconds, upstream_cpu_share=spent["upstream"] / seconds,
        client_cpu_share=spent["client"] / seconds, other_cpu_share=other / seconds,
        errors=sum(s.status != 200 for s in samples), cpu_spread=cpu_spread(windows))


def cpu_spread(windows: list[LoadWindow]) -> float:
    """(max − min) / mean of the windows' proxy CPU per request; NaN for a single window."""
    if len(windows) < 2:
        return math.nan
    per_window = [w.spent("proxy") / max(len(w.samples), 1) for w in windows]
    return (max(per_window) - min(per_window)) / (sum(per_window) / len(per_window))


async def measure_capacity(rig: CapacityRig, streamed: bool, clients: int,
                           tokens: int = GENERATED_TOKENS) -> CapacityResult:
    window = await rig.load(generation_body("completions", streamed, tokens), PATHS["completions"], clients)
    return summarise_capacity("completions", streamed, clients, tokens, [window])


async def capacity_table(rig: CapacityRig, progress: Callable[[str], None] | None = None,
                         cells: list[tuple[int, bool]] | None = None) -> list[CapacityResult]:
    """Requests/s and CPU per request/event for each (clients, streamed) cell, by default every
    client count of the plan, non-streamed and streamed. Each cell is measured in `repeats`
    windows, one per pass over all cells, so that drift hits all cells alike."""
    cells = cells or [(clients, streamed) for clients in rig.plan.capacity_clients for streamed in (False, True)]
    windows: dict[tuple[int, bool], list[LoadWindow]] = {cell: [] for cell in cells}
    for _ in range(rig.plan.repeats):
        for clients, streamed in cells:
            body = generation_body("completions", streamed)
            windows[clients, streamed].append(await rig.load(body, PATHS["completions"], clients))
    results = [summarise_capacity("completions", streamed, clients, GENERATED_TOKENS, windows[clients, streamed])
               for clients, streamed in cells]
    if progress:
        for r in results:
            progress(f"capacity {mode_name(r.streamed)} {r.clients:>2} clients: "
                     f"{r.requests_per_s:.0f} req/s, {r.proxy_cpu_us_per_request:.0f} µs CPU/req")
    return results


async def paced_row(rig: CapacityRig, worker_class: str, clients: int, interval_ms: float,
                    new_connections: bool = False) -> PacedResult:
    """`clients` chat streams back to back against an upstream sending a token every `interval_ms`
    (as a real model does; every token wakes the proxy): CPU per relayed frame, and the frames
    relayed as a share of what the streams would carry if the proxy added no wait at all. With
    `new_connections`, each stream on a connection of its own (curl, many SDKs, agents' side requests)."""
    request = encode_post(rig.proxy.port, PATHS["chat"], generation_body("chat", True))
    window = await closed_loop(rig.proxy.port, request, clients, rig.plan.paced_seconds, rig.plan.warmup_seconds,
                               rig.snapshot, stagger=interval_ms / 1000, new_connections=new_connections)
    # A chat stream of T tokens is T + 2 frames (the role first, the finish last) and takes T + 1
    # intervals upstream (the final event is paced too); only the T text frames count as tokens.
    tokens = window.spent("frames") * GENERATED_TOKENS / (GENERATED_TOKENS + 2)
    would_carry = clients * GENERATED_TOKENS / ((GENERATED_TOKENS + 1) * interval_ms / 1000)
    spent = {name: window.spent(name) for name in ("proxy", "upstream", "client", "system")}
    other = max(spent["system"] - spent["proxy"] - spent["upstream"] - spent["client"], 0.0)
    return PacedResult(worker_class, clients, interval_ms, window.seconds, tokens / window.seconds,
                       tokens / window.seconds / would_carry,
                       spent["proxy"] * 1e6 / tokens if tokens else math.nan,
                       spent["proxy"] / window.seconds, other / window.seconds,
                       sum(s.status != 200 for s in window.samples),
                       "new per stream" if new_connections else "keep-alive")


TOOLS = [{"type": "function", "function": {
    "name": "search", "description": "Search the web.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}]


async def tool_call_row(rig: CapacityRig, clients: int) -> ToolCallResult:
    """The same streamed chat (64 tokens from the instant upstream), plain and with `tools`, which the
    fake answers with a `<tool_call>` the proxy parses into tool_calls deltas: the proxy's CPU per
    upstream token for each, in alternating windows (median of `repeats`)."""
    plain = generation_body("chat", True)
    bodies = {"plain": plain, "tool_call": {**plain, "tools": TOOLS}}
    per_token: dict[str, list[float]] = {name: [] for name in bodies}
    errors = 0
    for _ in range(rig.plan.repeats):
        for name, body in bodies.items():
            window = await rig.load(body, PATHS["chat"], clients)
            per_token[name].append(window.spent("proxy") * 1e6 / max(len(window.samples), 1) / GENERATED_TOKENS)
            errors += sum(s.status != 200 for s in window.samples)
    answer = post_stream(f"http://127.0.0.1:{rig.proxy.port}{PATHS['chat']}", bodies["tool_call"])
    calls_parsed = b'"tool_calls"' in answer and b"<tool_call>" not in answer
    return ToolCallResult(clients, GENERATED_TOKENS, statistics.median(per_token["plain"]),
                          statistics.median(per_token["tool_call"]), calls_parsed, errors)


async def store_row(rig: CapacityRig) -> StoreResult:
    """The same non-streamed Responses request (64 tokens from the instant upstream) with `store: true`
    (the proxy's SQLite store) and `store: false`, one client in alternating windows: what storing adds
    to the latency (p50 of every sample) and to the proxy's CPU per request (median of the windows)."""
    body = {"model": "bench", "input": CHAT_MESSAGES[0]["content"], "max_output_tokens": GENERATED_TOKENS,
            "temperature": 0}
    bodies = {"stateless": {**body, "store": False}, "stored": {**body, "store": True}}
    latencies: dict[str, list[float]] = {name: [] for name in bodies}
    cpu: dict[str, list[float]] = {name: [] for name in bodies}
    errors = 0
    for _ in range(rig.plan.repeats):
        for name, request in bodies.items():
            window = await rig.load(request, "/v1/responses", 1)
            latencies[name] += [s.total * 1000 for s in window.samples]
            cpu[name].append(window.spent("proxy") * 1e6 / max(len(window.samples), 1))
            errors += sum(s.status != 200 for s in window.samples)
    stored = post_json(rig.proxy.url + "/v1/responses", bodies["stored"])
    with urllib.request.urlopen(f"{rig.proxy.url}/v1/responses/{stored['id']}", timeout=10) as again:  # noqa: S310
        retrievable = json.load(again) == stored
    return StoreResult(1, percentile(latencies["stateless"], 0.5), percentile(latencies["stored"], 0.5),
                       statistics.median(cpu["stateless"]), statistics.median(cpu["stored"]), retrievable, errors)


def post_stream(url: str, body: dict, timeout: float = 60.0) -> bytes:
    request = urllib.request.Request(url, data=json.dumps(body).encode(),  # noqa: S310 - loopback only
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
        return response.read()


async def many_streams(proxy: Service, upstream: Service, streams: int, tokens: int, interval_ms: float) -> ManyStreamsResult:
    """`streams` concurrent chat streams, each started once (within one token interval) and read
    to the end: how many came back whole, and how long they took against the upstream's pace."""
    request = encode_post(proxy.port, PATHS["chat"], generation_body("chat", True, tokens))
    counter = FrameCounter()
    cpu_before, upstream_before = proxy.tree().cpu_seconds(), upstream.tree().cpu_seconds()
    started = time.perf_counter()

    async def one(position: int) -> bool:
        await asyncio.sleep(position * interval_ms / 1000 / streams)
        connection = Connection(proxy.port, counter)
        try:
            sample = await connection.send(request, keep_body=True)
        except (OSError, asyncio.IncompleteReadError):
            return False
        finally:
            connection.close()
        return sample.status == 200 and sample.events == tokens + 2 and sample.body.endswith(b"data: [DONE]\n\n")

    whole = sum(await asyncio.gather(*(one(position) for position in range(streams))))
    seconds = time.perf_counter() - started
    cpu = proxy.tree().cpu_seconds() - cpu_before
    return ManyStreamsResult(streams, tokens, interval_ms, whole, seconds,
                             (tokens + 1) * interval_ms / 1000 + interval_ms / 1000,
                             cpu * 1e6 / (counter.frames * tokens / (tokens + 2)) if counter.frames else math.nan,
                             upstream.tree().cpu_seconds() - upstream_before, proxy.tree().peak_rss_mb())


async def gateway_row(proxy: Service, upstream: Service, rate: int, plan: Plan) -> GatewayResult:
    """Added latency at a fixed request rate (open loop), non-streamed, as gateways publish it:
    the same generation sent straight to the instant upstream and through the proxy, alternately."""
    through_proxy = encode_post(proxy.port, PATHS["completions"], generation_body("completions", False))
    direct = encode_post(upstream.port, "/completion", {"prompt": PROMPT, "n_predict": GENERATED_TOKENS,
                                                        "temperature": 0, "seed": SEED, "stream": False})
    latencies: dict[str, list[float]] = {"direct": [], "proxy": []}
    errors = 0
    for _ in range(plan.repeats):
        for name, port, request in (("direct", upstream.port, direct), ("proxy", proxy.port, through_proxy)):
            samples = await open_loop(port, request, rate, plan.gateway_seconds, plan.warmup_seconds)
            latencies[name] += [s.total * 1000 for s in samples]
            errors += sum(s.status != 200 for s in samples)
    return GatewayResult(rate, len(latencies["proxy"]),
                         *(percentile(latencies[name], q) for name in ("direct", "proxy") for q in (0.5, 0.99)),
                         errors)


async def marginal_cpu_per_event(rig: CapacityRig, long_stream: CapacityResult) -> float:
    """CPU of one more relayed event: a 1-token stream's cost per request taken out of a long one's."""
    short_stream = await measure_capacity(rig, True, long_stream.clients, tokens=1)
    extra_events = (long_stream.events_per_s / long_stream.requests_per_s
                    - short_stream.events_per_s / short_stream.requests_per_s)
    extra_cpu = long_stream.proxy_cpu_us_per_request - short_stream.proxy_cpu_us_per_request
    return extra_cpu / extra_events if extra_events > 0 else math.nan


def same_prompt_bodies(proxy_url: str, streamed: bool) -> dict[str, dict]:
    """A chat request and the completion request of the very prompt text it renders to."""
    chat = generation_body("chat", streamed)
    rendered = post_json(proxy_url + "/v1/internal/chat-prompt", chat)
    completion = generation_body("completions", streamed,
                                 prompt={"prompt": rendered["prompt"], "stop": rendered["stop"]})
    return {"completions": completion, "chat": chat}


async def chat_vs_completions(rig: CapacityRig) -> list[CapacityResult]:
    """The same final prompt as chat and as completion, windows alternating between the two."""
    clients = rig.plan.reference_clients
    results = []
    for streamed in (False, True):
        bodies = same_prompt_bodies(rig.proxy.url, streamed)
        windows: dict[str, list[LoadWindow]] = {"completions": [], "chat": []}
        for repeat in range(rig.plan.repeats):
            order = ("completions", "chat") if repeat % 2 == 0 else ("chat", "completions")
            for endpoint in order:
                windows[endpoint].append(await rig.load(bodies[endpoint], PATHS[endpoint], clients))
        results += [summarise_capacity(endpoint, streamed, clients, GENERATED_TOKENS, windows[endpoint])
                    for endpoint in ("completions", "chat")]
    return results


# --- part 4: start-up and idle memory ---------------------------------------------------------

def first_served_request(port: int, process: subprocess.Popen, timeout: float = 30.0) -> None:
    """Block until the proxy answers a completion with 200 (connection refused is retried)."""
    body = json.dumps(generation_body("completions", False, tokens=4))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the proxy exited with {process.returncode} during start-up")
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            connection.request("POST", PATHS["completions"], body, {"Content-Type": "application/json"})
            if connection.getresponse().status == 200:
                return
        except ConnectionRefusedError:
            pass  # not listening yet
        finally:
            connection.close()
        time.sleep(0.005)
    raise TimeoutError(f"the proxy served nothing within {timeout}s")


def measure_startup(make_proxy: Callable[[], Service], runs: int) -> StartupResult:
    """Process start to the first answered request, `runs` times; idle memory after the last."""
    seconds, idle_rss, idle_pss, per_process = [], math.nan, math.nan, []
    for _ in range(runs):
        proxy = make_proxy()
        started = time.perf_counter()
        with proxy.log_path.open("wb") as log:
            proxy.process = subprocess.Popen(proxy.argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            first_served_request(proxy.port, proxy.process)
            seconds.append(time.perf_counter() - started)
            time.sleep(1.0)  # let the worker settle before reading its memory
            tree = proxy.tree()
            idle_rss, idle_pss, per_process = tree.rss_mb(), tree.pss_mb(), tree.rss_per_process_mb()
        finally:
            proxy.stop()
    return StartupResult(seconds, idle_rss, idle_pss, per_process)


# --- agent turns: recorded Claude Code and Codex requests (agent_turns.py) ------------------------

STALLED_TURN = "claude_code_turn"  # replayed back to back beside the paced streams


def agent_props(props_path: Path) -> Path:
    """The upstream's /props with the fixtures' model: Qwen2.5's template (Hermes tool calls), a
    context an agent's prompt fits in, a build that takes lazy grammars."""
    props = json.loads(props_path.read_text())
    props.update({"chat_template": (ROOT / "conversation_templates" / "qwen2.5.jinja").read_text(),
                  "bos_token": "", "eos_token": "<|im_end|>", "build_info": "b7000-bench"})
    props.setdefault("default_generation_settings", {})["n_ctx"] = 262144
    path = props_path.with_name(props_path.stem + "-agent.json")
    path.write_text(json.dumps(props))
    return path


def agent_turns(upstream_url: str, rounds: int) -> list[AgentTurnResult]:
    """Each recorded turn replayed in a process of its own, as a gevent worker runs the app."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.agent_turns", "--upstream", upstream_url,
                           "--rounds", str(rounds)], capture_output=True, text=True, cwd=ROOT, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"agent turns failed: {done.stderr[-2000:]}")
    return [AgentTurnResult(**json.loads(line)) for line in done.stdout.splitlines() if line.startswith("{")]


def replayable_turn(proxy_url: str, name: str) -> bytes:
    """The recorded turn as an encoded POST the proxy accepts (agent_turns.replayable)."""
    fixture = agent_turns_module.load(name)

    def accepted(body: dict) -> bool:
        request = urllib.request.Request(proxy_url + fixture["path"], data=json.dumps(body).encode(),  # noqa: S310
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - loopback only
                response.read()
                return response.status == 200
        except urllib.error.HTTPError:
            return False

    body, _ = agent_turns_module.replayable(fixture["body"], accepted)
    return encode_post(int(proxy_url.rsplit(":", 1)[1]), fixture["path"], body)


def inter_token_gaps(arrivals: list[float]) -> list[float]:
    """The gaps between a stream's token chunks, in ms (not the wait for the first one)."""
    return [(later - earlier) * 1000 for earlier, later in zip(arrivals[1:], arrivals[2:], strict=False)]


async def paced_gaps(port: int, request: bytes, clients: int, seconds: float, interval_ms: float,
                     stop: asyncio.Event) -> list[float]:
    """Inter-token gaps of `clients` paced streams, back to back, for `seconds` (streams started after it are not)."""
    gaps: list[float] = []
    deadline = time.perf_counter() + seconds

    async def one_client(position: int) -> None:
        await asyncio.sleep(position * interval_ms / 1000 / clients)
        connection = Connection(port)
        try:
            while time.perf_counter() < deadline:
                arrivals: list[float] = []
                await connection.send(request, arrivals=arrivals)
                gaps.extend(inter_token_gaps(arrivals))
        finally:
            connection.close()

    await asyncio.gather(*(one_client(position) for position in range(clients)))
    stop.set()
    return gaps


async def turns_back_to_back(port: int, turn: bytes, stop: asyncio.Event) -> tuple[int, int]:
    """(turns answered, turns refused) sent one after the other on one connection until `stop`."""
    connection, answered, refused = Connection(port), 0, 0
    try:
        while not stop.is_set():
            sample = await connection.send(turn)
            answered += sample.status == 200
            refused += sample.status != 200
    finally:
        connection.close()
    return answered, refused


async def stalled_streams(proxy: Service, turn: bytes, plan: Plan, clients: int = 16,
                          interval_ms: float = 8.0) -> StalledStreamsResult:
    """Paced streams alone, then beside recorded turns replayed back to back, in alternating windows
    (`plan.stalled_rounds` of each, so that the machine's other load hits both): the gap between tokens."""
    request = encode_post(proxy.port, PATHS["chat"], generation_body("chat", True))
    window = plan.stalled_seconds / plan.stalled_rounds
    alone: list[float] = []
    beside: list[float] = []
    cpu = {"alone": 0.0, "beside": 0.0}
    answered = refused = 0
    for _ in range(plan.stalled_rounds):
        before = proxy.tree().cpu_seconds()
        alone += await paced_gaps(proxy.port, request, clients, window, interval_ms, asyncio.Event())
        cpu["alone"] += proxy.tree().cpu_seconds() - before
        stop = asyncio.Event()
        before = proxy.tree().cpu_seconds()
        gaps, (done, failed) = await asyncio.gather(paced_gaps(proxy.port, request, clients, window, interval_ms, stop),
                                                    turns_back_to_back(proxy.port, turn, stop))
        cpu["beside"] += proxy.tree().cpu_seconds() - before
        beside, answered, refused = beside + gaps, answered + done, refused + failed
    return StalledStreamsResult(
        clients, interval_ms, STALLED_TURN, len(alone), len(beside), percentile(alone, 0.99), percentile(beside, 0.99),
        max(alone, default=math.nan), max(beside, default=math.nan), answered, refused,
        (cpu["beside"] - cpu["alone"]) * 1000 / answered if answered else math.nan)
