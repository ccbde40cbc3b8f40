"""Part 1: real generation, the same requests to llama-server's own OpenAI API and through the proxy,
in alternating rounds."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .client import Connection, Sample, encode_post
from .processes import Service, system_busy_seconds
from .results import (
    GenerationResult,
    OutputCheck,
    percentile,
)
from .workload import GENERATED_TOKENS, PATHS, Plan, generation_body, mode_name, post_json


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
        return {
            "direct": self.direct.tree().cpu_seconds(),
            "proxy": self.proxy.tree().cpu_seconds(),
            "client": time.process_time(),
            "system": system_busy_seconds(),
            "time": time.perf_counter(),
        }


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


async def compare_generation(
    rig: GenerationRig, endpoint: str, streamed: bool, clients: int, rounds: int, deadline: float
) -> list[GenerationResult]:
    """The direct and the proxy result of one workload, measured in alternating rounds."""
    before = rig.snapshot()
    outcome = await AlternatingRounds(rig, endpoint, streamed, clients, deadline).run(rounds)
    return summarise_rounds(endpoint, streamed, clients, outcome, other_cpu_share(before, rig.snapshot()))


async def generation_table(rig: GenerationRig, progress: Callable[[str], None]) -> list[GenerationResult]:
    """Every workload (endpoint x streamed x clients); each gets an equal share of the time left."""
    workloads = [
        (endpoint, streamed, clients, rounds)
        for clients, rounds in rig.plan.rounds_per_clients
        for endpoint in PATHS
        for streamed in (True, False)
    ]
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


def summarise_rounds(endpoint: str, streamed: bool, clients: int, outcome: Rounds, other_cpu: float) -> list[GenerationResult]:
    proxy_count = len(outcome.samples["proxy"])
    proxy_ms = outcome.proxy_cpu_seconds * 1000 / proxy_count if proxy_count else math.nan
    results = [
        summarise_generation(
            endpoint, streamed, clients, target, outcome.samples[target], other_cpu, proxy_ms if target == "proxy" else None
        )
        for target in ("direct", "proxy")
    ]
    for result in results:
        result.cut_short = outcome.cut_short
    return results


def summarise_generation(
    endpoint: str, streamed: bool, clients: int, target: str, samples: list[Sample], other_cpu: float, proxy_cpu_ms: float | None
) -> GenerationResult:
    ttfts = [s.ttft * 1000 for s in samples]
    totals = [s.total * 1000 for s in samples]
    return GenerationResult(
        endpoint,
        streamed,
        clients,
        target,
        len(samples),
        ttft_p50_ms=percentile(ttfts, 0.5),
        ttft_p95_ms=percentile(ttfts, 0.95),
        total_p50_ms=percentile(totals, 0.5),
        total_p95_ms=percentile(totals, 0.95),
        tokens_per_s=percentile([GENERATED_TOKENS / s.total for s in samples], 0.5),
        other_cpu_share=other_cpu,
        proxy_cpu_ms_per_request=proxy_cpu_ms,
    )
