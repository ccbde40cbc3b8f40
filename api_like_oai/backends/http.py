"""A small HTTP/1.1 client for the upstream: keep-alive sockets, one send per request, and chunked
bodies handed over chunk by chunk as they arrive, read straight from the socket (no file object).

Why not urllib3 (used until issue 13): it sends a request's head and body in two system calls
(each wakes the upstream on loopback), walks about twenty Python frames per request, and reads a
chunked stream through several layers per chunk. Here a request is one `sendall`, and a streamed
token is one `readline` + one `read` from a buffered socket, i.e. one `recv` (benchmarks/PROFILE.md).

It speaks what llama.cpp's server speaks: HTTP/1.1 with Content-Length or chunked bodies, plain or
TLS. The socket module is whatever the process has: with gevent's worker, the patched one.
"""

from __future__ import annotations

import collections
import functools
import ipaddress
import select
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from urllib.parse import urlsplit

from greenlet import getcurrent

from ..offload import event_loop_active

MAX_LINE = 65536
MAX_HEADERS = 100
RECEIVE_SIZE = 65536


class TransportError(Exception):
    """The base of what this module raises."""


class ConnectFailed(TransportError):
    """No connection could be made (refused, unreachable, name unknown); `__cause__` says why."""


class ConnectTimeout(TransportError):
    """The server did not accept the connection within the connect timeout."""


class ReadTimeout(TransportError):
    """The server sent nothing for the read timeout."""


class ConnectionLost(TransportError):
    """The connection closed or broke before the response was complete."""


class BadResponse(TransportError):
    """Bytes that are not HTTP."""


# Told of each exchange a request opens while it is set (services/door.py, for a background generation:
# the exchange to hang up at once when an interactive request preempts it).
OPENED: ContextVar[Callable[[Exchange], None] | None] = ContextVar("api_like_oai_opened", default=None)


class Exchange:
    """One request's hold on its connection, from sending to its answer's end: `hang_up()` ends it at once
    from another greenlet (its reader then meets ConnectionLost; the server sees the hang-up at its next
    write), and does nothing once the connection went back to the pool or was closed."""

    __slots__ = ("connection",)

    def __init__(self, connection: _Connection):
        self.connection: _Connection | None = connection

    def hang_up(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None:
            try:
                connection.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Response:
    """The status and headers of an answer; its body is read with read() or iter_bytes(). A body read to
    its end puts the connection back in the pool; close() drops it (the server sees the hang-up)."""

    __slots__ = ("status", "headers", "_connection", "_pool", "_chunked", "_length", "_keep_alive", "_exchange")

    def __init__(
        self,
        status: int,
        headers: dict[str, str],
        connection: _Connection,
        pool: HTTPClient,
        keep_alive: bool,
        exchange: Exchange | None = None,
    ):
        self.status = status
        self._exchange = exchange
        self.headers = headers
        self._connection: _Connection | None = connection
        self._pool = pool
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = headers.get("content-length")
        self._length = int(length) if length is not None and not self._chunked and length.isdigit() else None
        self._keep_alive = keep_alive and (self._chunked or self._length is not None)

    def read(self) -> bytes:
        """The whole body."""
        return b"".join(self.iter_bytes())

    def iter_bytes(self) -> Iterator[bytes]:
        """The body as it arrives: each HTTP chunk of a chunked body (llama.cpp sends one event per
        chunk, so a token is one recv and a few slices here), else pieces as received."""
        connection = self._connection
        if connection is None:
            return
        if not self._chunked:
            yield from self._pieces(connection)
            return
        while True:
            chunk = _buffered_chunk(connection)
            if chunk is None:
                connection.receive()
            elif chunk is _LAST_CHUNK:
                self._done()
                return
            else:
                yield chunk

    def iter_batches(self) -> Iterator[list[bytes]]:
        """The body as iter_bytes gives it, but each time every chunk already received (at least one):
        for a reader that takes several events in one step (a fold of a streamed answer)."""
        connection = self._connection
        if connection is None:
            return
        if not self._chunked:
            yield from ([piece] for piece in self._pieces(connection))
            return
        while True:
            batch = []
            while type(chunk := _buffered_chunk(connection)) is bytes:
                batch.append(chunk)
            if batch:
                yield batch
            if chunk is _LAST_CHUNK:
                self._done()
                return
            connection.receive()  # no whole chunk left in the buffer

    def _pieces(self, connection: _Connection) -> Iterator[bytes]:
        remaining = self._length
        while remaining is None or remaining > 0:
            piece = connection.take(remaining)
            if not piece:
                if remaining is None:
                    try:
                        connection.receive()
                    except ConnectionLost:  # the body ends with the connection
                        self.close()
                        return
                    continue
                connection.receive()
                continue
            if remaining is not None:
                remaining -= len(piece)
            yield piece
        self._done()

    def _done(self) -> None:
        if self._exchange is not None:
            self._exchange.connection = None  # no longer this request's to hang up
        connection, self._connection = self._connection, None
        if connection is not None:
            kept = self._keep_alive and connection.position == len(connection.buffer)
            if kept:
                self._pool.put_back(connection)
            else:
                connection.close()
            if self._chunked and self._pool.replaces_closed:
                self._pool.replenish(connection if kept else None)

    def close(self) -> None:
        """Drop the connection unless the body was read to its end (then it is back in the pool)."""
        if self._exchange is not None:
            self._exchange.connection = None
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


_LAST_CHUNK = object()  # _buffered_chunk: the body's end (its zero-size chunk and trailer) was read


def _buffered_chunk(connection: _Connection):
    """The next HTTP chunk's data if it is all in `connection`'s buffer (its position moved past it);
    None if more must be received first; _LAST_CHUNK at the body's end."""
    buffer, position = connection.buffer, connection.position
    line_end = buffer.find(b"\r\n", position)
    if line_end < 0:
        if len(buffer) - position > MAX_LINE:
            raise BadResponse("chunk size line too long")
        return None
    try:
        size = int(buffer[position:line_end].split(b";", 1)[0], 16)
    except ValueError:
        raise BadResponse("bad chunk size") from None
    if size == 0:
        connection.position = line_end + 2
        while connection.readline() not in (b"\r\n", b"\n"):
            pass  # trailer fields, unused
        return _LAST_CHUNK
    start = line_end + 2
    end = start + size
    if len(buffer) < end + 2:
        return None
    connection.position = end + 2
    return buffer[start:end]


class _Connection:
    """A socket and what was received on it but not read yet (buffer[position:])."""

    __slots__ = ("sock", "buffer", "position", "readable", "fresh_until")

    def __init__(self, sock: socket.socket, read_timeout: float):
        self.sock = sock
        self.buffer = b""
        self.position = 0
        self.readable = _LoopWait(sock, read_timeout) if event_loop_active() else None
        self.fresh_until = time.monotonic() + FRESH_SECONDS  # until it carries a request (send)

    def fresh(self) -> bool:
        """Whether no request went on it yet and it was opened less than FRESH_SECONDS ago: a server
        keeps a connection it has just accepted open (llama-server: seconds), so taking it needs no look
        for a hang-up (idle_and_open's system call, and the exception its nothing-to-read is, cost the
        first token some of its time: issue 54). If one was closed all the same, the request finds it so
        when it reads the answer's head and is sent again on a new connection (HTTPClient.request)."""
        return time.monotonic() < self.fresh_until

    def receive(self) -> None:
        """Wait for more bytes (one recv); ConnectionLost at the end of the stream."""
        if self.readable is not None:
            self.readable.wait()
        data = self.sock.recv(RECEIVE_SIZE)
        if not data:
            raise ConnectionLost("closed by the server")
        self.buffer = self.buffer[self.position :] + data if self.position < len(self.buffer) else data
        self.position = 0

    def readline(self) -> bytes:
        while True:
            end = self.buffer.find(b"\n", self.position)
            if end >= 0:
                line = self.buffer[self.position : end + 1]
                self.position = end + 1
                return line
            if len(self.buffer) - self.position > MAX_LINE:
                raise BadResponse("line too long")
            self.receive()

    def take(self, limit: int | None) -> bytes:
        """What is buffered, at most `limit` bytes (without waiting)."""
        end = len(self.buffer) if limit is None else min(len(self.buffer), self.position + limit)
        piece = self.buffer[self.position : end]
        self.position = end
        return piece

    def send(self, message: bytes, plain: bool) -> None:
        """The whole of `message`. On a `plain` (not TLS) socket under gevent, first with one send() on
        the OS socket: a request nearly always fits the socket's buffer, and gevent's sendall (a
        getsockopt call, a loop over 1 MiB pieces) on the way to the upstream cost the first token some
        of its time (issue 54). What one send() left, and any other socket's, goes by sendall."""
        self.fresh_until = 0.0  # used: the server may close it once it has answered
        raw = self._os_socket() if plain else None
        sent = 0
        if raw is not None:
            try:
                sent = raw.send(message)
            except BlockingIOError:
                sent = 0
        if sent < len(message):
            self.sock.sendall(memoryview(message)[sent:])

    def _os_socket(self) -> socket.socket | None:
        """The non-blocking OS socket under gevent's socket (None for any other: a plain socket with a timeout)."""
        raw = getattr(self.sock, "_sock", None)
        return raw if raw is not None and raw.gettimeout() == 0.0 else None

    def idle_and_open(self) -> bool:
        """Whether this idle connection can take a request: nothing arrived on it while it waited, not
        even the server's hang-up. llama-server closes the connection of every streamed answer once it
        has sent it (its `Keep-Alive` header notwithstanding), so the next request would otherwise be
        sent on a dead socket, find it closed, and connect again: a round trip through the event loop
        before the new connection, on the way to every streamed answer's first token (issue 54)."""
        raw = self._os_socket()
        try:
            if raw is not None:
                raw.recv(1, socket.MSG_PEEK)  # anything (a hang-up's b"" too) means it cannot be reused
                return False
            return not select.select([self.sock], [], [], 0)[0]
        except BlockingIOError:
            return True  # nothing to read: open and idle
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        if self.readable is not None:
            self.readable.close()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # at once, even if another reference keeps it open
        except OSError:
            pass
        self.sock.close()


class _LoopWait:
    """Under gevent: wait until a socket is readable, with the read timeout, straight on the event
    loop. gevent's own recv() on a socket with a timeout first tries to read (an EAGAIN system call
    and an exception, since a streamed token is never there yet), then builds a Timeout object for
    the wait; here a token costs one wait on a watcher kept for the connection, and one timer restart."""

    __slots__ = ("hub", "watcher", "timer", "timeout", "owner", "expire")

    def __init__(self, sock: socket.socket, timeout: float):
        from gevent import get_hub

        self.hub = get_hub()
        self.watcher = self.hub.loop.io(sock.fileno(), 1)  # 1: readable
        # A repeating timer, restarted with again(): libev's plain start() after stop() resumes the
        # time that was left, which made the read timeout a limit on the whole stream.
        self.timer = self.hub.loop.timer(timeout, timeout)
        self.timeout = timeout
        self.owner = self.expire = None

    def wait(self) -> None:
        current = getcurrent()
        if current is not self.owner:  # another request took the pooled connection
            self.owner, self.expire = current, functools.partial(current.throw, TimeoutError("timed out"))
        self.timer.again(self.expire)
        try:
            self.hub.wait(self.watcher)
        finally:
            self.timer.stop()

    def close(self) -> None:
        self.timer.close()
        self.watcher.close()
        self.owner = self.expire = None


class HTTPClient:
    """Requests to one server (scheme://host:port), on keep-alive connections kept for reuse."""

    def __init__(
        self,
        base_url: str,
        *,
        connect_timeout: float,
        read_timeout: float,
        max_idle: int = 1024,
        api_key: str = "",
        keeps_spare: bool = False,
    ):
        parts = urlsplit(base_url)
        self.tls = parts.scheme == "https"
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self.tls else 80)
        self.prefix = parts.path.rstrip("/")
        self.host_header = parts.netloc.rsplit("@", 1)[-1]
        # The server's key (a llama-server the proxy started answers no one else), in every request's head.
        self.fixed_head = f"Host: {self.host_header}\r\nAccept: */*\r\n" + (
            f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        )
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self.max_idle = max_idle
        self._idle: collections.deque[_Connection] = collections.deque()  # append/pop are atomic
        self._literal_address = _literal_address(self.host, self.port)
        self._tls_context = ssl.create_default_context() if self.tls else None
        # A server that closes its connections after some answers (llama-server, after every streamed one):
        # a connection for the next request is opened when a chunked answer's is closed (replenish).
        self.keeps_spare = keeps_spare and max_idle > 0
        self._spare_opening = False
        self._server_hangs_up = False  # an idle connection of this server's was found closed

    def request(
        self, method: str, path: str, body: bytes | None = None, content_type: str = "application/json", headers: str = ""
    ) -> Response:
        """Send the request in one write and read the answer's head; its body is left to read. `headers`:
        more header lines, each ending in CRLF (a fleet front's to its box)."""
        head = f"{method} {self.prefix}{path} HTTP/1.1\r\n{self.fixed_head}{headers}"
        if body is not None:
            head += f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        message = (head + "\r\n").encode("latin-1") + (body or b"")
        closed: list[_Connection] = []
        connection = self._take_idle(closed)
        if connection is not None:
            try:
                return self._exchange(connection, message, closed)
            except ConnectionLost:
                # The server closed this idle keep-alive connection just as we reused it; the
                # request never reached it, so sending it again on a new connection is safe.
                pass
        return self._exchange(self._connect(), message, closed)

    def _exchange(self, connection: _Connection, message: bytes, closed: list[_Connection]) -> Response:
        opened = OPENED.get()
        exchange = Exchange(connection) if opened is not None else None
        if exchange is not None:
            opened(exchange)
        try:
            connection.send(message, plain=not self.tls)
            while closed:  # closed now, while the server reads the request
                closed.pop().close()
            status, headers, keep_alive = _read_head(connection)
        except TimeoutError as exc:
            connection.close()
            raise ReadTimeout("no answer in time") from exc
        except (TransportError, OSError) as exc:
            connection.close()
            if isinstance(exc, TransportError):
                raise
            raise ConnectionLost(type(exc).__name__) from exc
        return Response(status, headers, connection, self, keep_alive, exchange)

    def _take_idle(self, closed: list[_Connection]) -> _Connection | None:
        """An idle connection the server has not closed; those it has are skipped into `closed`, for the
        caller to close once its request is sent (two system calls and gevent's bookkeeping, not on the
        way to the upstream)."""
        while True:
            try:
                connection = self._idle.pop()
            except IndexError:
                return None
            if self.tls or connection.fresh() or connection.idle_and_open():  # TLS may have records of its own waiting (session
                return connection  # tickets): a closed one is found by the request's retry
            self._server_hangs_up = True
            closed.append(connection)

    @property
    def replaces_closed(self) -> bool:
        """Whether a chunked answer's connection is watched for the server's close when the answer ends
        (`replenish`): `keeps_spare`, once the server was seen closing an idle connection (llama-server
        closes every streamed answer's), so a server that keeps them costs nothing more."""
        return self.keeps_spare and self._server_hangs_up

    def replenish(self, answered: _Connection | None) -> None:
        """After a chunked answer's end: once the answering greenlet has moved on, if the server closed the
        answer's connection (`answered`, idle in the pool; None: already closed here), it is closed and
        one is opened for the next request, unless one is idle. Otherwise the next request connects on
        its way to the upstream (0.2-0.3 ms of its first token: issue 54). Done between answers, not while
        a request waits for its first token: the server's accept would take a core from its own prompt
        processing then. At most one at a time per server; without an event loop, nothing (it would
        take a thread)."""
        if self._spare_opening or not event_loop_active():
            return
        from gevent import spawn

        self._spare_opening = True
        spawn(self._open_spare, answered)

    def _open_spare(self, answered: _Connection | None) -> None:
        from gevent import sleep

        try:
            for delay in SPARE_WATCH_SECONDS if answered is not None else ():
                sleep(delay)
                if answered not in self._idle:
                    return  # a request took it: it finds it closed, or uses it
                if not answered.idle_and_open():
                    self._idle.remove(answered)  # no switch since the check: still idle
                    answered.close()
                    break
            else:
                if answered is not None:
                    return  # still open: kept alive after all
            if not self._idle:
                self.put_back(self._connect())
        except TransportError:
            pass  # the next request connects, and says why if it cannot either
        finally:
            self._spare_opening = False

    def put_back(self, connection: _Connection) -> None:
        if len(self._idle) < self.max_idle:
            self._idle.append(connection)
        else:
            connection.close()

    def _connect(self) -> _Connection:
        try:
            sock = self._open_socket()
        except TimeoutError as exc:
            raise ConnectTimeout("connect timeout") from exc
        except OSError as exc:
            raise ConnectFailed(type(exc).__name__) from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(self.read_timeout)
        if self._tls_context is not None:
            try:
                sock = self._tls_context.wrap_socket(sock, server_hostname=self.host)
            except OSError as exc:
                sock.close()
                raise ConnectFailed(type(exc).__name__) from exc
        return _Connection(sock, self.read_timeout)

    def _open_socket(self) -> socket.socket:
        """A socket connected to the server: straight to its address when the URL names an IP address,
        without a resolver (under gevent, getaddrinfo is a trip through a thread pool on every new
        connection, even for 127.0.0.1); through create_connection for a host name."""
        if self._literal_address is None:
            return socket.create_connection((self.host, self.port), timeout=self.connect_timeout)
        family, address = self._literal_address
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.connect_timeout)
            sock.connect(address)
        except BaseException:
            sock.close()
            raise
        return sock

    def close(self) -> None:
        while True:
            try:
                self._idle.pop().close()
            except IndexError:
                return


# When an answer's idle connection is looked at for the server's close (the pauses before each look): llama-server
# closes it just after the last chunk, which the proxy may have read first. It stays in the pool meanwhile.
SPARE_WATCH_SECONDS = (0.0, 0.001, 0.005)
FRESH_SECONDS = 1.0  # a connection opened and never used is taken without a look this long (_Connection.fresh)


def _literal_address(host: str, port: int) -> tuple[int, tuple] | None:
    """(family, socket address) of an IP address `host`; None for a host name (resolved at each connect)."""
    try:
        version = ipaddress.ip_address(host).version
    except ValueError:
        return None
    return (socket.AF_INET6, (host, port, 0, 0)) if version == 6 else (socket.AF_INET, (host, port))


def _read_head(connection: _Connection) -> tuple[int, dict[str, str], bool]:
    """(status, headers with lower-case names, whether the connection stays open) of a response."""
    try:
        status_line = connection.readline()
        while status_line in (b"\r\n", b"\n"):
            status_line = connection.readline()
    except ConnectionLost:
        raise ConnectionLost("closed before answering") from None
    try:
        version, status_text = status_line.split(None, 2)[:2]
        status = int(status_text)
    except ValueError:
        raise BadResponse(f"not an HTTP status line: {status_line[:80]!r}") from None
    headers: dict[str, str] = {}
    while True:
        line = connection.readline()
        if line in (b"\r\n", b"\n"):
            break
        if len(headers) > MAX_HEADERS:
            raise BadResponse("too many headers")
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if 100 <= status < 200:  # an interim answer (100 Continue): the real one follows
        return _read_head(connection)
    connection_header = headers.get("connection", "").lower()
    keep_alive = "close" not in connection_header and (version == b"HTTP/1.1" or "keep-alive" in connection_header)
    return status, headers, keep_alive
