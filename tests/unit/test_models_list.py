"""/v1/models: OpenAI's fields first, then the context length and capabilities clients read."""

from __future__ import annotations

from api_like_oai import create_app
from api_like_oai.arguments import parse_settings
from api_like_oai.errors import UpstreamUnavailable
from api_like_oai.routes import state

from ..fake_llamacpp import FakeLlamaCpp
from .conftest import make_app

OPENAI_FIELDS = ["id", "object", "created", "owned_by"]


def served_model(app):
    return state(app).registry.default


def test_openai_fields_come_first_then_context_and_capabilities(app_client):
    card = app_client.get("/v1/models").get_json()["data"][0]
    assert list(card) == [*OPENAI_FIELDS, "context_length", "max_model_len", "capabilities", "input_modalities"]
    assert card["capabilities"] == ["completion", "chat", "tools"]
    assert card["input_modalities"] == ["text"]


def test_a_model_whose_llama_server_has_a_projector_lists_images():
    fake = FakeLlamaCpp(props_extra={"modalities": {"vision": True, "audio": False}}).start()
    try:
        card = (
            make_app("--llama-api", fake.url, "--chat-prompt-model", "chatml")
            .test_client()
            .get("/v1/models")
            .get_json()["data"][0]
        )
        assert card["input_modalities"] == ["text", "image"]
        assert card["capabilities"] == ["completion", "chat", "tools", "vision"]
    finally:
        fake.stop()


def test_an_upstream_that_is_down_gives_null_not_an_error(app_client):
    response = app_client.get("/v1/models/llama.cpp")
    assert response.status_code == 200
    assert (response.get_json()["context_length"], response.get_json()["max_model_len"]) == (None, None)


def test_the_context_comes_from_props_once():
    fake = FakeLlamaCpp().start()
    try:
        client = make_app("--llama-api", fake.url, "--chat-prompt-model", "chatml").test_client()
        for _ in range(3):
            card = client.get("/v1/models").get_json()["data"][0]
            assert card["context_length"] == card["max_model_len"] == 2048  # the fake's n_ctx per slot
        assert fake.get_paths.count("/props") == 1
    finally:
        fake.stop()


def test_a_silent_upstream_is_not_asked_again_on_every_listing(monkeypatch):
    app = make_app("--chat-prompt-model", "chatml")
    client = served_model(app).upstream.servers()[0]
    asked = []

    def refuse():
        asked.append(1)
        raise UpstreamUnavailable("down")

    monkeypatch.setattr(client, "props", refuse)
    for _ in range(3):
        assert app.test_client().get("/v1/models").get_json()["data"][0]["context_length"] is None
    assert len(asked) == 1


def test_the_configured_context_length_and_an_openai_upstream(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("""
models:
  local:
    upstreams: [http://127.0.0.1:9]
    context_length: 4096
  remote:
    kind: openai
    upstreams: [http://127.0.0.1:9/v1]
""")
    listing = create_app(parse_settings(["--config", str(config)])).test_client().get("/v1/models").get_json()
    cards = {card["id"]: card for card in listing["data"]}
    assert (cards["local"]["context_length"], cards["local"]["max_model_len"]) == (4096, 4096)
    assert cards["remote"]["context_length"] is None
    assert cards["remote"]["capabilities"] == ["completion", "chat"]
