"""The workers' side of the supervisor's socket (service.py's protocol). Plain sockets: under the
gevent worker they are cooperative, so a request waiting for a load holds no thread."""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Iterator

from ..errors import ModelNotFound, ProxyError, RateLimited, UpstreamUnavailable


class Lease:
    """A model held ready for one request: `urls` are its ready replicas. Until `release()`, the
    supervisor neither stops nor evicts the model."""

    def __init__(self, connection: socket.socket, urls: list[str]):
        self.connection, self.urls = connection, urls

    def release(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None


class PendingLease:
    """A lease the supervisor will grant once the model is loaded (a swap or a start under way)."""

    def __init__(self, connection: socket.socket, lines: LineReader, stage: str):
        self.connection, self.lines, self.stage = connection, lines, stage

    def wait(self, timeout: float | None = None) -> Lease | None:
        """The lease once granted; None if `timeout` seconds pass first; the refusal's API error."""
        try:
            while True:
                message = self.lines.next(timeout)
                if message is None:
                    return None
                if "wait" in message:
                    self.stage = message["wait"]
                    continue
                return _granted(self.connection, message)
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        self.connection.close()


class SupervisorClient:
    def __init__(self, socket_path: str):
        self.socket_path = socket_path

    def acquire(self, model: str, *, wait: bool = True) -> Lease | PendingLease:
        """A lease on `model` once it is loaded (started, or swapped in, if need be). With `wait`
        false, a PendingLease instead when it is not ready at once. Raises the API error the
        supervisor's refusal maps to."""
        connection, lines = self._open({"op": "acquire", "model": model})
        try:
            message = lines.next()
            if "wait" not in message:
                return _granted(connection, message)
        except BaseException:
            connection.close()
            raise
        pending = PendingLease(connection, lines, message["wait"])
        return pending.wait() if wait else pending

    def ask(self, op: str, **fields) -> dict:
        """One request and its one answer (status, logs, load, unload)."""
        connection, lines = self._open({"op": op, **fields})
        with connection:
            message = lines.next()
            while "wait" in message:   # a load may wait first
                message = lines.next()
        if "error" in message and "status" in message:
            raise as_proxy_error(message)
        return message

    def events(self) -> Iterator[dict]:
        """Status changes as they happen, the whole status first; closing the iterator hangs up."""
        connection, lines = self._open({"op": "events"})
        with connection:
            while True:
                yield lines.next()["event"]

    def _open(self, request: dict) -> tuple[socket.socket, LineReader]:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(self.socket_path)
            connection.sendall(json.dumps(request).encode() + b"\n")
        except OSError as exc:
            connection.close()
            raise UpstreamUnavailable(f"the model supervisor is not reachable ({exc.strerror})") from None
        return connection, LineReader(connection)


class LineReader:
    """JSON lines from a socket, each read with an optional timeout (a socket's own timeout would
    leave a file object made of it unusable after the first one)."""

    def __init__(self, connection: socket.socket):
        self.connection, self.buffer = connection, b""

    def next(self, timeout: float | None = None) -> dict | None:
        """The next message; None if `timeout` passes first; UpstreamUnavailable if the supervisor hung up."""
        while b"\n" not in self.buffer:
            if timeout is not None and not select.select([self.connection], [], [], timeout)[0]:
                return None
            received = self.connection.recv(65536)
            if not received:
                raise UpstreamUnavailable("the model supervisor went away")
            self.buffer += received
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)


def _granted(connection: socket.socket, message: dict) -> Lease:
    if message.get("ok"):
        return Lease(connection, message["urls"])
    raise as_proxy_error(message)


def as_proxy_error(message: dict) -> ProxyError:
    status, text = message.get("status", 503), message["error"]
    if status == 404:
        return ModelNotFound(text, param="model")
    if status == 429:
        error = RateLimited(text, retry_after=str(message.get("retry_after") or 1))
        error.code = "model_queue_full"
        return error
    error = UpstreamUnavailable(text)
    if message.get("retry_after"):
        error.headers = {"Retry-After": str(message["retry_after"])}
    return error
