"""The supervisor's state machine and its socket, apart: every status change walked against
plan.TRANSITIONS (an illegal one raises), the typed messages both ends share (messages.py) read back as
they were written, and a worker's client against the service's connection over a real Unix socket."""

from __future__ import annotations

import asyncio
import json

import pytest

from api_like_oai.errors import ModelNotFound
from api_like_oai.supervisor import messages, plan
from api_like_oai.supervisor.client import SupervisorClient
from api_like_oai.supervisor.listener import Connection
from api_like_oai.supervisor.service import Managed, Supervisor
from api_like_oai.supervisor.spec import LaunchSpec, SupervisorSettings

STATUSES = (plan.UNLOADED, plan.LOADING, plan.LOADED, plan.STOPPING, plan.FAILED)


@pytest.mark.parametrize("old", STATUSES)
@pytest.mark.parametrize("new", STATUSES)
def test_a_status_change_is_allowed_only_when_the_table_lists_it(old, new):
    model = Managed(LaunchSpec.__new__(LaunchSpec), status=old)
    if (old, new) in plan.TRANSITIONS:
        model.move(new)
        assert model.status == new
    else:
        with pytest.raises(plan.IllegalTransition, match=f"from {old} to {new}"):
            model.move(new)
        assert model.status == old


def test_every_status_is_reachable_from_unloaded_and_every_one_has_a_way_out():
    reached, frontier = {plan.UNLOADED}, [plan.UNLOADED]
    while frontier:
        status = frontier.pop()
        for old, new in plan.TRANSITIONS:
            if old == status and new not in reached:
                reached.add(new)
                frontier.append(new)
    assert reached == set(STATUSES)
    assert {old for old, _ in plan.TRANSITIONS} == set(STATUSES)


REQUESTS = [
    messages.Acquire("a", ["http://127.0.0.1:1"]),
    messages.Acquire("a"),
    messages.Load("a", ["--rpc", "x"], 512),
    messages.Load("a"),
    messages.Unload("a"),
    messages.KeepAlive("a", 30),
    messages.KeepAlive("a", 2.5),
    messages.Status(),
    messages.Logs("a"),
    messages.Events(),
]
REPLIES = [
    messages.Wait("loading model"),
    messages.Granted(["http://127.0.0.1:1"]),
    messages.Refused("too many", 429, 5),
    messages.Refused("failed", 503, None),
    messages.ModelStatus({"value": "loaded"}),
    messages.ServerStatus({"models": {}, "memory_budget_mib": 10}),
    messages.LogLines(["a", "b"]),
    messages.Event({"model": "a", "status": {"value": "loaded"}}),
]


@pytest.mark.parametrize("request_", REQUESTS, ids=repr)
def test_a_request_is_read_back_as_written(request_):
    line = messages.encode(request_)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert messages.read_request(line) == request_


@pytest.mark.parametrize("reply", REPLIES, ids=repr)
def test_a_reply_is_read_back_as_written(reply):
    assert messages.reply_of(json.loads(messages.encode(reply))) == reply


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"not json",
        b"[]",
        b'{"op": "reboot"}',
        b'{"model": "a"}',
        b'{"op": "acquire"}',
        b'{"op": "acquire", "model": 3}',
        b'{"op": "acquire", "model": "a", "unreachable": "http://x"}',
        b'{"op": "keep_alive", "model": "a", "seconds": "10"}',
        b'{"op": "load", "model": "a", "lent_mib": 1.5}',
    ],
)
def test_a_line_that_is_no_request_is_refused_by_type(line):
    with pytest.raises(messages.BadMessage):
        messages.read_request(line)


def test_the_client_and_the_service_speak_the_same_messages(tmp_path):
    """A supervisor with no models on a Unix socket (this loop), and a worker's client (a thread)."""
    path = str(tmp_path / "supervisor.sock")
    supervisor = Supervisor(SupervisorSettings("llama-server", (), 1000))

    async def both():
        server = await asyncio.start_unix_server(lambda reader, writer: Connection(supervisor, reader, writer).serve(), path=path)
        async with server:
            await asyncio.to_thread(worker, SupervisorClient(path))

    asyncio.run(both())


def worker(client: SupervisorClient) -> None:
    assert client.request(messages.Status()) == messages.ServerStatus(
        {"models": {}, "memory_budget_mib": 1000, "max_loaded": None, "devices": {"memory": {"budget_mib": 1000, "used_mib": 0}}}
    )
    assert client.ask("status")["memory_budget_mib"] == 1000
    with pytest.raises(ModelNotFound, match="not one the proxy starts"):
        client.ask("logs", model="nope")
    with pytest.raises(ModelNotFound):
        client.acquire("nope")
    events = client.events()
    assert next(events)["models"] == {}
    events.close()
