"""A compact HTTP/1.1 load client on asyncio raw streams.

Keep-alive connections, Content-Length and chunked responses, the time of the first frame that
carries generated text, and closed-loop runs of N concurrent clients. It does as little work per
byte as it can, so that on a small machine the server under test stays the bottleneck.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass


def encode_post(port: int, path: str, body: dict) -> bytes:
    """The bytes of a keep-alive POST of `body` as JSON."""
    payload = json.dumps(body).encode()
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: */*\r\nContent-Length: {len(payload)}\r\n\r\n"
    ).encode() + payload


@dataclass
class Sample:
    """One request's outcome; times are time.perf_counter() seconds."""

    status: int
    started: float
    first_text: float  # when the first generated text arrived (= finished when not streamed)
    finished: float
    events: int  # SSE data frames other than [DONE]
    body: bytes | None = None

    @property
    def ttft(self) -> float:
        return self.first_text - self.started

    @property
    def total(self) -> float:
        return self.finished - self.started


def count_events(body: bytes) -> int:
    frames = body.count(b"data: ")
    return frames - 1 if body.endswith(b"data: [DONE]\n\n") else frames


def carries_text(frame: bytes) -> bool:
    """Whether an SSE frame of an OpenAI stream holds generated text (not a role or finish chunk)."""
    if not frame.startswith(b"data: {"):
        return False
    choices = json.loads(frame[6:]).get("choices") or [{}]
    choice = choices[0]
    return bool(choice.get("text") or (choice.get("delta") or {}).get("content"))


class FirstTextWatch:
    """Fed the body as it arrives; notes when the first frame with generated text is complete."""

    def __init__(self):
        self.pending = b""
        self.seen_at: float | None = None

    def feed(self, data: bytes) -> None:
        if self.seen_at is not None:
            return
        *frames, self.pending = (self.pending + data).split(b"\n\n")
        if any(carries_text(frame) for frame in frames):
            self.seen_at = time.perf_counter()


def parse_response_head(head: bytes) -> tuple[int, int | None, bool, bool]:
    """(status, content length or None, chunked?, server closes?) of a response head."""
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length, chunked, closes = None, False, False
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "transfer-encoding":
            chunked = "chunked" in value
        elif name == "connection":
            closes = value == "close"
    return status, length, chunked, closes


@dataclass
class FrameCounter:
    """SSE frames received so far by every connection that shares it, counted as they arrive, so
    that a measurement window sees the frames relayed inside it (not whole requests that ended in it)."""

    frames: int = 0


class Connection:
    """One keep-alive connection to 127.0.0.1:port, opened on first use and after a close."""

    def __init__(self, port: int, counter: FrameCounter | None = None):
        self.port = port
        self.counter = counter
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def send(
        self,
        request: bytes,
        *,
        watch_text: bool | FirstTextWatch = False,
        keep_body: bool = False,
        arrivals: list[float] | None = None,
    ) -> Sample:
        """Send one encoded request and read its whole response; `arrivals`, if given, gets the time
        each chunk of a chunked answer arrived. `watch_text`: True for an OpenAI stream's first text,
        or a watch of another stream's (benchmarks/ollama_rows.py's NDJSON)."""
        started, head = await self._send_head(request)
        status, length, chunked, closes = parse_response_head(head)
        watch = FirstTextWatch() if watch_text is True else (watch_text or None)
        body = await self._read_body(length, chunked, watch, arrivals)
        finished = time.perf_counter()
        if closes or length is None and not chunked:
            self.close()
        first_text = watch.seen_at if watch and watch.seen_at else finished
        return Sample(status, started, first_text, finished, count_events(body), body if keep_body else None)

    async def _send_head(self, request: bytes) -> tuple[float, bytes]:
        """Send the request: (when it was sent, the response head). A keep-alive connection that
        the server closed while it was idle is reopened once, as HTTP clients do."""
        reused = self.writer is not None
        try:
            return await self._try_send(request)
        except (asyncio.IncompleteReadError, ConnectionError):
            self.close()
            if not reused:
                raise
        return await self._try_send(request)

    async def _try_send(self, request: bytes) -> tuple[float, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port, limit=1 << 20)
        started = time.perf_counter()
        self.writer.write(request)
        return started, await self.reader.readuntil(b"\r\n\r\n")

    async def _read_body(
        self, length: int | None, chunked: bool, watch: FirstTextWatch | None, arrivals: list[float] | None = None
    ) -> bytes:
        if chunked:
            return await self._read_chunks(watch, arrivals)
        if length is None:
            return await self.reader.read()
        return await self.reader.readexactly(length)

    async def _read_chunks(self, watch: FirstTextWatch | None, arrivals: list[float] | None = None) -> bytes:
        parts = []
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            if size == 0:
                await self.reader.readuntil(b"\r\n")  # the end of the (empty) trailer section
                return b"".join(parts)
            data = (await self.reader.readexactly(size + 2))[:-2]
            if arrivals is not None:
                arrivals.append(time.perf_counter())
            parts.append(data)
            if self.counter:
                self.counter.frames += data.count(b"data: ")
            if watch:
                watch.feed(data)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


@dataclass
class LoadWindow:
    """What a closed-loop run saw inside its measurement window."""

    samples: list[Sample]
    seconds: float
    before: dict[str, float]  # snapshot() at the window's start
    after: dict[str, float]  # snapshot() at its end

    def spent(self, name: str) -> float:
        return self.after[name] - self.before[name]


async def closed_loop(
    port: int,
    request: bytes,
    clients: int,
    seconds: float,
    warmup: float,
    snapshot: Callable[[], dict[str, float]],
    stagger: float = 0.0,
    new_connections: bool = False,
    abandon: bool = False,
) -> LoadWindow:
    """`clients` connections each sending `request` back to back; the samples that finished in
    the `seconds` after a `warmup`, with `snapshot()` (e.g. CPU times) and the SSE frames received
    so far ("frames") taken at both ends. Client i starts i * stagger / clients seconds late, so
    that paced streams do not all deliver their tokens at the same instants. With `new_connections`
    each request goes on a connection of its own, closed after it (as curl and many SDKs do). With
    `abandon`, the requests still running when the window ends are cut (their connections closed), not
    waited for: a server slower than the load would otherwise hold the next window back by minutes."""
    samples: list[Sample] = []
    running = True
    counter = FrameCounter()

    async def one_client(position: int) -> None:
        await asyncio.sleep(position * stagger / clients)
        connection = Connection(port, counter)
        try:
            while running:
                samples.append(await connection.send(request))
                if new_connections:
                    connection.close()
        finally:
            connection.close()

    def snapshot_with_frames() -> dict[str, float]:
        return {**snapshot(), "frames": counter.frames}

    tasks = [asyncio.create_task(one_client(position)) for position in range(clients)]
    await asyncio.sleep(warmup + stagger)
    window_start, before = time.perf_counter(), snapshot_with_frames()
    await asyncio.sleep(seconds)
    window_end, after = time.perf_counter(), snapshot_with_frames()
    running = False
    if abandon:
        for task in tasks:
            task.cancel()
    await asyncio.gather(*tasks, return_exceptions=abandon)
    inside = [s for s in samples if window_start <= s.finished <= window_end]
    return LoadWindow(inside, window_end - window_start, before, after)


async def open_loop(port: int, request: bytes, rate: float, seconds: float, warmup: float) -> list[Sample]:
    """Requests sent at a fixed `rate` per second whatever the answers take (as the gateway
    benchmarks do), each on an idle keep-alive connection or a new one; the samples of those
    sent after `warmup`."""
    idle: list[Connection] = []
    samples: list[Sample] = []
    started = time.perf_counter()

    async def one_request(measured: bool) -> None:
        connection = idle.pop() if idle else Connection(port)
        sample = await connection.send(request)
        idle.append(connection)
        if measured:
            samples.append(sample)

    tasks = []
    total = int(rate * (warmup + seconds))
    for number in range(total):
        delay = started + number / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one_request(number >= rate * warmup)))
    await asyncio.gather(*tasks)
    for connection in idle:
        connection.close()
    return samples
