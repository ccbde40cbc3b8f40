"""Part 2e: a stored Responses answer against a stateless one."""

from __future__ import annotations

import json
import statistics
import urllib.error
import urllib.request

from .capacity import CapacityRig
from .results import (
    StoreResult,
    percentile,
)
from .workload import CHAT_MESSAGES, GENERATED_TOKENS, post_json


async def store_row(rig: CapacityRig) -> StoreResult:
    """The same non-streamed Responses request (64 tokens from the instant upstream) with `store: true`
    (the proxy's SQLite store) and `store: false`, one client in alternating windows: what storing adds
    to the latency (p50 of every sample) and to the proxy's CPU per request (median of the windows)."""
    body = {"model": "bench", "input": CHAT_MESSAGES[0]["content"], "max_output_tokens": GENERATED_TOKENS, "temperature": 0}
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
    return StoreResult(
        1,
        percentile(latencies["stateless"], 0.5),
        percentile(latencies["stored"], 0.5),
        statistics.median(cpu["stateless"]),
        statistics.median(cpu["stored"]),
        retrievable,
        errors,
    )
