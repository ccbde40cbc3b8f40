"""backends/http.py against a scripted socket server: framing split anywhere, keep-alive reuse,
a stale pooled connection retried once."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from api_like_oai.backends.events import Accepted
from api_like_oai.backends.http import HTTPClient
from api_like_oai.backends.llamacpp import LlamaCppClient

ROOT = Path(__file__).resolve().parents[2]


class ScriptedServer:
    """Answers each request on a connection with the next scripted list of byte pieces."""

    def __init__(self, answers: list[list[bytes]], close_after: int | None = None, gap: float = 0.002):
        self.answers = answers
        self.gap = gap  # seconds between pieces (separate TCP segments)
        self.close_after = close_after  # close each connection after this many answers
        self.connections = 0
        self.heads: list[bytes] = []  # each request's head, as received
        self.listener = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def _serve(self) -> None:
        while True:
            client, _ = self.listener.accept()
            self.connections += 1
            threading.Thread(target=self._answer, args=(client,), daemon=True).start()

    def _answer(self, client: socket.socket) -> None:
        with client:
            reader = client.makefile("rb")
            served = 0
            while self.answers:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    line = reader.readline()
                    if not line:
                        return
                    head += line
                self.heads.append(head)
                length = next((int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")), 0)
                reader.read(length)
                for piece in self.answers.pop(0):
                    client.sendall(piece)
                    time.sleep(self.gap)
                served += 1
                if self.close_after and served >= self.close_after:
                    return


def chunked(*payloads: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in payloads) + b"0\r\n\r\n"


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def event(content: str, stop: bool = False) -> bytes:
    body = {"content": content, "stop": stop, "tokens_predicted": 2, "tokens_evaluated": 1}
    if stop:
        body["stop_type"] = "eos"
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def test_events_split_and_joined_anywhere_in_the_stream():
    first, second, last = event(" a"), event(" b"), event("", stop=True)
    body = chunked(first[:10], first[10:] + second, last)  # an event over two chunks, two in one
    pieces = [HEAD[:7], HEAD[7:] + body[:5], body[5:23], body[23:]]  # and TCP pieces cut mid-line
    server = ScriptedServer([pieces])
    client = LlamaCppClient(server.url)
    accepted, *events = client.generate("/completion", {"prompt": "x", "stream": True})
    assert accepted == Accepted(0)  # the head came: the proxy's answer may start before the first token
    assert [e.text for e in events] == [" a", " b", ""]
    assert events[-1].finish_reason == "stop"


def test_a_connection_is_reused_and_a_stale_one_retried_once():
    answer = [b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n{"status":"ok"}']
    server = ScriptedServer([answer, answer, answer], close_after=2)
    client = LlamaCppClient(server.url)
    assert client.health() == client.health() == {"status": "ok"}
    assert server.connections == 1  # kept alive
    time.sleep(0.1)  # the server has closed the pooled connection meanwhile
    assert client.health() == {"status": "ok"}
    assert server.connections == 2


@pytest.mark.parametrize("event_loop", [False, True], ids=["threads", "gevent"])
def test_a_pooled_connection_the_server_closed_is_not_sent_on(event_loop):
    """llama-server closes the connection of every streamed answer: the next request goes on a new
    one at once, not on the closed one first (a failed exchange, then the retry: issue 54). Under
    gevent (the worker's) too, in a process of its own, patched as the worker is."""
    script = f"""
import json, sys, time
if {event_loop}:
    from gevent import monkey
    monkey.patch_all()
sys.path.insert(0, {str(ROOT)!r})
from api_like_oai.backends import http
from tests.unit.test_http_client import HEAD, ScriptedServer, chunked, event
exchanges = []
exchange = http.HTTPClient._exchange
http.HTTPClient._exchange = lambda self, *args: exchanges.append(1) or exchange(self, *args)
stream = [HEAD + chunked(event(" a"), event("", stop=True))]
server = ScriptedServer([stream, stream], close_after=1)
client = http.HTTPClient(server.url, connect_timeout=5, read_timeout=5)
for _ in range(2):
    client.request("POST", "/completion", b"{{}}").read()
    time.sleep(0.1)  # the server has closed the pooled connection meanwhile
print(json.dumps([len(exchanges), server.connections]))
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == [2, 2]  # one exchange per request, each on a connection of its own


# The start of a script run in a process of its own, patched by gevent as the worker is: `sending[0]` is
# true while HTTPClient.request runs (what happens on a request's way upstream, not between requests);
# `stream` is one streamed answer.
ON_THE_WAY = f"""
import json, sys, time
from gevent import monkey
monkey.patch_all()
sys.path.insert(0, {str(ROOT)!r})
from api_like_oai.backends import http
from tests.unit.test_http_client import HEAD, ScriptedServer, chunked, event
sending, request = [False], http.HTTPClient.request
def sent(self, *args):
    sending[0] = True
    try:
        return request(self, *args)
    finally:
        sending[0] = False
http.HTTPClient.request = sent
stream = [HEAD + chunked(event(" a"), event("", stop=True))]
"""


@pytest.mark.parametrize("closes", [True, False], ids=["closed-after-each-stream", "kept-alive"])
def test_a_streamed_answers_connection_is_replaced_between_answers_not_on_the_next_ones_way(closes):
    """keeps_spare (llama-server's client): the server closes each streamed answer's connection; once it
    was seen doing so, the connection for the next request is opened when an answer's is closed, so no
    request connects on its way to the upstream any more (issue 54), and the closed ones are closed,
    not left idle. A server that keeps its connections gets no more of them."""
    script = (
        ON_THE_WAY
        + f"""
on_the_way, connect = [], http.HTTPClient._connect
http.HTTPClient._connect = lambda self: on_the_way.append(sending[0]) or connect(self)
server = ScriptedServer([stream] * 5, close_after={1 if closes else None})  # one left: the last spare stays open
client = http.HTTPClient(server.url, connect_timeout=5, read_timeout=5, keeps_spare=True)
for _ in range(4):
    client.request("POST", "/completion", b"{{}}").read()
    time.sleep(0.2)  # the server closes the answer's connection; the spare is opened meanwhile
idle_open = [connection.idle_and_open() for connection in client._idle]
print(json.dumps([on_the_way, idle_open, server.connections]))
"""
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    on_the_way, idle_open, connections = json.loads(run.stdout)
    if closes:  # the first two connect themselves (the second finds the first's connection closed); then spares
        assert (on_the_way, connections) == ([True, True, False, False, False], 5)
    else:
        assert (on_the_way, connections) == ([True], 1)
    assert idle_open == [True]  # one connection left, open; the answers' closed connections are gone


@pytest.mark.parametrize("spare_closed", [False, True], ids=["kept", "closed-by-the-server"])
def test_a_fresh_spare_is_taken_without_a_look_and_one_found_closed_is_retried_once(spare_closed):
    """A connection opened between answers and never used is taken without looking for a hang-up (a
    system call and an exception on every request's way upstream: issue 54). If the server closed it
    all the same, the request finds it so and goes once more, on a new connection: answered once."""
    script = (
        ON_THE_WAY
        + f"""
looks, look = [], http._Connection.idle_and_open
http._Connection.idle_and_open = lambda self: looks.append(sending[0]) or look(self)
server = ScriptedServer([stream] * 3, close_after=1)
client = http.HTTPClient(server.url, connect_timeout=5, read_timeout=5, keeps_spare=True)
bodies = []
for turn in range(3):
    if turn == 2 and {spare_closed}:
        for connection in client._idle:
            connection.sock.shutdown(2)  # as a server's hang-up looks to the client: the next read is the end
    bodies.append(client.request("POST", "/completion", b"{{}}").read().count(b"data: "))
    time.sleep(0.2)
print(json.dumps([bodies, looks.count(True), len(server.heads)]))
"""
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    bodies, looks_on_the_way, requests_received = json.loads(run.stdout)
    assert bodies == [2, 2, 2]  # every request answered whole
    # the second request found the first answer's connection (closed, looked at); the third takes the fresh spare unlooked
    assert looks_on_the_way == 1
    assert requests_received == 3  # none sent twice to the server: a closed spare's request never reached it


def test_a_client_that_keeps_no_spare_opens_nothing_between_answers():
    """Without keeps_spare (and without an event loop, where a spare would take a thread), the pool
    only keeps what the answers left."""
    stream = [HEAD + chunked(event(" a"), event("", stop=True))]
    server = ScriptedServer([stream, stream], close_after=1)
    for keeps_spare in (False, True):  # this test's process has no event loop
        client = HTTPClient(server.url, connect_timeout=1, read_timeout=1, keeps_spare=keeps_spare)
        client.request("POST", "/completion", b"{}").read()
    time.sleep(0.1)
    assert server.connections == 2


def test_a_started_llama_servers_key_is_in_every_request_and_otherwise_none():
    answer = [b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n{"status":"ok"}']
    server = ScriptedServer([answer, answer])
    LlamaCppClient(server.url, api_key="child-secret").health()
    LlamaCppClient(server.url).health()
    assert [b"authorization: bearer child-secret" in head.lower() for head in server.heads] == [True, False]


def test_a_body_read_to_its_end_returns_the_connection_and_close_drops_it():
    answer = [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]
    server = ScriptedServer([answer, answer])
    http = HTTPClient(server.url, connect_timeout=1, read_timeout=1)
    response = http.request("GET", "/x")
    assert response.read() == b"ok" and len(http._idle) == 1
    http.request("GET", "/x").close()
    assert len(http._idle) == 0


@pytest.mark.parametrize("garbage", [b"SSH-2.0-OpenSSH\r\n\r\n", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"])
def test_bytes_that_are_not_http_are_a_bad_upstream_response(garbage):
    from api_like_oai.errors import UpstreamError

    server = ScriptedServer([[garbage]])
    with pytest.raises(UpstreamError) as raised:
        list(LlamaCppClient(server.url).generate("/completion", {"prompt": "x", "stream": True}))
    assert type(raised.value) is UpstreamError  # a 502, not an unreachable upstream's 503
    assert "not HTTP" in raised.value.message or "malformed" in raised.value.message


def _progress_event(processed: int) -> bytes:
    body = {"content": "", "stop": False, "prompt_progress": {"total": 4, "cache": 0, "processed": processed, "time_ms": 1}}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _counted(content: str, predicted: int) -> bytes:
    body = {"content": content, "stop": False, "tokens_predicted": predicted, "tokens_evaluated": 4}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _with_probabilities(content: str) -> bytes:
    body = {
        "content": content,
        "stop": False,
        "tokens_predicted": 5,
        "completion_probabilities": [{"token": content, "logprob": -0.5, "top_logprobs": []}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def test_a_fold_takes_the_tokens_received_together_as_one_event_with_the_last_counts():
    """batched (what a non-streamed answer reads): the same text, counts and finish, in fewer events;
    progress, logprobs and the final event stay events of their own, in order."""
    body = chunked(
        _progress_event(2),
        _progress_event(4),
        _counted(" a", 1),
        _counted(" b", 2),
        _with_probabilities(" c"),
        _counted(" d", 6),
        event("", stop=True),
    )
    server = ScriptedServer([[HEAD + body], [HEAD + body]])
    client = LlamaCppClient(server.url)
    _, *one_by_one = client.generate("/completion", {"prompt": "x", "stream": True})
    batched = list(client.generate("/completion", {"prompt": "x", "stream": True}, batched=True))
    assert len(one_by_one) == 7
    kinds = [type(e).__name__ for e in batched]
    assert kinds == ["PromptProgress", "PromptProgress"] + ["GenerationEvent"] * 4
    texts = [e.text for e in batched[2:]]
    assert texts == [" a b", " c", " d", ""] and "".join(texts) == "".join(e.text for e in one_by_one[2:])
    assert batched[2].completion_tokens == 2 and batched[2].prompt_tokens == 4  # the last of the run's counts
    assert batched[3].logprobs and batched[3].logprobs[0].token == " c"
    assert batched[-1].finish_reason == "stop"


def test_a_batched_read_waits_for_tokens_that_come_one_at_a_time():
    """Tokens arriving apart (a real model's pace) are events apart: nothing is held back for a batch."""
    pieces = [HEAD] + [b"%x\r\n%s\r\n" % (len(e), e) for e in (_counted(" a", 1), _counted(" b", 2))]
    last = event("", stop=True)
    pieces += [b"%x\r\n%s\r\n0\r\n\r\n" % (len(last), last)]
    server = ScriptedServer([pieces], gap=0.2)  # each piece its own TCP segment, far apart
    events = list(LlamaCppClient(server.url).generate("/completion", {"prompt": "x", "stream": True}, batched=True))
    assert [e.text for e in events] == [" a", " b", ""] and events[-1].finish_reason == "stop"


def test_an_error_line_in_a_batch_raises_the_upstreams_error():
    from api_like_oai.errors import UpstreamError

    body = chunked(_counted(" a", 1), b'error: {"message": "slot crashed"}\n\n')
    server = ScriptedServer([[HEAD + body]])
    with pytest.raises(UpstreamError, match="slot crashed"):
        list(LlamaCppClient(server.url).generate("/completion", {"prompt": "x", "stream": True}, batched=True))
