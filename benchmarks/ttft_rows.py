"""The TTFT rows (issue 54): what the proxy adds to the first token on every API, each against
llama-server on its nearest path, one client, a real llama-server (`--threads` one less than the cores).

| proxy | llama-server direct |
| --- | --- |
| `/v1/completions` | `/v1/completions` |
| `/v1/chat/completions`, `/v1/messages`, `/v1/responses`, `/api/chat` | `/v1/chat/completions` |

Requests go in pairs, direct and through the proxy one after the other, the order swapped every other
pair, and the APIs take turns (their order reversed every other round), so that whatever the machine
does meanwhile falls on both sides of a pair alike. The added time is the median of the pairs'
differences. Its agreement: the pairs split into two halves (pairs 0-1, 4-5, ... and 2-3, 6-7, ...: each
half has both orders alike), the added time of each, and how far apart they are; the rounds go on until
every API's halves agree within the plan's tolerance (0.3 ms), or the plan's most pairs. Two whole runs
differ less than two halves do (each half has half the pairs).

The prompt is the same in every request of a path (so llama.cpp's prompt cache holds all but its last
token, on both sides alike) and the answer 4 tokens: the first token is what is measured. Each side's
clock starts before its connection to the server it asks is made: llama-server closes the connection
of every streamed answer, so a direct request connects anew (inside its clock), as the proxy does for
its own request upstream; the client's connection to the proxy stays open (gunicorn keeps it).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from .client import Connection, FirstTextWatch, carries_text, encode_post
from .ollama_rows import OLLAMA_PATH, LineTextWatch
from .processes import Service
from .results import TargetCheck, TtftRow
from .tables import number, table
from .workload import CHAT_MESSAGES, PATHS, PROMPT, SEED

TOKENS = 4  # generated per request: the first is measured, the rest end the answer soon
ADDED_GOAL_MS = 1.0  # at most, at p50, on every API (issue 54)
CHAT = PATHS["chat"]


@dataclass(frozen=True)
class TtftPlan:
    min_pairs: int = 60  # per API, before the halves are compared
    max_pairs: int = 400  # per API, at most (the halves may not agree on a busy machine)
    step: int = 20  # pairs per API between two comparisons of the halves
    tolerance_ms: float = 0.3  # the halves of every API within this of each other: done

    @classmethod
    def quick(cls) -> TtftPlan:
        """`scripts/bench --quick`: fewer pairs at most (about a minute), the same stopping rule."""
        return cls(min_pairs=30, max_pairs=90, step=15)


def has_openai_text(data: dict) -> bool:
    """An OpenAI chat or text completion chunk with generated text."""
    return carries_text(b"data: " + json.dumps(data).encode())


def has_anthropic_text(data: dict) -> bool:
    return data.get("type") == "content_block_delta" and bool((data.get("delta") or {}).get("text"))


def has_responses_text(data: dict) -> bool:
    return data.get("type") == "response.output_text.delta" and bool(data.get("delta"))


def frame_data(frame: bytes) -> dict | None:
    """The JSON object of an SSE frame's `data:` line (after an `event:` line or not); None for a
    frame without one ([DONE], a comment)."""
    for line in frame.split(b"\n"):
        if line.startswith(b"data: {"):
            return json.loads(line[6:])
    return None


class EventTextWatch(FirstTextWatch):
    """FirstTextWatch for any SSE dialect: the first frame whose data `has_text` says carries text."""

    def __init__(self, has_text: Callable[[dict], bool]):
        super().__init__()
        self.has_text = has_text

    def feed(self, data: bytes) -> None:
        if self.seen_at is not None:
            return
        *frames, self.pending = (self.pending + data).split(b"\n\n")
        if any(self.has_text(payload) for payload in map(frame_data, frames) if payload is not None):
            self.seen_at = time.perf_counter()


@dataclass(frozen=True)
class Api:
    """One API of the proxy and the llama-server path it is measured against."""

    path: str
    body: dict
    watch: Callable[[], FirstTextWatch]
    direct_path: str
    direct_body: dict

    def watch_of(self, side: str) -> FirstTextWatch:
        """The first text's watch of one side: the API's own, or (direct) llama-server's OpenAI stream."""
        return self.watch() if side == "proxy" else EventTextWatch(has_openai_text)


def chat_body() -> dict:
    return {"messages": CHAT_MESSAGES, "max_tokens": TOKENS, "temperature": 0, "seed": SEED, "stream": True}


def apis(model: str) -> list[Api]:
    """The five APIs, the proxy serving the real llama-server as `model`."""
    completion = {"prompt": PROMPT, "max_tokens": TOKENS, "temperature": 0, "seed": SEED, "stream": True}
    openai = lambda: EventTextWatch(has_openai_text)  # noqa: E731 - a factory per request
    return [
        Api("/v1/completions", {"model": model, **completion}, openai, PATHS["completions"], {"model": "bench", **completion}),
        Api(CHAT, {"model": model, **chat_body()}, openai, CHAT, {"model": "bench", **chat_body()}),
        Api(
            "/v1/messages",
            {"model": model, "messages": CHAT_MESSAGES, "max_tokens": TOKENS, "temperature": 0, "stream": True},
            lambda: EventTextWatch(has_anthropic_text),
            CHAT,
            {"model": "bench", **chat_body()},
        ),
        Api(
            "/v1/responses",
            {
                "model": model,
                "input": CHAT_MESSAGES,
                "max_output_tokens": TOKENS,
                "temperature": 0,
                "stream": True,
                "store": False,
            },
            lambda: EventTextWatch(has_responses_text),
            CHAT,
            {"model": "bench", **chat_body()},
        ),
        Api(
            OLLAMA_PATH,
            {
                "model": model,
                "messages": CHAT_MESSAGES,
                "stream": True,
                "options": {"num_predict": TOKENS, "temperature": 0, "seed": SEED},
            },
            LineTextWatch,
            CHAT,
            {"model": "bench", **chat_body()},
        ),
    ]


def pair_order(round_number: int) -> tuple[str, str]:
    """Which side goes first in a round's pair: direct, then the proxy, swapped every other round."""
    return ("direct", "proxy") if round_number % 2 == 0 else ("proxy", "direct")


def api_order(names: list[str], round_number: int) -> list[str]:
    """The APIs' turns in a round, reversed every other round (ABBA)."""
    return names if round_number % 2 == 0 else names[::-1]


def settled(rows: list[TtftRow], plan: TtftPlan) -> bool:
    """Whether to stop: the plan's most pairs reached, or (past its fewest) every API's halves agree."""
    if min((row.attempts() for row in rows), default=0) >= plan.max_pairs:
        return True
    return min((len(row.direct_ms) for row in rows), default=0) >= plan.min_pairs and all(
        row.agreement_ms() <= plan.tolerance_ms for row in rows
    )


async def _ttft(connection: Connection, request: bytes, watch: FirstTextWatch, side: str) -> float | None:
    """The time to the first text (ms) of one whole 200 stream, from before its connection is made;
    None for an error or no text. llama-server closes the connection of every streamed answer, so a
    request to it connects anew, as any client of it does (the proxy too, for its request upstream):
    the direct side's connection is made inside the clock, not reopened outside it (client.py's retry
    of a connection closed while idle restarts the clock after connecting)."""
    if side == "direct":
        connection.close()
    started = time.perf_counter()
    try:
        sample = await connection.send(request, watch_text=watch)
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        connection.close()
        return None
    return (watch.seen_at - started) * 1000 if sample.status == 200 and watch.seen_at is not None else None


async def measure_rows(llama: Service, proxy: Service, model: str, plan: TtftPlan, progress) -> list[TtftRow]:
    measured = apis(model)
    rows = {api.path: TtftRow(api.path, api.direct_path) for api in measured}
    by_path = {api.path: api for api in measured}
    requests = {
        api.path: {
            "direct": encode_post(llama.port, api.direct_path, api.direct_body),
            "proxy": encode_post(proxy.port, api.path, api.body),
        }
        for api in measured
    }
    connections = {"direct": Connection(llama.port), "proxy": Connection(proxy.port)}
    started = time.perf_counter()
    try:
        for api in measured:  # warm-up: connections, the prompt cache of each path, the proxy's first requests
            for side in ("direct", "proxy"):
                await _ttft(connections[side], requests[api.path][side], api.watch_of(side), side)
        round_number = 0
        while not settled(list(rows.values()), plan):
            for path in api_order(list(rows), round_number):
                taken = {}
                for side in pair_order(round_number):
                    taken[side] = await _ttft(connections[side], requests[path][side], by_path[path].watch_of(side), side)
                rows[path].add(taken["direct"], taken["proxy"])
            round_number += 1
            if round_number % plan.step == 0:
                progress(f"  ttft rows: {round_number} pairs each, halves {_halves_note(rows.values())}")
    finally:
        for connection in connections.values():
            connection.close()
    load = ", ".join(f"{n:.2f}" for n in os.getloadavg())
    for row in rows.values():
        row.load_average = load
        row.seconds = time.perf_counter() - started
    return list(rows.values())


def _halves_note(rows) -> str:
    return ", ".join(f"{row.api} ±{row.agreement_ms():.2f} ms" for row in rows)


def measure(llama: Service, proxy: Service, model: str, plan: TtftPlan, progress) -> list[TtftRow]:
    progress("ttft rows: every API's first token, through the proxy and direct, in alternating pairs")
    return asyncio.run(measure_rows(llama, proxy, model, plan, progress))


def targets(rows: list[TtftRow]) -> list[TargetCheck]:
    if not rows:
        return []
    return [
        TargetCheck(
            "TTFT added on every API vs llama-server on its nearest path, p50 of the pairs (issue 54)",
            f"≤ {ADDED_GOAL_MS:g} ms each",
            "; ".join(f"{row.api} {row.added_ms():+.2f} ms" for row in rows),
            all(row.added_ms() <= ADDED_GOAL_MS and row.errors == 0 for row in rows),
        ),
        TargetCheck(
            "TTFT rows: the two halves of each API's pairs agree (issue 54)",
            f"≤ {TtftPlan.tolerance_ms:g} ms apart",
            "; ".join(f"{row.api} {row.agreement_ms():.2f} ms" for row in rows),
            all(row.agreement_ms() <= TtftPlan.tolerance_ms for row in rows),
        ),
    ]


def section(rows: list[TtftRow], note: str = "") -> str:
    if not rows:
        return ""
    return "\n\n".join(
        [
            "## Time to the first token added on every API (issue 54)",
            "One client, a real llama-server; each API of the proxy against llama-server on its nearest path, in "
            "pairs (direct and proxy back to back, the order swapped every other pair, the APIs taking turns). "
            "Added: the median of the pairs' differences. Halves: the added time of each half of the pairs "
            "(pairs 0-1, 4-5, ... and 2-3, 6-7, ...), and how far apart they are; pairs are added until every "
            "API's halves agree within 0.3 ms, or the plan's most." + note,
            table(
                [
                    "API",
                    "llama-server path",
                    "direct TTFT p50 ms",
                    "proxy TTFT p50 ms",
                    "added ms",
                    "halves ms",
                    "halves apart ms",
                    "pairs",
                    "errors",
                    "load after",
                ],
                [
                    [
                        f"`{row.api}`",
                        f"`{row.direct_path}`",
                        number(row.direct_p50_ms(), 2),
                        number(row.proxy_p50_ms(), 2),
                        f"{row.added_ms():+.2f}",
                        " / ".join(f"{half:+.2f}" for half in row.halves_ms()),
                        number(row.agreement_ms(), 2),
                        str(len(row.direct_ms)),
                        str(row.errors),
                        row.load_average,
                    ]
                    for row in rows
                ],
            ),
        ]
    )
