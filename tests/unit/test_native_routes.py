"""llama.cpp's native routes in the app: the switch, the body limit, errors before any upstream answers."""

from __future__ import annotations

import pytest

from api_like_oai.errors import InvalidRequest
from api_like_oai.services.native import requested_model

from .conftest import make_app

NATIVE_ROUTES = [
    ("POST", "/completion"),
    ("POST", "/infill"),
    ("GET", "/props"),
    ("POST", "/tokenize"),
    ("POST", "/detokenize"),
    ("POST", "/apply-template"),
    ("GET", "/slots"),
    ("GET", "/llamacpp/metrics"),
]


@pytest.mark.parametrize(("method", "path"), NATIVE_ROUTES)
def test_switched_off_they_are_404(method, path):
    client = make_app("--chat-prompt-model", "chatml", "--no-native-api").test_client()
    response = client.open(path, method=method, json={"prompt": "hi"})
    assert response.status_code == 404 and response.get_json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(("method", "path"), NATIVE_ROUTES)
def test_an_upstream_that_is_down_is_503_in_openai_shape(app_client, method, path):
    response = app_client.open(path, method=method, json={"prompt": "hi"})
    assert response.status_code == 503
    assert response.get_json()["error"]["code"] == "upstream_unavailable"


def test_the_body_limit_applies():
    client = make_app("--chat-prompt-model", "chatml", "--max-body-bytes", "100").test_client()
    response = client.post("/completion", json={"prompt": "x" * 200})
    assert response.status_code == 413 and response.get_json()["error"]["code"] == "request_too_large"


@pytest.mark.parametrize(
    ("body", "query_model", "chosen"),
    [
        (b'{"prompt": "hi", "model": "small"}', "big", "small"),  # the body's field first
        (b'{"prompt": "hi"}', "big", "big"),
        (b'  {"model": 5}', "big", "big"),
        (b"not json", "big", "big"),
        (b'["model"]', None, None),
        (b"", None, None),
    ],
)
def test_the_model_comes_from_the_body_else_the_query(body, query_model, chosen):
    assert requested_model(body, query_model) == chosen


@pytest.mark.parametrize("body", [b"", b"not json", b'["model"]', b"{broken"])
def test_a_native_post_takes_only_a_json_object(body):
    """llama-server answered an empty or non-object body with a 500 (schemathesis, issue 48)."""
    with pytest.raises(InvalidRequest, match="must be a JSON object"):
        requested_model(body, "m", posted=True)


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b'{"prompt": "hi", "n_probs": 100000000, "n_predict": 40}', "n_probs is at most 100"),
        (b'{"prompt": "hi", "n_cmpl": 1000}', "n_cmpl is at most 16"),
        (b'{"prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nests too deeply"),
    ],
)
def test_a_native_body_that_would_cost_without_bound_is_a_400_before_any_upstream_work(body, said):
    """issue 48: n_probs 1e8 took the worker to 2 GB and llama-server to 3 GB; deep JSON was a 500."""
    with pytest.raises(InvalidRequest, match=said):
        requested_model(body, "m")
