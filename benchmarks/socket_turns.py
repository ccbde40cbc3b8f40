"""Part 2f: a 10-turn agent session over one Responses WebSocket, against the same turns over HTTP.

Each turn asks the instant upstream for SOCKET_TOKENS tokens with `store: false`. Over HTTP the client
sends the whole conversation again every turn (what an agent does without a store); over the socket
it sends only the new message and `previous_response_id` (the socket holds the rest). Windows of
SESSIONS_PER_WINDOW sessions alternate, `repeats` of each: time to first event per turn (p50 of every
turn) and the proxy's CPU per turn (the median of the windows).
"""

from __future__ import annotations

import json
import socket
import statistics
import time
from collections.abc import Callable

from .capacity import CapacityRig
from .results import SocketResult, percentile

SESSION_TURNS = 10
SOCKET_TOKENS = 16
SESSIONS_PER_WINDOW = 10  # a window's CPU is read from clock ticks (10 ms): over 100 turns, 0.1 ms a turn
TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")


def socket_row(rig: CapacityRig) -> SocketResult:
    """The same 10-turn session over HTTP and over one WebSocket, `rig.plan.repeats` times each."""
    ttfe: dict[str, list[float]] = {"http": [], "socket": []}
    cpu: dict[str, list[float]] = {"http": [], "socket": []}
    errors = 0
    sessions: dict[str, Callable[[str], tuple[list[float], int]]] = {"http": http_session, "socket": socket_session}
    for _ in range(rig.plan.repeats):
        for name, session in sessions.items():
            before = rig.proxy.tree().cpu_seconds()
            for _ in range(SESSIONS_PER_WINDOW):
                firsts, failed = session(rig.proxy.url)
                ttfe[name] += [seconds * 1000 for seconds in firsts]
                errors += failed
            cpu[name].append((rig.proxy.tree().cpu_seconds() - before) * 1e6 / (SESSION_TURNS * SESSIONS_PER_WINDOW))
    return SocketResult(
        SESSION_TURNS,
        percentile(ttfe["http"], 0.5),
        percentile(ttfe["socket"], 0.5),
        statistics.median(cpu["http"]),
        statistics.median(cpu["socket"]),
        errors,
    )


def turn_text(turn: int) -> str:
    return f"Turn {turn}: go on with the story, one more paragraph."


def http_session(url: str) -> tuple[list[float], int]:
    """(time to first event of each turn, turns that failed): streamed POSTs, the history sent each time."""
    host, port = url.removeprefix("http://").split(":")
    history: list[dict] = []
    firsts, failed = [], 0
    with socket.create_connection((host, int(port))) as connection:
        reader = connection.makefile("rb")
        for turn in range(SESSION_TURNS):
            history.append({"role": "user", "content": turn_text(turn)})
            started = time.perf_counter()
            body = json.dumps({**_turn_body(), "input": history, "stream": True}).encode()
            head = f"POST /v1/responses HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            connection.sendall(head.encode() + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            first, response = _read_sse(reader)
            firsts.append(first - started)
            failed += response is None or response["status"] == "failed"
            history += (response or {}).get("output", [])
    return firsts, failed


def socket_session(url: str) -> tuple[list[float], int]:
    """(time to first event of each turn, turns that failed): one socket, previous_response_id each turn."""
    from websockets.sync.client import connect

    firsts, failed, previous = [], 0, None
    with connect(url.replace("http://", "ws://") + "/v1/responses", compression=None) as ws:
        for turn in range(SESSION_TURNS):
            event = {"type": "response.create", **_turn_body(), "input": turn_text(turn), "previous_response_id": previous}
            started = time.perf_counter()
            ws.send(json.dumps(event))
            message = json.loads(ws.recv())
            firsts.append(time.perf_counter() - started)
            while message["type"] not in TERMINAL:
                message = json.loads(ws.recv())
            response = message.get("response")
            failed += response is None or response["status"] == "failed"
            previous = response["id"] if response else None
    return firsts, failed


def _turn_body() -> dict:
    return {"model": "bench", "max_output_tokens": SOCKET_TOKENS, "temperature": 0, "store": False}


def _read_sse(reader) -> tuple[float, dict | None]:
    """(when the first event arrived, the final response) of one chunked SSE answer on `reader`."""
    status = reader.readline()
    while reader.readline() not in (b"\r\n", b""):
        pass  # the headers
    if b" 200 " not in status:
        raise RuntimeError(f"the proxy answered {status!r}")
    first, response, pending = None, None, b""
    while size := int(reader.readline().strip() or b"0", 16):
        pending += reader.read(size + 2)[:size]
        first = first or time.perf_counter()
        *frames, pending = pending.split(b"\n\n")
        for frame in frames:
            data = frame.partition(b"data: ")[2]
            if b'"response":' in data and json.loads(data)["type"] in TERMINAL:
                response = json.loads(data)["response"]
    reader.readline()  # the blank line after the last chunk
    return first or time.perf_counter(), response
