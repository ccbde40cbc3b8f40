"""The routing row (issue 20): multi-turn sessions over two real llama-servers, least-busy routing
against prefix routing. Each session has its own long system prompt; the sessions run at once, each
sending its next turn (the whole history, as agents do) after a pause in which an agent would run a
tool (seeded, the same in both modes).
Per turn: the prompt tokens llama.cpp had to compute (prompt - cached, from the proxy's usage) and
the time to the first token."""

from __future__ import annotations

import http.client
import json
import os
import random
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .processes import Service, free_port
from .results import RoutingResult, RoutingTurn

WORDS = (
    "harbour ship crew cargo wind sail north island storm chart compass anchor tide rope deck mast "
    "captain journey coast light night morning river bridge stone village market bread fish wool "
    "timber iron salt map road winter spring summer autumn mountain valley forest field"
).split()
MODES = ("least-busy", "prefix")


@dataclass(frozen=True)
class RoutingPlan:
    sessions: int = 4
    turns: int = 8
    prefix_tokens: int = 3000
    reply_tokens: int = 16
    pause_seconds: tuple[float, float] = (0.5, 5.0)  # between an answer and the next turn, uniform
    slots: int = 2  # --parallel of each llama-server
    context: int = 16384  # --ctx-size of each: 8192 per slot

    @classmethod
    def quick(cls) -> RoutingPlan:
        return cls(turns=3, prefix_tokens=600)


def llama_servers(binary: str, model: str, plan: RoutingPlan) -> list[Service]:
    """Two llama-servers with one thread each: they share the machine's two cores."""
    flags = ["--ctx-size", str(plan.context), "--parallel", str(plan.slots), "--threads", "1", "--seed", "42"]
    services = []
    for _ in range(2):
        port = free_port()
        services.append(
            Service("llama-server", [binary, "--model", model, "--host", "127.0.0.1", "--port", str(port), *flags], port)
        )
    return services


def routed_proxy(upstreams: list[Service], routing: str) -> Service:
    config = Path(tempfile.gettempdir()) / f"api-like-oai-bench-routing-{os.getpid()}-{routing}.yaml"
    config.write_text(
        f"models:\n  bench:\n    upstreams: [{', '.join(u.url for u in upstreams)}]\n    template: auto\n    routing: {routing}\n"
    )
    port = free_port()
    # `python -m` from the checkout (scripts/bench runs there): this tree's code, whatever is installed
    return Service(
        "proxy",
        [sys.executable, "-m", "api_like_oai", "--config", str(config), "--port", str(port)],
        port,
        ready_path="/v1/models",
    )


def session_prefix(session: int, tokens: int) -> str:
    """A system prompt of its own for each session, about `tokens` long (SmolLM2: one token a word here)."""
    chooser = random.Random(1000 + session)
    words = [chooser.choice(WORDS) for _ in range(tokens - 12)]
    return f"Session {session}. Remember these notes and answer briefly.\n" + " ".join(words)


def turn_body(messages: list[dict], reply_tokens: int) -> dict:
    """A session's next turn: its conversation so far, streamed, greedy, with its usage at the end."""
    return {
        "model": "bench",
        "messages": messages,
        "max_tokens": reply_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def stream_turn(port: int, body: dict, headers: dict | None = None) -> tuple[float, dict, str]:
    """(seconds to the first generated text, the usage, the reply) of one streamed chat request; the
    answer's headers put in `headers` if given."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    started = time.perf_counter()
    connection.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    if headers is not None:
        headers.update(response.getheaders())
    first, usage, reply = None, {}, []
    for line in response:
        if not line.startswith(b"data: {"):
            continue
        chunk = json.loads(line[6:])
        text = chunk["choices"][0]["delta"].get("content") if chunk.get("choices") else None
        if text:
            first = first or time.perf_counter()
            reply.append(text)
        usage = chunk.get("usage") or usage
    connection.close()
    return (first or time.perf_counter()) - started, usage, "".join(reply)


def run_session(port: int, routing: str, session: int, plan: RoutingPlan) -> list[RoutingTurn]:
    messages = [{"role": "system", "content": session_prefix(session, plan.prefix_tokens)}]
    pauses = random.Random(2000 + session)
    turns = []
    for turn in range(1, plan.turns + 1):
        if turn > 1:
            time.sleep(pauses.uniform(*plan.pause_seconds))
        messages.append({"role": "user", "content": f"Question {turn}: which of the notes matter most, and why?"})
        body = turn_body(messages, plan.reply_tokens)
        ttft, usage, reply = stream_turn(port, body)
        messages.append({"role": "assistant", "content": reply})
        turns.append(
            RoutingTurn(
                routing,
                session,
                turn,
                usage.get("prompt_tokens", 0),
                usage.get("prompt_tokens_details", {}).get("cached_tokens", 0),
                ttft * 1000,
            )
        )
    return turns


def run_sessions(proxy: Service, routing: str, plan: RoutingPlan) -> list[RoutingTurn]:
    """Every session at once, a quarter of a second apart, each turn after the last one's answer."""

    def session(number: int) -> list[RoutingTurn]:
        time.sleep(number * 0.25)
        return run_session(proxy.port, routing, number, plan)

    with ThreadPoolExecutor(plan.sessions) as executor:
        return [turn for turns in executor.map(session, range(plan.sessions)) for turn in turns]


def routing_row(binary: str, model: str, plan: RoutingPlan, progress) -> RoutingResult:
    """Both modes, each on freshly started llama-servers (so no cache carries over between them)."""
    started = time.perf_counter()
    result = RoutingResult(
        plan.sessions,
        plan.turns,
        plan.prefix_tokens,
        plan.reply_tokens,
        plan.pause_seconds,
        f"--parallel {plan.slots} --ctx-size {plan.context} --threads 1",
        load_average=", ".join(f"{value:.2f}" for value in os.getloadavg()),
    )
    for routing in MODES:
        progress(f"routing: {plan.sessions} sessions x {plan.turns} turns, {routing}")
        servers = [server.start() for server in llama_servers(binary, model, plan)]
        proxy = routed_proxy(servers, routing).start()
        try:
            result.samples += run_sessions(proxy, routing, plan)
        finally:
            for service in (proxy, *servers):
                service.stop()
    result.seconds = time.perf_counter() - started
    return result
