"""The rerank row (issue 40): the same rerank request to llama-server's own `/v1/rerank` and through the
proxy's, window by window (ABBA), so that the machine's load falls on both alike.

The reranker is the tests' (scripts/make_test_reranker.py: a 2-layer BERT cross-encoder with random
weights, written once into the provisioning cache), so llama.cpp's own work per request is small and what
the proxy adds shows rather than hides behind a large model. Judged:

- the proxy's CPU (its whole process tree) per request ÷ the direct call's time (p50): how much of a
  rerank's time the proxy's own work would cost a machine whose cores the model does not need;
- time per request p50 through the proxy ÷ direct (1 client: the proxy's work is on the request's path).
"""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
from pathlib import Path

from .client import closed_loop, encode_post
from .processes import Service, free_port
from .ratios import RatioPlan, load_now, passes, settle
from .results import RerankRow, TargetCheck, percentile
from .servers import ROOT, _temporary_file, proxy
from .tables import number, table

TARGETS = ("direct", "proxy")
MODEL = "ranker"
QUERY = "which animal eats bamboo in the mountains of china"
# 8 documents of a few dozen tokens: a RAG stack's usual page of candidates, short enough for the test model
DOCUMENTS = [
    f"document {n}: " + " ".join(words)
    for n, words in enumerate(
        [
            ("the giant panda is a bear native to south central china and eats bamboo almost exclusively",),
            ("red pandas live in the eastern himalayas and southwestern china",),
            ("a cat is a small domesticated carnivorous mammal kept as a pet",),
            ("bamboo is a fast growing grass used for building and for food",),
            ("the mountains of sichuan hold most of the wild panda population",),
            ("koalas eat eucalyptus leaves and sleep most of the day",),
            ("rice is grown in flooded fields across much of asia",),
            ("zoos around the world keep pandas on loan from china",),
        ]
    )
]
CPU_SHARE_GOAL, TIME_GOAL = 0.5, 1.5


def reranker_path() -> Path:
    """The test reranker GGUF, written once into the provisioning cache (as the tests do)."""
    cache = Path(os.environ.get("API_LIKE_OAI_CACHE") or Path.home() / ".cache" / "api-like-oai")
    path = cache / "models" / "test-reranker-bert.gguf"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(ROOT / "scripts" / "make_test_reranker.py"), str(path)], check=True)
    return path


def llama_ranker(binary: str) -> Service:
    port = free_port()
    return Service(
        "llama-ranker",
        [
            binary,
            "--model",
            str(reranker_path()),
            "--reranking",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--ctx-size",
            "2048",
            "--parallel",
            "2",
            "--threads",
            "1",
        ],
        port,
    )


def ranker_proxy(upstream_url: str) -> Service:
    """The proxy serving the reranker by configuration (`capabilities: [rerank]`), as a user would."""
    config = _temporary_file(
        "rerank", ".yaml", f"models:\n  {MODEL}:\n    upstreams: [{upstream_url}]\n    capabilities: [rerank]\n"
    )
    return proxy(upstream_url, "--config", str(config))


def body(model: str | None) -> dict:
    return {**({"model": model} if model else {}), "query": QUERY, "documents": DOCUMENTS, "top_n": 3}


async def rerank_row(llama: Service, front: Service, plan: RatioPlan) -> RerankRow:
    """One client, each target for a window at a time: the time of each request, and the proxy's CPU
    per finished request in its windows."""
    requests = {
        "direct": encode_post(llama.port, "/v1/rerank", body(None)),
        "proxy": encode_post(front.port, "/v1/rerank", body(MODEL)),
    }
    times: dict[str, list[float]] = {target: [] for target in TARGETS}
    cpu, counted, errors = 0.0, 0, 0
    for target in passes(TARGETS, plan.rounds * 2):
        window = await closed_loop(
            (llama if target == "direct" else front).port,
            requests[target],
            1,
            plan.window_seconds,
            plan.warmup_seconds,
            lambda: {"cpu": front.tree().cpu_seconds()},
        )
        done = [sample for sample in window.samples if sample.status == 200]
        errors += len(window.samples) - len(done)
        times[target] += [(sample.finished - sample.started) * 1000 for sample in done]
        if target == "proxy":
            cpu, counted = cpu + window.spent("cpu"), counted + len(window.samples)
        await settle(front)
    return RerankRow(
        "8 documents, top_n 3, 1 client",
        {target: percentile(values, 0.5) for target, values in times.items()},
        cpu * 1e6 / counted if counted else math.nan,
        {target: len(values) for target, values in times.items()},
        errors,
        load_now(),
    )


def measure(binary: str, plan: RatioPlan, progress) -> list[RerankRow]:
    """llama-server with the test reranker and a proxy in front of it, started for this row alone."""
    progress("rerank row: /v1/rerank through the proxy vs llama-server's own, the test reranker")
    llama = llama_ranker(binary)
    front = ranker_proxy(llama.url)
    try:
        llama.start()
        front.start()
        return [asyncio.run(rerank_row(llama, front, plan))]
    finally:
        front.stop()
        llama.stop()


def targets(rows: list[RerankRow]) -> list[TargetCheck]:
    if not rows:
        return []
    return [
        TargetCheck(
            "rerank: the proxy's CPU per request ÷ the direct call's time",
            f"≤ {CPU_SHARE_GOAL}x",
            "; ".join(f"{row.name}: {number(row.cpu_share, 2)}x" for row in rows),
            all(row.cpu_share <= CPU_SHARE_GOAL for row in rows),
        ),
        TargetCheck(
            "rerank: time per request through the proxy ÷ direct, p50",
            f"≤ {TIME_GOAL}x",
            "; ".join(f"{row.name}: {number(row.time_ratio, 2)}x" for row in rows),
            all(row.time_ratio <= TIME_GOAL for row in rows),
        ),
    ]


def section(rows: list[RerankRow]) -> str:
    if not rows:
        return ""
    cells = [
        [
            row.name,
            number(row.time_ms["direct"], 2),
            number(row.time_ms["proxy"], 2),
            f"{number(row.time_ratio, 2)}x",
            f"{number(row.proxy_cpu_us, 0)} µs",
            f"{number(row.cpu_share, 2)}x",
            f"{row.requests['direct']} / {row.requests['proxy']}",
            str(row.errors),
            row.load_average,
        ]
        for row in rows
    ]
    return "\n\n".join(
        [
            "## Reranking through the proxy (issue 40)",
            "The same `/v1/rerank` request to llama-server's own endpoint and through the proxy, window by window "
            "(ABBA), on the test reranker (scripts/make_test_reranker.py: a 2-layer BERT with random weights, so "
            "llama.cpp's own work is small and the proxy's shows). Time per request (p50, ms) and the proxy's CPU "
            "(its process tree) per request, restated against the direct call's time:",
            table(
                [
                    "row",
                    "direct ms",
                    "proxy ms",
                    "proxy ÷ direct",
                    "proxy CPU/req",
                    "CPU ÷ direct time",
                    "requests (direct / proxy)",
                    "errors",
                    "load after",
                ],
                cells,
            ),
        ]
    )
