"""The workers' side of the supervisor's socket (service.py's protocol). Plain sockets: under the
gevent worker they are cooperative, so a request waiting for a load holds no thread."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator

from ..errors import ModelNotFound, ProxyError, TooManyRequests, UpstreamUnavailable


class Lease:
    """A model held ready for one request: `urls` are its ready replicas. Until `release()`, the
    supervisor neither stops nor evicts the model."""

    def __init__(self, connection: socket.socket, urls: list[str]):
        self.connection, self.urls = connection, urls

    def release(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None


class SupervisorClient:
    def __init__(self, socket_path: str):
        self.socket_path = socket_path

    def acquire(self, model: str, on_wait: Callable[[str], None] | None = None) -> Lease:
        """A lease on `model`, once it is loaded (started, or swapped in, if need be); `on_wait(stage)`
        is told when the request has to wait. Raises the API error the supervisor's refusal maps to."""
        connection, lines = self._open({"op": "acquire", "model": model})
        try:
            for message in lines:
                if "wait" in message and on_wait is not None:
                    on_wait(message["wait"])
                elif message.get("ok"):
                    return Lease(connection, message["urls"])
                elif "error" in message:
                    raise as_proxy_error(message)
            raise UpstreamUnavailable("the model supervisor went away")
        except BaseException:
            connection.close()
            raise

    def ask(self, op: str, **fields) -> dict:
        """One request and its one answer (status, logs, load, unload)."""
        connection, lines = self._open({"op": op, **fields})
        with connection:
            message = next((line for line in lines if "wait" not in line), None)   # a load may wait first
        if message is None:
            raise UpstreamUnavailable("the model supervisor went away")
        if "error" in message and "status" in message and op not in ("status",):
            raise as_proxy_error(message)
        return message

    def events(self) -> Iterator[dict]:
        """Status changes as they happen, the whole status first; closing the iterator hangs up."""
        connection, lines = self._open({"op": "events"})
        with connection:
            for message in lines:
                yield message["event"]

    def _open(self, request: dict) -> tuple[socket.socket, Iterator[dict]]:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(self.socket_path)
            connection.sendall(json.dumps(request).encode() + b"\n")
        except OSError as exc:
            connection.close()
            raise UpstreamUnavailable(f"the model supervisor is not reachable ({exc.strerror})") from None
        return connection, _lines(connection)


def _lines(connection: socket.socket) -> Iterator[dict]:
    reader = connection.makefile("rb")
    for line in reader:
        yield json.loads(line)


def as_proxy_error(message: dict) -> ProxyError:
    status, text = message.get("status", 503), message["error"]
    if status == 404:
        return ModelNotFound(text, param="model")
    error = TooManyRequests(text, code="model_queue_full") if status == 429 else UpstreamUnavailable(text)
    if message.get("retry_after"):
        error.headers = {"Retry-After": str(message["retry_after"])}
    return error
