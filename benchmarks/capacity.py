"""Parts 2 and 3: the proxy's capacity and CPU per request and per event in front of an instant
upstream; chat vs completions for the same prompt."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from .client import LoadWindow, closed_loop, encode_post
from .processes import Service, system_busy_seconds
from .results import (
    CapacityResult,
    percentile,
)
from .workload import GENERATED_TOKENS, PATHS, Plan, generation_body, mode_name, post_json


@dataclass
class CapacityRig:
    """The proxy under load, the fake upstream behind it, and what to snapshot around a window."""

    proxy: Service
    upstream: Service
    plan: Plan

    def snapshot(self) -> dict[str, float]:
        return {
            "proxy": self.proxy.tree().cpu_seconds(),
            "upstream": self.upstream.tree().cpu_seconds(),
            "client": time.process_time(),
            "system": system_busy_seconds(),
        }

    async def load(self, body: dict, path: str, clients: int) -> LoadWindow:
        request = encode_post(self.proxy.port, path, body)
        return await closed_loop(
            self.proxy.port, request, clients, self.plan.capacity_seconds, self.plan.warmup_seconds, self.snapshot
        )


def summarise_capacity(endpoint: str, streamed: bool, clients: int, tokens: int, windows: list[LoadWindow]) -> CapacityResult:
    """One result from one or more measurement windows of the same workload."""
    samples = [s for w in windows for s in w.samples]
    seconds = sum(w.seconds for w in windows)
    spent = {name: sum(w.spent(name) for w in windows) for name in ("proxy", "upstream", "client", "system")}
    other = max(spent["system"] - spent["proxy"] - spent["upstream"] - spent["client"], 0.0)
    events = sum(s.events for s in samples)
    count = max(len(samples), 1)
    return CapacityResult(
        endpoint,
        streamed,
        clients,
        tokens,
        len(samples),
        seconds,
        requests_per_s=len(samples) / seconds,
        events_per_s=events / seconds,
        latency_p50_ms=percentile([s.total * 1000 for s in samples], 0.5),
        proxy_cpu_us_per_request=spent["proxy"] * 1e6 / count,
        proxy_cpu_us_per_event=spent["proxy"] * 1e6 / events if streamed and events else None,
        proxy_cpu_share=spent["proxy"] / seconds,
        upstream_cpu_share=spent["upstream"] / seconds,
        client_cpu_share=spent["client"] / seconds,
        other_cpu_share=other / seconds,
        errors=sum(s.status != 200 for s in samples),
        cpu_spread=cpu_spread(windows),
    )


def cpu_spread(windows: list[LoadWindow]) -> float:
    """(max − min) / mean of the windows' proxy CPU per request; NaN for a single window."""
    if len(windows) < 2:
        return math.nan
    per_window = [w.spent("proxy") / max(len(w.samples), 1) for w in windows]
    return (max(per_window) - min(per_window)) / (sum(per_window) / len(per_window))


async def measure_capacity(rig: CapacityRig, streamed: bool, clients: int, tokens: int = GENERATED_TOKENS) -> CapacityResult:
    window = await rig.load(generation_body("completions", streamed, tokens), PATHS["completions"], clients)
    return summarise_capacity("completions", streamed, clients, tokens, [window])


async def capacity_table(
    rig: CapacityRig, progress: Callable[[str], None] | None = None, cells: list[tuple[int, bool]] | None = None
) -> list[CapacityResult]:
    """Requests/s and CPU per request/event for each (clients, streamed) cell, by default every
    client count of the plan, non-streamed and streamed. Each cell is measured in `repeats`
    windows, one per pass over all cells, so that drift hits all cells alike."""
    cells = cells or [(clients, streamed) for clients in rig.plan.capacity_clients for streamed in (False, True)]
    windows: dict[tuple[int, bool], list[LoadWindow]] = {cell: [] for cell in cells}
    for _ in range(rig.plan.repeats):
        for clients, streamed in cells:
            body = generation_body("completions", streamed)
            windows[clients, streamed].append(await rig.load(body, PATHS["completions"], clients))
    results = [
        summarise_capacity("completions", streamed, clients, GENERATED_TOKENS, windows[clients, streamed])
        for clients, streamed in cells
    ]
    if progress:
        for r in results:
            progress(
                f"capacity {mode_name(r.streamed)} {r.clients:>2} clients: "
                f"{r.requests_per_s:.0f} req/s, {r.proxy_cpu_us_per_request:.0f} µs CPU/req"
            )
    return results


async def marginal_cpu_per_event(rig: CapacityRig, long_stream: CapacityResult) -> float:
    """CPU of one more relayed event: a 1-token stream's cost per request taken out of a long one's."""
    short_stream = await measure_capacity(rig, True, long_stream.clients, tokens=1)
    extra_events = long_stream.events_per_s / long_stream.requests_per_s - short_stream.events_per_s / short_stream.requests_per_s
    extra_cpu = long_stream.proxy_cpu_us_per_request - short_stream.proxy_cpu_us_per_request
    return extra_cpu / extra_events if extra_events > 0 else math.nan


def same_prompt_bodies(proxy_url: str, streamed: bool) -> dict[str, dict]:
    """A chat request and the completion request of the very prompt text it renders to."""
    chat = generation_body("chat", streamed)
    rendered = post_json(proxy_url + "/v1/internal/chat-prompt", chat)
    completion = generation_body("completions", streamed, prompt={"prompt": rendered["prompt"], "stop": rendered["stop"]})
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
        results += [
            summarise_capacity(endpoint, streamed, clients, GENERATED_TOKENS, windows[endpoint])
            for endpoint in ("completions", "chat")
        ]
    return results
