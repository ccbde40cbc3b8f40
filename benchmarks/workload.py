"""What every part sends and how much it measures: the prompt, the request bodies, the Plan."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

GENERATED_TOKENS = 64
SEED = 42
PROMPT = "The history of the Roman Empire"
CHAT_MESSAGES = [{"role": "user", "content": "Write a long story about a dragon who learns to bake bread."}]


MANY_STREAMS = 1000  # concurrent paced streams in part 2c
PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
ROOT = Path(__file__).resolve().parent.parent
# The POST helpers build their request on one line, so the formatter keeps their noqa on the reported line.
JSON_HEADERS = {"Content-Type": "application/json"}


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
    socket_pairs: int = 150  # part 2f: sessions over HTTP and over a WebSocket, one of each a pair (~20 s)

    @classmethod
    def quick(cls) -> Plan:
        return cls(
            rounds_per_clients=((1, 2), (4, 1)),
            capacity_seconds=0.5,
            warmup_seconds=0.2,
            repeats=1,
            startup_runs=1,
            generation_budget_seconds=30.0,
            paced_seconds=1.0,
            gateway_seconds=0.5,
            many_streams=100,
            agent_turn_rounds=5,
            stalled_seconds=2.0,
            stalled_rounds=2,
            socket_pairs=3,
        )


def mode_name(streamed: bool) -> str:
    return "streamed" if streamed else "whole"


def generation_body(endpoint: str, streamed: bool, tokens: int = GENERATED_TOKENS, prompt: dict | None = None) -> dict:
    """The request both targets get: greedy, seeded, `tokens` long."""
    content = prompt or ({"prompt": PROMPT} if endpoint == "completions" else {"messages": CHAT_MESSAGES})
    return {"model": "bench", **content, "max_tokens": tokens, "temperature": 0, "seed": SEED, "stream": streamed}


def post_json(url: str, body: dict, timeout: float = 120.0) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=JSON_HEADERS)  # noqa: S310 - loopback only
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - loopback only
        return json.load(response)


def post_stream(url: str, body: dict, timeout: float = 60.0) -> bytes:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=JSON_HEADERS)  # noqa: S310 - loopback only
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
        return response.read()
