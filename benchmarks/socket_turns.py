"""Part 2f: a 10-turn agent session over one Responses WebSocket, against the same turns over HTTP.

Each turn asks the instant upstream for SOCKET_TOKENS tokens with `store: false`. Over HTTP the client
sends the whole conversation again every turn (what an agent does without a store) as streamed POSTs
on one keep-alive connection; over the socket it sends only the new message and `previous_response_id`
(the socket holds the rest). Both clients are written here on a plain socket, read in the thread that
times them (a library's client reading frames in a thread of its own would add a thread's wake-up to
the socket's first event, which is the client's and not the proxy's), and each session ends by closing
its connection and waiting for the proxy to close it too, so its last work is counted in its session.

Plan.socket_pairs pairs of sessions, the order within a pair alternating (HTTP first, then the socket
first), after WARM_UP_PAIRS not counted. Per session: the median time to first event of its turns,
and the proxy's CPU per turn, the session's CPU (handshake and teardown included) read in nanoseconds
from the scheduler (/proc/PID/task/TID/schedstat) over the turns. The row gives the median over the
sessions of each, with the sessions' quartiles as its spread, and the median of socket ÷ HTTP within the
pairs (two sessions back to back share the machine's load: on a busy machine this is the steadier figure).

What a socket turn did that an HTTP turn did not (the worker profiled over 1,000 turns of each, issue 50):
it skipped gunicorn's request parsing, WSGI environ and chunked framing, but added wsproto's parse of the
client's message (~25 µs) and simple-websocket's hand-over of it to the session (a second wake-up: the
socket's first event came later than HTTP's), wsproto's framing of every event (~15 µs each: the
socket's extra CPU), and the cutting of every event's SSE text back into events. Since: each event is
written as one whole frame straight to the client's socket (routes/responses_socket.text_frame), and a
socket's turn asks the app for bare events (services/inflight.BARE_EVENTS), so nothing is framed as SSE
to be cut again, and the client's messages are read by wsproto in the socket's own greenlet, when the
session asks (routes/responses_socket._ClientSocket: no reader thread, no second wake-up; a maintained
library's parse of what a client sends is worth its ~25 µs). Left per turn on purpose,
as over HTTP: the key, its limits and admission (a key revoked while its socket is open is refused at
the next response), the access record, and parsing and validating the request (the held turns are sent
as its input).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import time
from collections.abc import Callable

from .capacity import CapacityRig
from .processes import TasksCpu
from .results import SocketResult, percentile

SESSION_TURNS = 10
SOCKET_TOKENS = 16
WARM_UP_PAIRS = 5
TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")
Session = Callable[[str], tuple[list[float], int]]


def socket_row(rig: CapacityRig) -> SocketResult:
    """The same 10-turn session over HTTP and over one WebSocket, `rig.plan.socket_pairs` times each."""
    pairs = rig.plan.socket_pairs
    cpu = TasksCpu(rig.proxy.tree().pids())
    sessions: dict[str, Session] = {"http": http_session, "socket": socket_session}
    firsts: dict[str, list[float]] = {"http": [], "socket": []}  # ms, each session's median
    costs: dict[str, list[float]] = {"http": [], "socket": []}  # µs a turn, each session's
    errors = 0
    for pair in range(WARM_UP_PAIRS + pairs):
        for name in ("http", "socket") if pair % 2 == 0 else ("socket", "http"):
            before = cpu.nanoseconds()
            turns, failed = sessions[name](rig.proxy.url)
            used = cpu.nanoseconds() - before
            if pair >= WARM_UP_PAIRS:
                firsts[name].append(percentile(turns, 0.5) * 1000)
                costs[name].append(used / 1000 / SESSION_TURNS)
                errors += failed
    return SocketResult(
        SESSION_TURNS,
        percentile(firsts["http"], 0.5),
        percentile(firsts["socket"], 0.5),
        percentile(costs["http"], 0.5),
        percentile(costs["socket"], 0.5),
        errors,
        sessions=pairs,
        http_first_event_quartiles_ms=_quartiles(firsts["http"]),
        socket_first_event_quartiles_ms=_quartiles(firsts["socket"]),
        http_cpu_quartiles_us=_quartiles(costs["http"]),
        socket_cpu_quartiles_us=_quartiles(costs["socket"]),
        first_event_pair_ratios=_pair_ratios(firsts),
        cpu_pair_ratios=_pair_ratios(costs),
    )


def _quartiles(values: list[float]) -> list[float]:
    return [percentile(values, 0.25), percentile(values, 0.75)]


def _pair_ratios(values: dict[str, list[float]]) -> list[float]:
    """[p25, p50, p75] of socket ÷ HTTP over the pairs."""
    ratios = [socket / http for socket, http in zip(values["socket"], values["http"], strict=True)]
    return [percentile(ratios, 0.25), percentile(ratios, 0.5), percentile(ratios, 0.75)]


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
        _closed(connection, reader)
    return firsts, failed


def socket_session(url: str) -> tuple[list[float], int]:
    """(time to first event of each turn, turns that failed): one socket, previous_response_id each turn."""
    host, port = url.removeprefix("http://").split(":")
    firsts, failed, previous = [], 0, None
    with socket.create_connection((host, int(port))) as connection:
        reader = connection.makefile("rb")
        _handshake(connection, reader, host)
        for turn in range(SESSION_TURNS):
            event = {"type": "response.create", **_turn_body(), "input": turn_text(turn), "previous_response_id": previous}
            started = time.perf_counter()
            connection.sendall(_client_frame(json.dumps(event).encode()))
            message = json.loads(_read_message(reader))
            firsts.append(time.perf_counter() - started)
            while message["type"] not in TERMINAL:
                message = json.loads(_read_message(reader))
            response = message.get("response")
            failed += response is None or response["status"] == "failed"
            previous = response["id"] if response else None
        connection.sendall(_client_frame(struct.pack("!H", 1000), opcode=0x8))
        _closed(connection, reader)
    return firsts, failed


def _turn_body() -> dict:
    return {"model": "bench", "max_output_tokens": SOCKET_TOKENS, "temperature": 0, "store": False}


def _closed(connection: socket.socket, reader) -> None:
    """The client's end closed, and whatever the proxy still sends read until it closes its own."""
    connection.shutdown(socket.SHUT_WR)
    while reader.read(65536):
        pass


def _handshake(connection: socket.socket, reader, host: str) -> None:
    key = base64.b64encode(os.urandom(16)).decode()
    connection.sendall(
        f"GET /v1/responses HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    status = reader.readline()
    while reader.readline() not in (b"\r\n", b""):
        pass  # the headers
    if b" 101 " not in status:
        raise RuntimeError(f"the proxy answered the handshake with {status!r}")


def _client_frame(payload: bytes, opcode: int = 0x1) -> bytes:
    """One whole frame as a client sends it: masked (RFC 6455, 5.3)."""
    size = len(payload)
    head = bytes([0x80 | opcode])
    if size < 126:
        head += bytes([0x80 | size])
    elif size < 1 << 16:
        head += bytes([0x80 | 126]) + struct.pack("!H", size)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", size)
    mask = os.urandom(4)
    repeated = (mask * (size // 4 + 1))[:size]
    masked = (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(size, "big")
    return head + mask + masked


def _read_message(reader) -> bytes:
    """The next text message's payload (the proxy sends whole, unmasked, uncompressed frames)."""
    first, second = reader.read(2)
    size = second & 0x7F
    if size == 126:
        size = struct.unpack("!H", reader.read(2))[0]
    elif size == 127:
        size = struct.unpack("!Q", reader.read(8))[0]
    payload = reader.read(size)
    if first & 0x0F != 0x1:
        raise RuntimeError(f"expected a text message, got opcode {first & 0x0F}: {payload[:200]!r}")
    return payload


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
