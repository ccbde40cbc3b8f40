"""Part 6: the recorded agent turns (agent_turns.py replays them in a process of its own), and 16
paced streams beside them: whether a turn stalls the streams."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from . import agent_turns as agent_turns_module
from .client import Connection, encode_post
from .processes import Service
from .results import (
    AgentTurnResult,
    StalledStreamsResult,
    percentile,
)
from .workload import PATHS, ROOT, Plan, generation_body

STALLED_TURN = "claude_code_turn"  # replayed back to back beside the paced streams


def agent_props(props_path: Path) -> Path:
    """The upstream's /props with the fixtures' model: Qwen2.5's template (Hermes tool calls), a
    context an agent's prompt fits in, a build that takes lazy grammars."""
    props = json.loads(props_path.read_text())
    props.update(
        {
            "chat_template": (ROOT / "conversation_templates" / "qwen2.5.jinja").read_text(),
            "bos_token": "",
            "eos_token": "<|im_end|>",
            "build_info": "b7000-bench",
        }
    )
    props.setdefault("default_generation_settings", {})["n_ctx"] = 262144
    path = props_path.with_name(props_path.stem + "-agent.json")
    path.write_text(json.dumps(props))
    return path


def agent_turns(upstream_url: str, rounds: int) -> list[AgentTurnResult]:
    """Each recorded turn replayed in a process of its own, as a gevent worker runs the app."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.agent_turns", "--upstream", upstream_url, "--rounds", str(rounds)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )
    if done.returncode != 0:
        raise RuntimeError(f"agent turns failed: {done.stderr[-2000:]}")
    return [AgentTurnResult(**json.loads(line)) for line in done.stdout.splitlines() if line.startswith("{")]


def replayable_turn(proxy_url: str, name: str) -> bytes:
    """The recorded turn as an encoded POST the proxy accepts (agent_turns.replayable)."""
    fixture = agent_turns_module.load(name)

    def accepted(body: dict) -> bool:
        # One line, so the formatter keeps the noqa on the line the finding is reported on.
        headers = {"Content-Type": "application/json"}
        request = urllib.request.Request(proxy_url + fixture["path"], data=json.dumps(body).encode(), headers=headers)  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - loopback only
                response.read()
                return response.status == 200
        except urllib.error.HTTPError:
            return False

    body, _ = agent_turns_module.replayable(fixture["body"], accepted)
    return encode_post(int(proxy_url.rsplit(":", 1)[1]), fixture["path"], body)


def inter_token_gaps(arrivals: list[float]) -> list[float]:
    """The gaps between a stream's token chunks, in ms (not the wait for the first one)."""
    return [(later - earlier) * 1000 for earlier, later in zip(arrivals[1:], arrivals[2:], strict=False)]


async def paced_gaps(
    port: int, request: bytes, clients: int, seconds: float, interval_ms: float, stop: asyncio.Event
) -> list[float]:
    """Inter-token gaps of `clients` paced streams, back to back, for `seconds` (streams started after it are not)."""
    gaps: list[float] = []
    deadline = time.perf_counter() + seconds

    async def one_client(position: int) -> None:
        await asyncio.sleep(position * interval_ms / 1000 / clients)
        connection = Connection(port)
        try:
            while time.perf_counter() < deadline:
                arrivals: list[float] = []
                await connection.send(request, arrivals=arrivals)
                gaps.extend(inter_token_gaps(arrivals))
        finally:
            connection.close()

    await asyncio.gather(*(one_client(position) for position in range(clients)))
    stop.set()
    return gaps


async def turns_back_to_back(port: int, turn: bytes, stop: asyncio.Event) -> tuple[int, int]:
    """(turns answered, turns refused) sent one after the other on one connection until `stop`."""
    connection, answered, refused = Connection(port), 0, 0
    try:
        while not stop.is_set():
            sample = await connection.send(turn)
            answered += sample.status == 200
            refused += sample.status != 200
    finally:
        connection.close()
    return answered, refused


async def stalled_streams(
    proxy: Service, turn: bytes, plan: Plan, clients: int = 16, interval_ms: float = 8.0
) -> StalledStreamsResult:
    """Paced streams alone, then beside recorded turns replayed back to back, in alternating windows
    (`plan.stalled_rounds` of each, so that the machine's other load hits both): the gap between tokens."""
    request = encode_post(proxy.port, PATHS["chat"], generation_body("chat", True))
    window = plan.stalled_seconds / plan.stalled_rounds
    alone: list[float] = []
    beside: list[float] = []
    cpu = {"alone": 0.0, "beside": 0.0}
    answered = refused = 0
    for _ in range(plan.stalled_rounds):
        before = proxy.tree().cpu_seconds()
        alone += await paced_gaps(proxy.port, request, clients, window, interval_ms, asyncio.Event())
        cpu["alone"] += proxy.tree().cpu_seconds() - before
        stop = asyncio.Event()
        before = proxy.tree().cpu_seconds()
        gaps, (done, failed) = await asyncio.gather(
            paced_gaps(proxy.port, request, clients, window, interval_ms, stop), turns_back_to_back(proxy.port, turn, stop)
        )
        cpu["beside"] += proxy.tree().cpu_seconds() - before
        beside, answered, refused = beside + gaps, answered + done, refused + failed
    return StalledStreamsResult(
        clients,
        interval_ms,
        STALLED_TURN,
        len(alone),
        len(beside),
        percentile(alone, 0.99),
        percentile(beside, 0.99),
        max(alone, default=math.nan),
        max(beside, default=math.nan),
        answered,
        refused,
        (cpu["beside"] - cpu["alone"]) * 1000 / answered if answered else math.nan,
    )
