"""The Ollama rows (issue 38): the same chat through the proxy's /api/chat and its /v1/chat/completions,
window by window (ABBA), so that the machine's load falls on both alike.

- CPU per request against the instant fake upstream, streamed and not: /api/chat ÷ the OpenAI route
  (target ≤ 1.1x: a dialect costs a translation and its own shape, not a second engine);
- TTFT against the real llama-server, 1 client: each route's time to the first generated text less
  llama-server direct's (target: /api/chat adds within 0.2 ms of what the OpenAI route adds).
"""

from __future__ import annotations

import asyncio
import json
import math
import time

from .client import Connection, FirstTextWatch, Sample, closed_loop, encode_post
from .processes import Service
from .ratios import INSTANT, REAL, RatioPlan, answered, load_now, passes, settle
from .results import OllamaRow, TargetCheck, percentile
from .tables import number, table
from .workload import PATHS, generation_body

OLLAMA_PATH = "/api/chat"
ROUTES = ("openai", "ollama")
CPU_GOAL, TTFT_GOAL_MS = 1.1, 0.2


def ollama_body(streamed: bool, model: str) -> dict:
    """generation_body's chat in Ollama's words: the same messages, length, sampling and seed."""
    chat = generation_body("chat", streamed)
    return {
        "model": model,
        "messages": chat["messages"],
        "stream": streamed,
        "options": {"num_predict": chat["max_tokens"], "temperature": chat["temperature"], "seed": chat["seed"]},
    }


def requests_for(port: int, model: str, streamed: bool) -> dict[str, bytes]:
    return {
        "openai": encode_post(port, PATHS["chat"], {**generation_body("chat", streamed), "model": model}),
        "ollama": encode_post(port, OLLAMA_PATH, ollama_body(streamed, model)),
    }


async def cpu_row(proxy: Service, streamed: bool, clients: int, plan: RatioPlan) -> OllamaRow:
    """Each route under `clients` closed-loop clients for a window at a time: the proxy's CPU per finished
    request (the windows wait for the requests in flight, so both routes are counted alike)."""
    requests = requests_for(proxy.port, INSTANT, streamed)
    spent = {route: [0.0, 0] for route in ROUTES}
    errors = 0
    for route in passes(ROUTES, plan.rounds * 2):
        window = await closed_loop(
            proxy.port,
            requests[route],
            clients,
            plan.window_seconds,
            plan.warmup_seconds,
            lambda: {"cpu": proxy.tree().cpu_seconds()},
        )
        spent[route][0] += window.spent("cpu")
        spent[route][1] += len(window.samples)
        errors += sum(s.status != 200 for s in window.samples)
        await settle(proxy)
    name = f"{'streamed 64 tokens' if streamed else 'non-streamed'}, instant upstream, {clients} clients"
    return OllamaRow(
        name,
        {route: cpu * 1e6 / count if count else math.nan for route, (cpu, count) in spent.items()},
        requests={route: count for route, (_, count) in spent.items()},
        errors=errors,
        load_average=load_now(),
    )


class LineTextWatch(FirstTextWatch):
    """FirstTextWatch for Ollama's NDJSON: the first line whose message carries text."""

    def feed(self, data: bytes) -> None:
        if self.seen_at is not None:
            return
        *lines, self.pending = (self.pending + data).split(b"\n")
        if any(json.loads(line).get("message", {}).get("content") for line in lines if line.strip()):
            self.seen_at = time.perf_counter()


async def ollama_answered(connection: Connection, request: bytes) -> Sample | None:
    """ratios.answered for an NDJSON stream: the sample of a whole 200 answer, its first text's time
    from LineTextWatch; None for another status or a stream cut short."""
    try:
        sample = await connection.send(request, watch_text=LineTextWatch())
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        connection.close()
        return None
    return sample if sample.status == 200 else None


async def ttft_row(llama: Service, proxy: Service, rounds: int) -> OllamaRow:
    """One client, rounds of one streamed chat per target (llama-server direct, each route of the proxy),
    ABBA, the first round a warm-up: TTFT p50 of each."""
    targets = {
        "direct": (llama, encode_post(llama.port, PATHS["chat"], {**generation_body("chat", True)})),
        **{route: (proxy, request) for route, request in requests_for(proxy.port, REAL, True).items()},
    }
    connections = {target: Connection(service.port) for target, (service, _) in targets.items()}
    ttfts: dict[str, list[float]] = {target: [] for target in targets}
    errors = 0
    try:
        for index, target in enumerate((*targets, *passes(tuple(targets), rounds))):
            send = ollama_answered if target == "ollama" else answered
            sample = await send(connections[target], targets[target][1])
            errors += sample is None
            if sample is not None and index >= len(targets):
                ttfts[target].append(sample.ttft * 1000)
    finally:
        for connection in connections.values():
            connection.close()
    return OllamaRow(
        "real generation, streamed chat, 1 client",
        ttft_ms={target: percentile(values, 0.5) for target, values in ttfts.items()},
        requests={target: len(values) for target, values in ttfts.items()},
        errors=errors,
        load_average=load_now(),
    )


def measure(llama: Service, proxy: Service, plan: RatioPlan, progress) -> list[OllamaRow]:
    rows = []
    for streamed in (False, True):
        progress(f"ollama row: {'streamed' if streamed else 'non-streamed'} /api/chat vs /v1/chat/completions")
        rows.append(asyncio.run(cpu_row(proxy, streamed, plan.instant_clients, plan)))
    progress("ollama row: TTFT through /api/chat and /v1/chat/completions, real generation")
    rows.append(asyncio.run(ttft_row(llama, proxy, plan.generation_rounds)))
    return rows


def signed(value: float) -> str:
    """A difference with its sign (+0.55, -0.25); – when not measured."""
    return "–" if math.isnan(value) else f"{value:+.2f}"


def targets(rows: list[OllamaRow]) -> list[TargetCheck]:
    cpu = [row for row in rows if row.cpu_us]
    ttft = [row for row in rows if row.ttft_ms]
    checks = []
    if cpu:
        checks.append(
            TargetCheck(
                "Ollama's /api/chat: CPU per request ÷ /v1/chat/completions",
                f"≤ {CPU_GOAL}x",
                "; ".join(f"{row.name}: {number(row.cpu_ratio, 2)}x" for row in cpu),
                all(row.cpu_ratio <= CPU_GOAL for row in cpu),
            )
        )
    for row in ttft:
        gap = row.ttft_added_ms("ollama") - row.ttft_added_ms("openai")
        checks.append(
            TargetCheck(
                "Ollama's /api/chat: TTFT added beyond the OpenAI route's",
                f"≤ {TTFT_GOAL_MS} ms",
                f"{row.name}: /api/chat {signed(row.ttft_added_ms('ollama'))} ms, "
                f"/v1/chat/completions {signed(row.ttft_added_ms('openai'))} ms "
                f"({number(gap, 2)} ms apart)",
                gap <= TTFT_GOAL_MS,
            )
        )
    return checks


def section(rows: list[OllamaRow], note: str = "") -> str:
    if not rows:
        return ""
    cpu = [
        [
            row.name,
            f"{number(row.cpu_us['openai'], 0)} µs",
            f"{number(row.cpu_us['ollama'], 0)} µs",
            f"{number(row.cpu_ratio, 2)}x",
            f"{row.requests['openai']} / {row.requests['ollama']}",
            str(row.errors),
            row.load_average,
        ]
        for row in rows
        if row.cpu_us
    ]
    ttft = [
        [
            row.name,
            number(row.ttft_ms["direct"], 2),
            signed(row.ttft_added_ms("openai")),
            signed(row.ttft_added_ms("ollama")),
            str(min(row.requests.values())),
            str(row.errors),
            row.load_average,
        ]
        for row in rows
        if row.ttft_ms
    ]
    return "\n\n".join(
        [
            "## Ollama's API beside the OpenAI route (issue 38)",
            "The same chat through the proxy's `/api/chat` and its `/v1/chat/completions`, window by window (ABBA)."
            + note
            + " CPU of the proxy's process tree per finished request:",
            table(["row", "/v1/chat/completions", "/api/chat", "ratio", "requests", "errors", "load after"], cpu),
            "Time to the first generated text (p50, ms), llama-server direct and what each route adds to it:",
            table(
                [
                    "row",
                    "direct TTFT ms",
                    "/v1/chat/completions added",
                    "/api/chat added",
                    "requests each",
                    "errors",
                    "load after",
                ],
                ttft,
            ),
        ]
    )
