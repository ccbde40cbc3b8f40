"""ProxyFlask (api_like_oai/flask_app.py): what Flask works out on every request is remembered, and the
answers stay Flask's own: the same route, the same host checks, whichever request came before."""

from __future__ import annotations

import inspect

from werkzeug.routing import Map

from api_like_oai.flask_app import MOST_ADAPTERS

from .conftest import make_app


def counting(monkeypatch, owner, name: str) -> list:
    """A list that grows by one each time owner.name is called (it still runs)."""
    calls = []
    original = getattr(owner, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_a_repeated_request_reuses_its_url_adapter_and_asks_inspect_nothing(monkeypatch):
    """Issue 54: on the way to the first token, the second request to a path binds no URL map (werkzeug
    parses the Host header twice and encodes it as IDNA for that) and asks no view or hook whether it is a
    coroutine."""
    client = make_app("--chat-prompt-model", "chatml").test_client()
    assert client.get("/v1/models").status_code == 200
    binds = counting(monkeypatch, Map, "bind_to_environ")
    asked = counting(monkeypatch, inspect, "iscoroutinefunction")
    assert client.get("/v1/models").status_code == 200
    assert binds == [] and asked == []
    client.get("/v1/models/some-model")  # a path not seen yet: bound once
    assert len(binds) == 1


def test_the_host_check_sees_each_requests_own_host_after_another_was_remembered():
    """The adapter remembered for one Host is not another's: a rebound name after an allowed one on the
    same path is still refused, and the allowed one still served after it."""
    client = make_app("--chat-prompt-model", "chatml").test_client()
    turns = (("127.0.0.1:8081", 200), ("rebound.example:8081", 403), ("127.0.0.1:8081", 200), ("rebound.example", 403))
    for host, status in turns:
        assert client.get("/v1/models", headers={"Host": host}).status_code == status


def test_routing_answers_stay_flasks_for_methods_paths_and_many_paths():
    """A method the route does not take is a 405 after the same path answered a GET, an unknown path a
    404; past the table's bound (a client choosing its paths) it is emptied and routing goes on right."""
    client = make_app("--chat-prompt-model", "chatml").test_client()
    assert client.get("/v1/models").status_code == 200
    assert client.delete("/v1/models").status_code == 405
    for number in range(MOST_ADAPTERS + 10):
        assert client.get(f"/v1/no-such-path-{number}").status_code == 404
    assert client.get("/v1/models").status_code == 200
    assert client.get("/v1/models?x=1").status_code == 200
