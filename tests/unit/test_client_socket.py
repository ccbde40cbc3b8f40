"""The socket's server end (routes/responses_socket._ClientSocket, wsproto driven in the socket's own
greenlet) against wsproto's client end over a real socket pair: the handshake answered, a message in
frames put together, pings answered while nothing else is asked, a message past the limit closed with
1009, the client's close answered and the socket closed after what came before it."""

from __future__ import annotations

import socket
import time

import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Ping, Pong, Request, TextMessage

from api_like_oai.errors import InvalidRequest
from api_like_oai.routes.responses_socket import _ClientSocket
from api_like_oai.services.responses_socket import SocketClosed


@pytest.fixture
def pair():
    server_end, client_end = socket.socketpair()
    client = WSConnection(ConnectionType.CLIENT)
    head = client.send(Request(host="127.0.0.1", target="/v1/responses")).decode().split("\r\n")[1:]
    environ = {
        "HTTP_" + name.upper().replace("-", "_"): value for name, _, value in (line.partition(": ") for line in head if line)
    }
    environ["HTTP_SEC_WEBSOCKET_EXTENSIONS"] = "permessage-deflate"  # offered, never taken
    server = _ClientSocket.accepted(server_end, environ, max_message=64)
    client.receive_data(client_end.recv(65536))
    accepted = next(client.events())
    assert isinstance(accepted, AcceptConnection) and accepted.extensions == []
    yield server, client, client_end
    server_end.close()
    client_end.close()


def events(client, client_end) -> list:
    client.receive_data(client_end.recv(65536))
    return list(client.events())


def test_a_message_in_frames_is_one_message_and_a_ping_is_answered(pair):
    server, client, client_end = pair
    assert server.receive(0) is None  # nothing came: at once
    client_end.sendall(client.send(Ping(b"are you there")))
    assert server.receive(0.05) is None  # the ping answered, no message
    assert events(client, client_end) == [Pong(b"are you there")]
    client_end.sendall(client.send(TextMessage("hello ", message_finished=False)) + client.send(TextMessage("there")))
    assert server.receive(5) == "hello there"
    server.send(b'{"type":"response.created"}')
    [sent] = events(client, client_end)
    assert sent.data == '{"type":"response.created"}' and sent.message_finished


@pytest.mark.parametrize(
    "frames",
    [
        lambda client: client.send(TextMessage("x" * 65)),  # a message past the limit
        # a flood of empty frames, bounded as a long message is
        lambda client: b"".join(client.send(TextMessage("", message_finished=False)) for _ in range(65)),
    ],
    ids=["a long message", "a flood of empty frames"],
)
def test_a_message_past_the_limit_closes_the_socket_1009(pair, frames):
    server, client, client_end = pair
    client_end.sendall(frames(client))
    with pytest.raises(SocketClosed):
        server.receive(5)
    [closed] = events(client, client_end)
    assert isinstance(closed, CloseConnection) and closed.code == 1009


def test_what_came_before_the_clients_close_is_read_then_the_socket_is_closed(pair):
    server, client, client_end = pair
    client_end.sendall(client.send(TextMessage("last")) + client.send(CloseConnection(1000)))
    assert server.receive(5) == "last"
    with pytest.raises(SocketClosed):
        server.receive(5)
    [answered] = events(client, client_end)
    assert isinstance(answered, CloseConnection) and answered.code == 1000
    with pytest.raises(SocketClosed):
        server.send(b"{}")


def test_between_a_turns_events_the_client_is_read_at_most_every_few_milliseconds(pair, monkeypatch):
    server, client, client_end = pair
    assert server.receive(0) is None
    client_end.sendall(client.send(TextMessage('{"type": "response.steer"}')))
    monkeypatch.setattr(server, "next_look", time.monotonic() + 60)  # just looked
    assert server.receive(0) is None  # not read yet: no system call for every event of a fast turn
    monkeypatch.setattr(server, "next_look", 0.0)
    assert server.receive(0) == '{"type": "response.steer"}'


def test_a_client_gone_without_a_close_is_a_closed_socket(pair):
    server, _, client_end = pair
    client_end.close()
    with pytest.raises(SocketClosed):
        server.receive(0)


def test_a_request_that_is_no_handshake_is_a_400():
    server_end, client_end = socket.socketpair()
    with server_end, client_end, pytest.raises(InvalidRequest):
        _ClientSocket.accepted(server_end, {"HTTP_HOST": "127.0.0.1", "HTTP_UPGRADE": "websocket"}, 64)
