"""The WebSocket's transport: `GET /v1/responses` upgraded (wsproto on the connection gunicorn hands
over, driven in its greenlet: _ClientSocket), and each turn run through the app as `POST /v1/responses`
with `stream: true`, so a response over a socket is admitted, limited, counted, recorded and stored
exactly as one over HTTP.
The session (state of earlier turns, one response in flight, steering) is services/responses_socket.py's.

The key is checked at the handshake as for any request (app._identify_caller: 401 before the
upgrade), and again by every turn, so a key revoked while its socket is open is refused at the next
response. A browser's handshake from an origin the proxy does not allow is refused (403): browsers
send no preflight for a WebSocket, so CORS would not stop a page from using a keyless proxy."""

from __future__ import annotations

import collections
import contextlib
import io
import secrets
import select
import socket as sockets
import struct
import time

from flask import Flask, Response, current_app, g, request

from ..errors import InvalidRequest, PermissionDenied, TooManySockets
from ..services import responses_socket
from ..services.inflight import BARE_EVENTS
from . import state

# What a turn's request does not take from the handshake's: the upgrade itself, and its body's framing.
HANDSHAKE_ONLY = frozenset(
    {
        "HTTP_UPGRADE",
        "HTTP_CONNECTION",
        "HTTP_SEC_WEBSOCKET_KEY",
        "HTTP_SEC_WEBSOCKET_VERSION",
        "HTTP_SEC_WEBSOCKET_EXTENSIONS",
        "HTTP_SEC_WEBSOCKET_PROTOCOL",
        "HTTP_CONTENT_LENGTH",
        "HTTP_CONTENT_TYPE",
        "HTTP_TRANSFER_ENCODING",
    }
)
SERVER_KEYS = ("SERVER_NAME", "SERVER_PORT", "SERVER_PROTOCOL", "REMOTE_ADDR", "REMOTE_PORT", "SCRIPT_NAME")
SESSION_HEADER = "HTTP_X_CLAUDE_CODE_SESSION_ID"  # the session key routing places a conversation by


def upgrade() -> Response:
    """Serve the socket until it ends; the connection is then closed (gunicorn's worker)."""
    environ = request.environ
    if request.headers.get("Upgrade", "").lower() != "websocket":
        raise InvalidRequest("GET /v1/responses is the WebSocket mode: send the upgrade (or POST a response)")
    if "gunicorn.socket" not in environ:
        raise InvalidRequest("the WebSocket mode needs the proxy's own server (api-like-oai), not a test client")
    _check_origin(request.headers.get("Origin"))
    with _socket_held():
        return _served(environ)


def _served(environ: dict) -> Response:
    limits = state().settings.limits
    client_socket = _ClientSocket.accepted(environ["gunicorn.socket"], environ, limits.max_body_bytes)
    record = g.get("record")
    if record is not None:  # the handshake's line now; each response has its own record (the dashboard's live list)
        record.status = 101
        record.close()
    turn_environ = _turn_environ(environ)
    app = current_app._get_current_object()
    shared = state()
    responses_socket.serve(
        client_socket,
        lambda body: _Turn(app, turn_environ, body),
        lambda: shared.inflight.draining or shared.inflight.shutting_down,
        # a held chain is sent back as a request's input: no longer than a request may be (as a stored turn)
        responses_socket.Limits(held_bytes=limits.max_body_bytes),
    )
    return _Ended(status=101)


@contextlib.contextmanager
def _socket_held():
    """The socket counted among its key's open ones while it is served; a managed key with as many open
    as it may hold (responses_socket.sockets_allowed, counted in every worker) is refused before the
    upgrade (429 too_many_sockets)."""
    shared, ticket = state(), g.get("ticket")
    record = ticket.caller.record if ticket is not None else None
    allowed = responses_socket.sockets_allowed(record)
    if allowed is None:
        yield
        return
    elsewhere = sum(shared.siblings.ask("sockets", record.name)) if shared.siblings is not None else 0
    if not shared.inflight.sockets.opened(record.name, allowed, elsewhere):
        raise TooManySockets(
            f"key {record.name!r} has {allowed} WebSockets open, as many as it may (its max_parallel, or "
            f"{responses_socket.SOCKETS_PER_KEY}): close one first"
        )
    try:
        yield
    finally:
        shared.inflight.sockets.closed(record.name)


def _check_origin(origin: str | None) -> None:
    allowed = state().settings.cors_origins
    if origin is not None and "*" not in allowed and origin not in allowed:
        raise PermissionDenied("a WebSocket from this origin is not allowed (--cors-origins)")


def _turn_environ(environ: dict) -> dict:
    """The handshake's environ as each turn's request starts from: its headers (the key among them), the
    server's names, a session key of the socket's own unless the client sent one."""
    kept = {name: value for name, value in environ.items() if name.startswith("HTTP_") and name not in HANDSHAKE_ONLY}
    kept |= {name: environ[name] for name in SERVER_KEYS if name in environ}
    kept |= {name: value for name, value in environ.items() if name.startswith("wsgi.") and name != "wsgi.input"}
    kept.setdefault(SESSION_HEADER, "ws_" + secrets.token_hex(12))
    return kept


class _Turn:
    """One turn run through the app as `POST /v1/responses` (responses_socket.TurnAnswer)."""

    def __init__(self, app: Flask, turn_environ: dict, body: bytes):
        environ = dict(turn_environ)
        environ |= {"REQUEST_METHOD": "POST", "PATH_INFO": "/v1/responses", "QUERY_STRING": ""}
        environ |= {"CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body)}
        environ[BARE_EVENTS] = True  # the events as JSON, not SSE frames: sent on as they come
        self.status = 500
        # An app context of its own: Flask would otherwise give the turn the handshake's (its `g`).
        with app.app_context():
            self.body = app.wsgi_app(environ, self._start_response)
            self.record = g.get("record")

    def _start_response(self, status: str, headers, exc_info=None):
        self.status = int(status[:3])
        return lambda data: None

    def chunks(self):
        return iter(self.body)

    def stop(self, finish_reason: str) -> bool:
        return self.record.stop(finish_reason) if self.record is not None else False

    def close(self) -> None:
        close = getattr(self.body, "close", None)
        if close is not None:
            close()


# Between a turn's events the client is read at most this often: a steer or a hang-up is seen within it,
# and a fast turn's events (an instant upstream's, a small model's) do not each pay a system call.
LOOK_EVERY = 0.005


class _ClientSocket:
    """responses_socket.Socket on wsproto (python-hyper's sans-I/O WebSocket protocol), driven in the
    socket's own greenlet: the client's frames are read when the session asks (between a turn's events,
    without waiting, or while it waits for the next turn), its pings and its close answered then. No
    reader thread: a client's message reaches the session without a second wake-up (simple-websocket's
    thread added one to every turn's first event, bench row 2f), and one greenlet writes every frame, so
    a pong never falls inside an event's. A turn's events are written as whole frames (text_frame)."""

    def __init__(self, client, protocol, max_message: int):
        self.client, self.protocol, self.max_message = client, protocol, max_message
        # the system's socket under gevent's (whose recv would wait where the system's says EAGAIN)
        self.raw = getattr(client, "_sock", client)
        self.next_look = 0.0  # monotonic: between a turn's events, the client is read again from then on
        self.messages: collections.deque[str | bytes] = collections.deque()
        self.parts: list[str | bytes] = []  # the message coming, in its frames
        self.size = 0
        self.open = True

    @classmethod
    def accepted(cls, client, environ: dict, max_message: int) -> _ClientSocket:
        """The socket once the handshake in `environ` is answered (101); InvalidRequest if it is none.
        No permessage-deflate (the client's offer is not read): compressing every event costs more CPU
        than the bytes it saves on the loopback or LAN between an agent and its proxy."""
        from wsproto import ConnectionType, WSConnection
        from wsproto.events import AcceptConnection, Request
        from wsproto.utilities import ProtocolError

        protocol = WSConnection(ConnectionType.SERVER)
        head = "".join(
            f"{name[5:].replace('_', '-')}: {value}\r\n"
            for name, value in environ.items()
            if name.startswith("HTTP_") and name != "HTTP_SEC_WEBSOCKET_EXTENSIONS"
        )
        try:
            protocol.receive_data(f"GET / HTTP/1.1\r\n{head}\r\n".encode("latin-1"))
            if not isinstance(next(protocol.events(), None), Request):
                raise InvalidRequest("not a WebSocket handshake (Sec-WebSocket-Key and -Version)")
            client.sendall(protocol.send(AcceptConnection()))
        except (ProtocolError, UnicodeEncodeError):
            raise InvalidRequest("not a WebSocket handshake (Sec-WebSocket-Key and -Version)") from None
        return cls(client, protocol, max_message)

    def receive(self, timeout):
        if timeout == 0 and not self.messages and self.open:  # asked between a turn's events
            now = time.monotonic()
            if now < self.next_look:
                return None
            self.next_look = now + LOOK_EVERY
        while not self.messages:
            if not self.open:
                raise responses_socket.SocketClosed()
            try:  # one system call when nothing came
                data = self.raw.recv(65536, sockets.MSG_DONTWAIT)
            except BlockingIOError:
                if timeout == 0 or not select.select([self.client], [], [], timeout)[0]:
                    return None  # (select is cooperative under the gevent worker)
                continue
            except OSError:
                data = b""
            self._read(data)
        return self.messages.popleft()

    def _read(self, data: bytes) -> None:
        """What the client sent (b"": its end closed): its messages queued, its pings and close answered."""
        from wsproto.events import CloseConnection, Message, Ping

        self.protocol.receive_data(data or None)  # None: the client's end closed
        self.open = self.open and bool(data)
        for event in self.protocol.events():
            if isinstance(event, Message):
                self._part(event)
            elif isinstance(event, Ping | CloseConnection):  # a protocol error is a close (1002, 1007)
                self._answer(event.response())
                self.open = self.open and isinstance(event, Ping)

    def _part(self, event) -> None:
        self.parts.append(event.data)
        self.size += max(len(event.data), 1)  # an empty frame counts: a flood of them is bounded too
        if self.size > self.max_message:
            self.close(1009, "message too big")
        elif event.message_finished:
            self.messages.append(self.parts[0] if len(self.parts) == 1 else type(event.data)().join(self.parts))
            self.parts, self.size = [], 0

    def _answer(self, event) -> None:
        from wsproto.utilities import LocalProtocolError

        try:
            self.client.sendall(self.protocol.send(event))
        except (LocalProtocolError, OSError):
            self.open = False

    def send(self, text) -> None:
        if not self.open:
            raise responses_socket.SocketClosed()
        try:
            self.client.sendall(text_frame(text if isinstance(text, bytes) else text.encode()))
        except OSError:
            self.open = False
            raise responses_socket.SocketClosed() from None

    def close(self, code: int, reason: str) -> None:
        from wsproto.connection import ConnectionState
        from wsproto.events import CloseConnection

        if self.open and self.protocol.state is ConnectionState.OPEN:
            self._answer(CloseConnection(code, reason))
        self.open = False


def text_frame(payload: bytes) -> bytes:
    """`payload` (UTF-8) as one whole text message from a server: unmasked, unfragmented (RFC 6455, 5.2)."""
    size = len(payload)
    if size < 126:
        return bytes((0x81, size)) + payload
    if size < 1 << 16:
        return struct.pack("!BBH", 0x81, 126, size) + payload
    return struct.pack("!BBQ", 0x81, 127, size) + payload


class _Ended(Response):
    """What the view returns once the socket is over: gunicorn's worker closes the connection on
    StopIteration (the handshake's 101 was written by _ClientSocket; nothing more may be)."""

    def __call__(self, environ, start_response):
        raise StopIteration()
