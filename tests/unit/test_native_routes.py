"""llama.cpp's native routes in the app: the switch, the body limit, errors before any upstream answers."""

from __future__ import annotations

import pytest

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
