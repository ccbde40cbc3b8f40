"""The workers' side of the supervisor's socket (messages.py's typed protocol, listener.py answers it).
Plain sockets: under the gevent worker they are cooperative, so a request waiting for a load holds no
thread."""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Callable, Iterator

from ..errors import InvalidRequest, ModelNotFound, ProxyError, RateLimited, UpstreamUnavailable
from . import messages


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

    def __init__(
        self, client: SupervisorClient, request: messages.Acquire, connection: socket.socket, lines: LineReader, stage: str
    ):
        self.client, self.request = client, request
        self.connection, self.lines, self.stage = connection, lines, stage
        self.reconnects = 0

    def wait(self, timeout: float | None = None) -> Lease | None:
        """The lease once granted; None if `timeout` seconds pass first; the refusal's API error."""
        try:
            while True:
                reply = self._next(timeout)
                if reply is None:
                    return None
                if isinstance(reply, messages.Wait):
                    self.stage = reply.stage
                    continue
                return _granted(self.connection, reply)
        except BaseException:
            self.release()
            raise

    def _next(self, timeout: float | None) -> messages.Reply | None:
        try:
            return self.lines.reply(timeout)
        except SupervisorGone:
            if self.reconnects >= MAX_RECONNECTS:
                raise
            self.reconnects += 1
            self.connection.close()
            self.connection, self.lines = self.client._open(self.request)
            return messages.Wait(self.stage)

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


MAX_RECONNECTS = 3  # a request asks again this often of a supervisor that keeps dying
RECONNECT_SECONDS = 60.0  # a supervisor being restarted is waited for this long (its start-up's bound)
RECONNECT_POLL_SECONDS = 0.05
EVENTS_POLL_SECONDS = 1.0  # a status stream with no change to send looks this often whether it is to end


class SupervisorClient:
    def __init__(self, socket_path: str):
        self.socket_path = socket_path

    def acquire(self, model: str, *, wait: bool = True, unreachable: list[str] | None = None) -> Lease | PendingLease:
        """A lease on `model` once it is loaded (started, or swapped in, if need be). With `wait`
        false, a PendingLease instead when it is not ready at once. `unreachable`: the URLs of its
        replicas this request could not reach, for the supervisor to check. Raises the API error the
        supervisor's refusal maps to."""
        request = messages.Acquire(model, list(unreachable or ()))
        connection, lines = self._open(request)
        pending = PendingLease(self, request, connection, lines, "queued")
        try:
            reply = pending._next(None)
            if not isinstance(reply, messages.Wait):
                return _granted(pending.connection, reply)
        except BaseException:
            pending.release()
            raise
        pending.stage = reply.stage
        return pending.wait() if wait else pending

    def request(self, request: messages.Request) -> messages.Reply:
        """One request and its one answer (a load's waits passed over); a refusal raises its API error."""
        connection, lines = self._open(request)
        with connection:
            reply = lines.reply()
            while isinstance(reply, messages.Wait):  # a load may wait first
                reply = lines.reply()
        if isinstance(reply, messages.Refused):
            raise as_proxy_error(reply)
        return reply

    def ask(self, op: str, **fields) -> dict:
        """`request` by the op's name and fields (messages.REQUESTS), its answer as JSON: status, logs,
        load, unload, keep_alive."""
        return self.request(messages.request_of({"op": op, **fields})).to_json()

    def events(self, ended: Callable[[], bool] = lambda: False, idle: bool = False) -> Iterator[dict | None]:
        """Status changes as they happen, the whole status first; closing the iterator hangs up. It ends
        once `ended()` (asked while no change comes, every EVENTS_POLL_SECONDS): a worker shutting down.
        With `idle`, a None for each such poll: a box's stream to a front says it is alive (routes/fleet.py)."""
        connection, lines = self._open(messages.Events())
        with connection:
            while True:
                reply = lines.reply(EVENTS_POLL_SECONDS)
                if reply is not None:
                    yield reply.event
                elif ended():
                    return
                elif idle:
                    yield None

    def _open(self, request: messages.Request) -> tuple[socket.socket, LineReader]:
        """A connection with `request` sent. A supervisor that is not listening (it died, and the master
        is starting another on the same socket) is waited for, up to RECONNECT_SECONDS; so is one that
        died between taking the connection and reading the request (a broken pipe or a reset on sending:
        nothing of it was acted on, and what a dead supervisor granted died with it)."""
        deadline = time.monotonic() + RECONNECT_SECONDS
        while True:
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                connection.connect(self.socket_path)
                connection.sendall(messages.encode(request))
                return connection, LineReader(connection)
            except (FileNotFoundError, ConnectionRefusedError, BrokenPipeError, ConnectionResetError) as exc:
                connection.close()
                if time.monotonic() >= deadline:
                    raise UpstreamUnavailable(f"the model supervisor is not reachable ({exc.strerror})") from None
            except OSError as exc:
                connection.close()
                raise UpstreamUnavailable(f"the model supervisor is not reachable ({exc.strerror})") from None
            time.sleep(RECONNECT_POLL_SECONDS)  # cooperative under the gevent worker


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
            except ConnectionError:  # reset rather than closed: a supervisor killed with data unread
                received = b""
            if not received:
                raise SupervisorGone("the model supervisor went away")
            self.buffer += received
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def reply(self, timeout: float | None = None) -> messages.Reply | None:
        """The next message as its typed reply (messages.reply_of); None if `timeout` passes first."""
        message = self.next(timeout)
        return None if message is None else messages.reply_of(message)


def _granted(connection: socket.socket, reply: messages.Reply) -> Lease:
    if isinstance(reply, messages.Granted):
        return Lease(connection, reply.urls)
    if isinstance(reply, messages.Refused):
        raise as_proxy_error(reply)
    raise messages.BadMessage(f"an acquire answered with {reply!r:.200}")


def as_proxy_error(refused: messages.Refused) -> ProxyError:
    if refused.status == 404:
        return ModelNotFound(refused.error, param="model")
    if refused.status == 400:  # a load's args refused, or a requested launch that did not start
        return InvalidRequest(refused.error, param="args")
    if refused.status == 429:
        error = RateLimited(refused.error, retry_after=str(refused.retry_after or 1))
        error.code = "model_queue_full"
        return error
    error = UpstreamUnavailable(refused.error)
    if refused.retry_after:
        error.headers = {"Retry-After": str(refused.retry_after)}
    return error
