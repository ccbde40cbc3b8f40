"""Agent turns: the requests Claude Code and Codex CLI sent (fixtures/), replayed to the proxy.

The replay itself runs in a process of its own, built as a gunicorn gevent worker is (gevent patches
the process first, the app is built after), in front of the fake upstream serving Qwen2.5's
template (the fixtures' model):

    python -m benchmarks.agent_turns --upstream http://127.0.0.1:PORT [--rounds 40]

prints one JSON object per fixture: the proxy's CPU per turn, cold (a tool list and system prompt
the worker has not seen: every one of them changed) and warm (the same turn again), and the
longest stretch of CPU the turn held the event loop (between two switches to gevent's hub). The
turn is called as the WSGI app, the way gunicorn calls it, so what is timed is the request path
(parse, validate, translate, render, grammar, send, relay the answer) without the HTTP parsing.
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from .results import ONE_LINE_CHAT

FIXTURES = Path(__file__).resolve().parent / "fixtures"
# The recorded turns, each the first of its session or one after two tool rounds.
TURNS = (
    "claude_code_turn",
    "claude_code_turn_tools",
    "codex_turn",
    "codex_turn_tools",
    "codex_turn_gpt55",
    "codex_turn_gpt55_custom_tool",
)
ANSWER_TOKENS = 2  # the fake answers every turn with two tokens: the request path is what is measured


def load(name: str) -> dict:
    """{"method", "path", "headers", "body"} as recorded."""
    return json.loads((FIXTURES / f"{name}.json").read_text())


# --- what the proxy refuses today -------------------------------------------------------------
# Parts of the recorded requests that the proxy answered with a 400 when these benchmarks were
# written (other branches make it accept them). `replayable` takes out only those the proxy still
# refuses, so once it accepts them all, the turns are replayed exactly as recorded.


def _filtered(key: str, keep: Callable[[dict], bool], change: Callable[[dict], dict] = lambda item: item):
    """A remover: the body with the items of its list `key` that `keep` rejects taken out, the others
    changed by `change`; a body without `key` as it is."""

    def remove(body: dict) -> dict:
        if key not in body:
            return body
        return {**body, key: [change(item) for item in body[key] if keep(item)]}

    return remove


def _without_tool_key(name: str) -> Callable[[dict], dict]:
    return _filtered("tools", lambda tool: True, lambda tool: {k: v for k, v in tool.items() if k != name})


def _without_tool_type(kind: str) -> Callable[[dict], dict]:
    return _filtered("tools", lambda tool: tool.get("type") != kind)


REFUSED_PARTS: dict[str, Callable[[dict], dict]] = {
    "mid-conversation system turns (with their output_config)": _filtered("messages", lambda m: m.get("role") != "system"),
    "tools[].defer_loading": _without_tool_key("defer_loading"),
    "client_metadata": lambda body: {k: v for k, v in body.items() if k != "client_metadata"},
    "namespace tools": _without_tool_type("namespace"),
    "web_search tools": _without_tool_type("web_search"),
    "custom tools": _without_tool_type("custom"),
    "tool_search tools": _without_tool_type("tool_search"),
    "custom_tool_call items": _filtered(
        "input", lambda item: item.get("type") not in ("custom_tool_call", "custom_tool_call_output")
    ),
}


def replayable(body: dict, accepted: Callable[[dict], bool]) -> tuple[dict, list[str]]:
    """The body with the fewest REFUSED_PARTS taken out that the proxy accepts (`accepted(body)`),
    and the names of those taken out: the body as recorded when the proxy takes it."""
    if accepted(body):
        return body, []
    removed = [name for name, remove in REFUSED_PARTS.items() if remove(body) != body]
    if not accepted(_without(body, removed)):
        raise RuntimeError("the proxy refuses the turn even without " + ", ".join(removed))
    for name in list(removed):  # put back what the proxy takes
        if accepted(_without(body, [n for n in removed if n != name])):
            removed.remove(name)
    return _without(body, removed), removed


def _without(body: dict, names: list[str]) -> dict:
    for name in names:
        body = REFUSED_PARTS[name](body)
    return body


def cold_variant(body: dict, mark: str) -> dict:
    """The turn with every tool and the system prompt changed (a `$comment` in each tool's schema,
    a line before the instructions), so nothing derived from them is found in a cache."""
    body = copy.deepcopy(body)
    for tool in body.get("tools", ()):
        schema = tool.get("input_schema") or tool.get("parameters")
        if isinstance(schema, dict):
            schema["$comment"] = mark
    if isinstance(body.get("system"), list) and body["system"]:
        body["system"][0] = {**body["system"][0], "text": f"{mark}\n{body['system'][0]['text']}"}
    for item in body.get("input", ())[:1]:
        if item.get("type") == "message" and isinstance(item.get("content"), list) and item["content"]:
            item["content"][0] = {**item["content"][0], "text": f"{mark}\n{item['content'][0].get('text', '')}"}
    return body


# --- the replay, in a process of its own ------------------------------------------------------


class LoopWatch:
    """The longest CPU stretch any greenlet but the hub ran between two switches (the event loop
    relays nothing meanwhile), from greenlet's switch trace, in this OS thread."""

    def __init__(self, hub):
        self.hub = hub
        self.longest = 0.0
        self.since = time.thread_time()

    def __call__(self, event: str, args) -> None:
        if event not in ("switch", "throw"):
            return
        now = time.thread_time()
        origin, _target = args
        if origin is not self.hub:
            self.longest = max(self.longest, now - self.since)
        self.since = now

    def reset(self) -> None:
        self.longest, self.since = 0.0, time.thread_time()


def wsgi_call(app, fixture: dict, body: bytes) -> tuple[str, bytes]:
    """The app's answer to the recorded request with `body`, as gunicorn would call it."""
    path, _, query = fixture["path"].partition("?")
    environ = {
        "REQUEST_METHOD": fixture["method"],
        "SCRIPT_NAME": "",
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8080",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": False,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
    }
    for name, value in fixture["headers"].items():
        if name.lower() not in ("content-type", "content-length"):
            environ["HTTP_" + name.upper().replace("-", "_")] = value
    status = []
    answer = app(environ, lambda line, headers, exc_info=None: status.append(line))
    try:
        content = b"".join(answer)
    finally:
        getattr(answer, "close", lambda: None)()
    return status[0], content


def measure_turn(app, watch: LoopWatch, fixture: dict, body: dict) -> tuple[float, float]:
    """(CPU seconds of the whole process, longest loop hold in seconds) of one turn."""
    encoded = json.dumps(body).encode()
    watch.reset()
    started = time.process_time()
    status, content = wsgi_call(app, fixture, encoded)
    spent = time.process_time() - started
    if not status.startswith("200"):
        raise RuntimeError(f"the proxy answered {status}: {content[:300]!r}")
    return spent, watch.longest


# The agent turns' neighbour (issue 29): a one-line chat, replayed to the same app the same way.
ONE_LINE_CHAT_REQUEST = {
    "method": "POST",
    "path": "/v1/chat/completions",
    "headers": {},
    "body": {"model": "qwen2.5", "messages": [{"role": "user", "content": "Say hello in one line."}]},
}


def replay(app, watch: LoopWatch, name: str, rounds: int, fixture: dict | None = None) -> dict:
    fixture = fixture or load(name)
    body, removed = replayable(fixture["body"], lambda b: wsgi_call(app, fixture, json.dumps(b).encode())[0][:3] == "200")
    cold = [measure_turn(app, watch, fixture, cold_variant(body, f"{name}, cold turn {n}")) for n in range(rounds)]
    measure_turn(app, watch, fixture, body)  # its tools and system prompt are now known
    warm = [measure_turn(app, watch, fixture, body) for _ in range(rounds)]
    return {
        "name": name,
        "bytes": len(json.dumps(fixture["body"])),
        "tools": len(body.get("tools", ())),
        "removed": removed,
        "rounds": rounds,
        "cold_cpu_ms": statistics.median(cpu for cpu, _ in cold) * 1000,
        "warm_cpu_ms": statistics.median(cpu for cpu, _ in warm) * 1000,
        "cold_hold_max_ms": max(hold for _, hold in cold) * 1000,
        "warm_hold_max_ms": max(hold for _, hold in warm) * 1000,
    }


def build_app(upstream: str):
    """The proxy's app as the gevent worker builds it: patched first, switch interval as worker.py sets."""
    from gevent import monkey

    monkey.patch_all()
    import greenlet
    from gevent import get_hub

    from api_like_oai import create_app
    from api_like_oai.arguments import build_parser, settings_from_args
    from api_like_oai.worker import SWITCH_INTERVAL_SECONDS

    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    app = create_app(settings_from_args(build_parser().parse_args(["--llama-api", upstream, "--log-level", "warning"])))
    watch = LoopWatch(get_hub())
    greenlet.settrace(watch)
    return app, watch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.agent_turns", description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="the fake llama.cpp's URL (serving Qwen2.5's template)")
    parser.add_argument("--rounds", type=int, default=40, help="cold and warm turns per fixture")
    parser.add_argument("--turns", nargs="*", default=list(TURNS))
    args = parser.parse_args(argv)
    app, watch = build_app(args.upstream)
    print(json.dumps(replay(app, watch, ONE_LINE_CHAT, args.rounds, ONE_LINE_CHAT_REQUEST)), flush=True)
    for name in args.turns:
        print(json.dumps(replay(app, watch, name, args.rounds)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
