"""Part 2f: added latency at a fixed request rate (open loop), direct and through the proxy."""

from __future__ import annotations

from .client import encode_post, open_loop
from .processes import Service
from .results import (
    GatewayResult,
    percentile,
)
from .workload import GENERATED_TOKENS, PATHS, PROMPT, SEED, Plan, generation_body

GATEWAY_RATES = (100, 500)  # requests per second, open loop


async def gateway_row(proxy: Service, upstream: Service, rate: int, plan: Plan) -> GatewayResult:
    """Added latency at a fixed request rate (open loop), non-streamed, as gateways publish it:
    the same generation sent straight to the instant upstream and through the proxy, alternately."""
    through_proxy = encode_post(proxy.port, PATHS["completions"], generation_body("completions", False))
    direct = encode_post(
        upstream.port,
        "/completion",
        {"prompt": PROMPT, "n_predict": GENERATED_TOKENS, "temperature": 0, "seed": SEED, "stream": False},
    )
    latencies: dict[str, list[float]] = {"direct": [], "proxy": []}
    errors = 0
    for _ in range(plan.repeats):
        for name, port, request in (("direct", upstream.port, direct), ("proxy", proxy.port, through_proxy)):
            samples = await open_loop(port, request, rate, plan.gateway_seconds, plan.warmup_seconds)
            latencies[name] += [s.total * 1000 for s in samples]
            errors += sum(s.status != 200 for s in samples)
    return GatewayResult(
        rate,
        len(latencies["proxy"]),
        *(percentile(latencies[name], q) for name in ("direct", "proxy") for q in (0.5, 0.99)),
        errors,
    )
