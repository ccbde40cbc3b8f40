"""Parts 2b and 2c: chat streams against an upstream that paces its tokens like a real model, and
many such streams through one worker."""

from __future__ import annotations

import asyncio
import math
import time

from .capacity import CapacityRig
from .client import Connection, FrameCounter, closed_loop, encode_post
from .processes import Service
from .results import (
    ManyStreamsResult,
    PacedResult,
)
from .workload import GENERATED_TOKENS, PATHS, generation_body

PACED_TOKEN_INTERVAL_MS = 8.0  # about llama-server's pace with the test model here (~120 tokens/s)
# (concurrent streams, ms between two tokens of one stream): the loads of issue 13
PACED_LOADS = ((16, 8.0), (64, 8.0), (256, 40.0))
MANY_STREAMS_INTERVAL_MS, MANY_STREAMS_TOKENS = 100.0, 32


async def paced_row(
    rig: CapacityRig, worker_class: str, clients: int, interval_ms: float, new_connections: bool = False
) -> PacedResult:
    """`clients` chat streams back to back against an upstream sending a token every `interval_ms`
    (as a real model does; every token wakes the proxy): CPU per relayed frame, and the frames
    relayed as a share of what the streams would carry if the proxy added no wait at all. With
    `new_connections`, each stream on a connection of its own (curl, many SDKs, agents' side requests)."""
    request = encode_post(rig.proxy.port, PATHS["chat"], generation_body("chat", True))
    window = await closed_loop(
        rig.proxy.port,
        request,
        clients,
        rig.plan.paced_seconds,
        rig.plan.warmup_seconds,
        rig.snapshot,
        stagger=interval_ms / 1000,
        new_connections=new_connections,
    )
    # A chat stream of T tokens is T + 2 frames (the role first, the finish last) and takes T + 1
    # intervals upstream (the final event is paced too); only the T text frames count as tokens.
    tokens = window.spent("frames") * GENERATED_TOKENS / (GENERATED_TOKENS + 2)
    would_carry = clients * GENERATED_TOKENS / ((GENERATED_TOKENS + 1) * interval_ms / 1000)
    spent = {name: window.spent(name) for name in ("proxy", "upstream", "client", "system")}
    other = max(spent["system"] - spent["proxy"] - spent["upstream"] - spent["client"], 0.0)
    return PacedResult(
        worker_class,
        clients,
        interval_ms,
        window.seconds,
        tokens / window.seconds,
        tokens / window.seconds / would_carry,
        spent["proxy"] * 1e6 / tokens if tokens else math.nan,
        spent["proxy"] / window.seconds,
        other / window.seconds,
        sum(s.status != 200 for s in window.samples),
        "new per stream" if new_connections else "keep-alive",
    )


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
    return ManyStreamsResult(
        streams,
        tokens,
        interval_ms,
        whole,
        seconds,
        (tokens + 1) * interval_ms / 1000 + interval_ms / 1000,
        cpu * 1e6 / (counter.frames * tokens / (tokens + 2)) if counter.frames else math.nan,
        upstream.tree().cpu_seconds() - upstream_before,
        proxy.tree().peak_rss_mb(),
    )
