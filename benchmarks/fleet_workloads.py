"""The fleet's rows with real models (issue 37, section 6), beside fleet.py's hop and placement rows.

1. Affinity: agent sessions (a long system prompt of their own, a growing conversation, streamed turns)
   on SmolLM2 loaded on two boxes (`boxes: 2`), every turn through one front, then every session's turns
   alternating between two fronts: the share of turns 2..N on the session's first box, the share of
   their prompt tokens read from the cache, and the time to the first token at p50.
2. Swaps: clients each alternating SmolLM2 and gemma-3-270m for a fixed time through a front, with one
   box whose budget holds one model (every alternation may swap), then with two such boxes (placement
   keeps each model on a box of its own): answered, failed, latency at p50.
"""

from __future__ import annotations

import http.client
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .keys import _redis
from .processes import Service, free_port
from .routing import session_prefix, stream_turn, turn_body

SECRET = "bench-fleet-secret-0123456789"  # noqa: S105 - a throwaway fleet's, on the loopback
SMOL_ARGS = '[--ctx-size, "4096", --parallel, "2", --threads, "1"]'


@dataclass(frozen=True)
class WorkloadPlan:
    sessions: int = 6
    turns: int = 8
    prefix_tokens: int = 600
    reply_tokens: int = 16
    swap_clients: int = 4
    swap_seconds: float = 60.0

    @classmethod
    def quick(cls) -> WorkloadPlan:
        return cls(sessions=3, turns=5, swap_clients=2, swap_seconds=20.0)


@dataclass
class AffinityRow:
    fronts: int
    turns: int = 0  # turns 2..N of every session
    stayed: int = 0  # of them, on the session's first box
    prompt_tokens: int = 0
    cached_tokens: int = 0
    ttft_ms: list[float] = field(default_factory=list)

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.ttft_ms) if self.ttft_ms else 0.0


@dataclass
class SwapRow:
    boxes: int
    answered: int = 0
    failed: int = 0
    failures: dict[int, int] = field(default_factory=dict)  # status (0: no answer) -> count
    latencies_ms: list[float] = field(default_factory=list)

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.latencies_ms) if self.latencies_ms else 0.0


class Fleet:
    """A Redis, boxes and fronts on 127.0.0.1 (each on its own port), stopped together."""

    def __init__(self, work: Path):
        self.work, self.services, self.redis = work, [], None
        (work / "secret").write_text(SECRET)

    def __enter__(self) -> Fleet:
        self.redis = _redis()
        return self

    def flags(self) -> list[str]:
        return ["--fleet", f"redis://127.0.0.1:{self.redis[1]}/0", "--fleet-secret-file", str(self.work / "secret")]

    def box(self, name: str, config: str, llama_server: str, budget: int) -> Service:
        (self.work / f"{name}.yaml").write_text(config)
        port = free_port()
        return self._start(
            Service(
                f"fleet-{name}",
                [
                    sys.executable,
                    "-m",
                    "api_like_oai",
                    "--port",
                    str(port),
                    "--config",
                    str(self.work / f"{name}.yaml"),
                    "--llama-server",
                    llama_server,
                    "--memory-budget",
                    str(budget),
                    *self.flags(),
                    "--advertise",
                    f"http://127.0.0.1:{port}",
                ],
                port,
                ready_path="/v1/models",
            )
        )

    def front(self, name: str) -> Service:
        port = free_port()
        return self._start(
            Service(
                f"fleet-{name}",
                [sys.executable, "-m", "api_like_oai", "--port", str(port), *self.flags()],
                port,
                ready_path="/v1/models",
            )
        )

    def _start(self, service: Service) -> Service:
        self.services.append(service)
        return service.start()

    def __exit__(self, *_):
        for service in reversed(self.services):
            service.stop()
        if self.redis is not None:
            self.redis[0].terminate()
            self.redis[0].wait(10)


def _post(url: str, path: str, body: dict, timeout: float = 600) -> tuple[int, bytes, dict]:
    connection = http.client.HTTPConnection(url.removeprefix("http://"), timeout=timeout)
    try:
        connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        answer = connection.getresponse()
        return answer.status, answer.read(), dict(answer.getheaders())
    finally:
        connection.close()


def _until(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the fleet did not get ready")
        time.sleep(0.2)


def _cards(front: Service) -> list[dict]:
    connection = http.client.HTTPConnection(front.url.removeprefix("http://"), timeout=10)
    connection.request("GET", "/v1/models")
    cards = json.loads(connection.getresponse().read())["data"]
    connection.close()
    return cards


def _loaded_on(front: Service, model: str) -> int:
    card = next((card for card in _cards(front) if card["id"] == model), None)
    return sum(box["state"] == "loaded" for box in card["status"].get("boxes", ())) if card else 0


# --- 1. affinity ---------------------------------------------------------------------------------------


def affinity_rows(llama_server: str, smol: str, plan: WorkloadPlan, progress) -> list[AffinityRow]:
    config = f"models:\n  bench:\n    model: {smol}\n    args: {SMOL_ARGS}\n    memory: 300\n    boxes: 2\n"
    with Fleet(Path(tempfile.mkdtemp(prefix="api-like-oai-bench-fleet-"))) as fleet:
        boxes = [fleet.box(f"box{n}", config, llama_server, 400) for n in range(2)]
        fronts = [fleet.front(f"front{n}") for n in range(2)]
        for box in boxes:
            status, text, _ = _post(box.url, "/models/load", {"model": "bench"})
            assert status == 200, text
        _until(lambda: all(_loaded_on(front, "bench") == 2 for front in fronts))
        rows = []
        for count in (1, 2):
            progress(f"fleet affinity: {plan.sessions} sessions of {plan.turns} turns through {count} front(s)")
            row = AffinityRow(count)
            for session in range(plan.sessions):
                _session(fronts[:count], 100 * count + session, plan, row)
            rows.append(row)
    return rows


def _session(fronts: list[Service], session: int, plan: WorkloadPlan, row: AffinityRow) -> None:
    messages = [{"role": "system", "content": session_prefix(session, plan.prefix_tokens)}]
    first_box = None
    for turn in range(1, plan.turns + 1):
        messages.append({"role": "user", "content": f"Question {turn}: which of the notes matter most, and why?"})
        body = turn_body(messages, plan.reply_tokens)
        ttft_ms, usage, reply, box = _stream_turn(fronts[turn % len(fronts)], body)
        messages.append({"role": "assistant", "content": reply})
        if turn == 1:
            first_box = box
            continue
        row.turns += 1
        row.stayed += box == first_box
        row.prompt_tokens += usage.get("prompt_tokens", 0)
        row.cached_tokens += (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        row.ttft_ms.append(ttft_ms)


def _stream_turn(front: Service, body: dict) -> tuple[float, dict, str, str]:
    """(ms to the first generated text, the usage, the reply, the box that answered) of one turn."""
    headers: dict = {}
    seconds, usage, reply = stream_turn(front.port, body, headers)
    return seconds * 1000, usage, reply, headers.get("X-Fleet-Box", "")


# --- 2. swaps ------------------------------------------------------------------------------------------


def swap_rows(llama_server: str, smol: str, gemma: str, plan: WorkloadPlan, progress) -> list[SwapRow]:
    config = (
        f"models:\n  smol:\n    model: {smol}\n    args: {SMOL_ARGS}\n    memory: 300\n"
        f"  gemma:\n    model: {gemma}\n    args: {SMOL_ARGS}\n    memory: 400\n"
    )
    rows = []
    for count in (1, 2):
        progress(
            f"fleet swaps: {plan.swap_clients} clients alternating two models for {plan.swap_seconds:g} s, "
            f"{count} box(es) with memory for one model each"
        )
        with Fleet(Path(tempfile.mkdtemp(prefix="api-like-oai-bench-fleet-"))) as fleet:
            for n in range(count):
                fleet.box(f"box{n}", config, llama_server, 450)
            front = fleet.front("front")
            _until(lambda front=front, count=count: _boxes_in(front) == count)
            rows.append(_alternate(front, count, plan))
    return rows


def _boxes_in(front: Service) -> int:
    return max((len(card["status"].get("boxes", ())) for card in _cards(front) if card.get("status")), default=0)


def _alternate(front: Service, boxes: int, plan: WorkloadPlan) -> SwapRow:
    row, lock = SwapRow(boxes), threading.Lock()
    stop_at = time.monotonic() + plan.swap_seconds

    def client(number: int) -> None:
        models = ("smol", "gemma") if number % 2 == 0 else ("gemma", "smol")
        asked = 0
        while time.monotonic() < stop_at:
            body = {
                "model": models[asked % 2],
                "max_tokens": plan.reply_tokens,
                "temperature": 0,
                "messages": [{"role": "user", "content": f"Name a colour ({random.random():.6f})."}],
            }
            began = time.perf_counter()
            try:
                status = _post(front.url, "/v1/chat/completions", body)[0]
            except OSError:
                status = 0
            with lock:
                if status == 200:
                    row.answered += 1
                    row.latencies_ms.append((time.perf_counter() - began) * 1000)
                else:
                    row.failed += 1
                    row.failures[status] = row.failures.get(status, 0) + 1
            asked += 1

    with ThreadPoolExecutor(plan.swap_clients) as pool:
        list(pool.map(client, range(plan.swap_clients)))
    return row


def markdown(affinity: list[AffinityRow], swaps: list[SwapRow], load_average: str) -> str:
    lines = [
        "",
        "### Cache affinity across fronts (real SmolLM2 on two boxes)",
        "",
        f"Load average at the start {load_average}. Each session: a system prompt of its own, turns 2..N "
        "counted; through two fronts its turns alternate between them.",
        "",
        "| fronts | turns | on the session's box | prompt tokens from the cache | TTFT p50 (ms) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for row in affinity:
        lines.append(
            f"| {row.fronts} | {row.turns} | {100 * row.stayed / max(row.turns, 1):.0f}% | "
            f"{100 * row.cached_tokens / max(row.prompt_tokens, 1):.1f}% | {row.p50_ms:.0f} |"
        )
    lines += [
        "",
        "### A swap workload over two boxes against one (SmolLM2 and gemma-3-270m, memory for one a box)",
        "",
        "| boxes | answered | failed (by status) | latency p50 (ms) |",
        "|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {row.boxes} | {row.answered} | {row.failed}"
        f"{' (' + ', '.join(f'{n}× {code}' for code, n in sorted(row.failures.items())) + ')' if row.failed else ''}"
        f" | {row.p50_ms:.0f} |"
        for row in swaps
    ]
    return "\n".join(lines) + "\n"
