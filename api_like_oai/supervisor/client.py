"""The workers' side of the supervisor's socket (service.py's protocol). Plain sockets: under the
gevent worker they are cooperative, so a request waiting for a load holds no thread."""

from __future__ import annotations

import json
import select
import socket
import time
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
    """A lease the supervisor will grant once the model is loaded (a swap or a start under way). If the
    supervisor dies meanwhile, the request is asked again of the one the master starts in its place."""

    def __init__(self, client: SupervisorClient, request: dict, connection: socket.socket, lines: LineReader,
                 stage: str):
        self.client, self.request = client, request
        self.connection, self.lines, self.stage = connection, lines, stage
        self.reconnects = 0

    def wait(self, timeout: float | None = None) -> Lease | None:
        """The lease once granted; None if `timeout` seconds pass first; the refusal's API error."""
        try:
            while True:
                message = self._next(timeout)
                if message is None:
                    return None
                if "wait" in message:
                    self.stage = message["wait"]
                    continue
                return _granted(self.connection, message)
        except BaseException:
            self.release()
            raise

    def _next(self, timeout: float | None) -> dict | None:
        try:
            return self.lines.next(timeout)
        except SupervisorGone:
            if self.reconnects >= MAX_RECONNECTS:
                raise
            self.reconnects += 1
            self.connection.close()
            self.connection, self.lines = self.client._open(self.request)
            return {"wait": self.stage}

    def release(self) -> None:
        self.connection.close()


class HeldLease:
    """A request's lease on a started model, given up and taken again when none of the replicas it
    named could be reached (`renew`: the supervisor checks them, restarts the model if they crashed,
    and the request waits for it as a request for an unloaded model does, with its queue bound)."""

    def __init__(self, client: SupervisorClient, model: str, lease: Lease | PendingLease):
        self.client, self.model, self.lease = client, model, lease

    def renew(self, unreachable: list[str]):
        """wait(timeout): the ready URLs once the lease is granted again, None if `timeout` seconds
        (None: no limit) pass first; the refusal's API error (the Renew of backends/upstream.py)."""
        self.lease.release()
        self.lease = self.client.acquire(self.model, wait=False, unreachable=unreachable)
        return self._granted_urls

    def _granted_urls(self, timeout: float | None) -> list[str] | None:
        if isinstance(self.lease, PendingLease):
            granted = self.lease.wait(timeout)
            if granted is None:
                return None
            self.lease = granted
        return self.lease.urls

    def release(self) -> None:
        self.lease.release()


class SupervisorGone(UpstreamUnavailable):
    """The supervisor's end of a connection closed: it died (the master starts another)."""


MAX_RECONNECTS = 3                  # a request asks again this often of a supervisor that keeps dying
RECONNECT_SECONDS = 60.0            # a supervisor being restarted is waited for this long (its start-up's bound)
RECONNECT_POLL_SECONDS = 0.05


class SupervisorClient:
    def __init__(self, socket_path: str):
        self.socket_path = socket_path

    def acquire(self, model: str, *, wait: bool = True, unreachable: list[str] | None = None) -> Lease | PendingLease:
        """A lease on `model` once it is loaded (started, or swapped in, if need be). With `wait`
        false, a PendingLease instead when it is not ready at once. `unreachable`: the URLs of its
        replicas this request could not reach, for the supervisor to check. Raises the API error the
        supervisor's refusal maps to."""
        request = {"op": "acquire", "model": model, **({"unreachable": unreachable} if unreachable else {})}
        connection, lines = self._open(request)
        pending = PendingLease(self, request, connection, lines, "queued")
        try:
            message = pending._next(None)
            if "wait" not in message:
                return _granted(pending.connection, message)
        except BaseException:
            pending.release()
            raise
        pending.stage = message["wait"]
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
        """A connection with `request` sent. A supervisor that is not listening (it died, and the master
        is starting another on the same socket) is waited for, up to RECONNECT_SECONDS."""
        deadline = time.monotonic() + RECONNECT_SECONDS
        while True:
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                connection.connect(self.socket_path)
                connection.sendall(json.dumps(request).encode() + b"\n")
                return connection, LineReader(connection)
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                connection.close()
                if time.monotonic() >= deadline:
                    raise UpstreamUnavailable(f"the model supervisor is not reachable ({exc.strerror})") from None
            except OSError as exc:
                connection.close()
                raise UpstreamUnavailable(f"the model supervisor is not reachable ({exc.strerror})") from None
            time.sleep(RECONNECT_POLL_SECONDS)   # cooperative under the gevent worker


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
            try:
                received = self.connection.recv(65536)
            except ConnectionError:   # reset rather than closed: a supervisor killed with data unread
                received = b""
            if not received:
                raise SupervisorGone("the model supervisor went away")
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
