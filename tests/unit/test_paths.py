"""Doubled slashes (from a base URL with a trailing slash) reach the same route, for every route."""

from __future__ import annotations

import pytest

from api_like_oai.middleware import collapse_slashes

from .conftest import make_app

CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def at(path: str) -> dict:
    """Test-client options for a request whose PATH_INFO is `path` as sent (the client would read a
    leading `//` as the start of a host name)."""
    return {"environ_overrides": {"PATH_INFO": path}}


@pytest.mark.parametrize(
    ("path", "collapsed"),
    [
        ("/v1//models", "/v1/models"),
        ("//v1/chat/completions", "/v1/chat/completions"),
        ("///v1///completions//", "/v1/completions/"),
        ("/v1/models", "/v1/models"),
        ("/", "/"),
    ],
)
def test_runs_of_slashes_become_one(path, collapsed):
    assert collapse_slashes(path) == collapsed


@pytest.mark.parametrize("path", ["/v1//models", "//v1/models", "/v1///models"])
def test_a_doubled_slash_lists_the_models_without_a_redirect(app_client, path):
    response = app_client.get("/", **at(path))
    assert response.status_code == 200
    assert response.get_json() == app_client.get("/v1/models").get_json()


@pytest.mark.parametrize("path", ["//v1/chat/completions", "/v1//chat/completions", "/v1/chat//completions"])
def test_a_doubled_slash_reaches_the_chat_route(app_client, path):
    response = app_client.post("/", json=CHAT, **at(path))
    assert response.status_code == 503  # the route ran and found the upstream down; not a 404 or a 308
    assert response.get_json()["error"]["code"] == "upstream_unavailable"


def test_the_key_check_sees_the_collapsed_path():
    client = make_app("--chat-prompt-model", "chatml", "--api-key", "secret").test_client()
    assert client.get("/", **at("/v1//models")).status_code == 401
    assert client.get("/", headers={"Authorization": "Bearer secret"}, **at("//v1//models")).status_code == 200
    assert client.get("/", **at("//openapi.json")).status_code == 200  # public under any spelling
