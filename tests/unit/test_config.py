"""The YAML config file: precedence, the shipped example, and errors that name file, line and key."""

from __future__ import annotations

import textwrap

import pytest

from api_like_oai.arguments import parse_settings
from api_like_oai.cli import main
from api_like_oai.services.models import ModelRegistry

from ..servers import ROOT


def write(tmp_path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_the_shipped_example_loads():
    settings = parse_settings(["--config", str(ROOT / "config.example.yaml")])
    smollm, vicuna = settings.models
    assert smollm.name == "smollm" and smollm.aliases == ("gpt-3.5-turbo", "gpt-4o-mini")
    assert smollm.template.uses_model_template()
    assert smollm.defaults == {"temperature": 0.7, "top_p": 0.9} and smollm.max_tokens == 1024
    assert vicuna.template.chat_prompt_model == "vicuna_v1.1"
    assert settings.default_model == "smollm" and settings.strict_model_names


def test_command_line_over_environment_over_file(tmp_path, monkeypatch):
    config = write(
        tmp_path,
        """\
        port: 9001
        host: 0.0.0.0
        log_format: json
    """,
    )
    monkeypatch.setenv("API_LIKE_OAI_PORT", "9002")
    monkeypatch.setenv("API_LIKE_OAI_HOST", "127.0.0.2")
    settings = parse_settings(["--config", config, "--port", "9003"])
    assert (settings.port, settings.host, settings.log_format) == (9003, "127.0.0.2", "json")


def test_without_models_the_flags_describe_one_model(tmp_path):
    settings = parse_settings(["--config", write(tmp_path, "llama_api: http://127.0.0.1:9999\n")])
    assert settings.models[0].upstreams == ("http://127.0.0.1:9999",) and not settings.strict_model_names


@pytest.mark.parametrize(
    "text, expected",
    [
        ("port: 8081\nbogus_flag: 1\n", ":2: bogus_flag: unknown key"),
        ("models:\n  a:\n    upstreams: [http://x]\n    temprature: 1\n", ":4: models.a.temprature: unknown key"),
        ("models:\n  a:\n    upstreams: []\n", ":3: models.a.upstreams: List should have at least 1 item"),
        ("models:\n  a:\n    upstreams: [http://x]\n    max_tokens: lots\n", ":4: models.a.max_tokens: "),
        ("models:\n  a:\n    upstreams: [http://x]\n    defaults:\n      temp: 1\n", ":4: models.a.defaults: "),
        (
            "models:\n  a:\n    upstreams: [http://x]\n    chat_template: /no/such/file.jinja\n",
            ":4: models.a.chat_template: --chat-template '/no/such/file.jinja' is neither a file",
        ),
        (
            "models:\n  a:\n    upstreams: [http://x]\n    chat_prompt_model: vicuna_v1\n",
            ":4: models.a.chat_prompt_model: unknown chat template 'vicuna_v1'",
        ),
        ("port: [1\n", ":2: not valid YAML"),
        ("port: eighty\n", "port"),
        ("default_model: b\nmodels:\n  a:\n    upstreams: [http://x]\n", ":1: default_model: 'b' is not a model name"),
    ],
)
def test_config_errors_name_file_line_and_key(tmp_path, capsys, text, expected):
    path = write(tmp_path, text)
    assert main(["--config", path]) == 2
    error = capsys.readouterr().err
    assert expected in error and "Traceback" not in error
    if expected.startswith(":"):
        assert f"{path}{expected}" in error  # file:line: key


def test_routing_is_prefix_by_default_and_settable_globally_and_per_model(tmp_path):
    from api_like_oai.backends.routing import RoutingPolicy

    config = write(
        tmp_path,
        """\
        routing_load_margin: 4
        models:
          agents:
            upstreams: [http://a, http://b]
          batch:
            upstreams: [http://a, http://b]
            routing: least-busy
            routing_load_margin: 0
    """,
    )
    agents, batch = parse_settings(["--config", config]).models
    assert (agents.routing, batch.routing) == (RoutingPolicy("prefix", 4), RoutingPolicy("least-busy", 0))
    assert parse_settings(["--routing", "least-busy"]).models[0].routing == RoutingPolicy("least-busy", 2)
    assert parse_settings([]).models[0].routing == RoutingPolicy("prefix", 2)


def test_an_unknown_routing_mode_is_a_config_error(tmp_path, capsys):
    path = write(tmp_path, "models:\n  a:\n    upstreams: [http://x]\n    routing: sticky\n")
    assert main(["--config", path]) == 2
    assert f"{path}:4: models.a.routing: " in capsys.readouterr().err


def test_aliases_and_default_model_route_requests(tmp_path):
    from api_like_oai.app import build_registry

    settings = parse_settings(["--config", str(ROOT / "config.example.yaml")])
    registry: ModelRegistry = build_registry(settings)
    assert registry.lookup("gpt-3.5-turbo")[0].name == "smollm"
    assert registry.lookup(None)[0].name == "smollm"
    from api_like_oai.errors import ModelNotFound

    with pytest.raises(ModelNotFound, match="smollm-vicuna"):
        registry.lookup("gpt-17")


def test_defaults_overrides_and_cap_apply_to_requests():
    from api_like_oai.app import build_registry
    from api_like_oai.protocol import ChatCompletionRequest
    from api_like_oai.services.fitting import effective_max_tokens

    model = build_registry(parse_settings(["--config", str(ROOT / "config.example.yaml")])).lookup("smollm")[0]
    messages = [{"role": "user", "content": "hi"}]
    adjusted = model.adjust(ChatCompletionRequest(messages=messages, temperature=0.1, repeat_penalty=1.5, max_tokens=5000))
    assert (adjusted.temperature, adjusted.top_p, adjusted.repeat_penalty) == (0.1, 0.9, 1.1)
    limits = parse_settings(["--config", str(ROOT / "config.example.yaml")]).limits
    assert effective_max_tokens(ChatCompletionRequest(messages=messages, max_tokens=5000), model.settings, limits) == 1024
    assert effective_max_tokens(ChatCompletionRequest(messages=messages), model.settings, limits) == 1024


def test_the_manual_shows_the_shipped_example_verbatim():
    example = (ROOT / "config.example.yaml").read_text().rstrip()
    assert example in (ROOT / "docs" / "configuration.md").read_text()


def test_the_store_from_file_environment_and_flags(tmp_path, monkeypatch):
    config = write(
        tmp_path,
        """\
        store: redis://cache:6379/1
        store_ttl: 12h
        store_secret_file: /etc/api-like-oai/store.secret
    """,
    )
    settings = parse_settings(["--config", config])
    assert (settings.store.kind, settings.store.location) == ("redis", "redis://cache:6379/1")
    assert settings.store.ttl_seconds == 12 * 3600 and settings.store.secret_file == "/etc/api-like-oai/store.secret"
    monkeypatch.setenv("API_LIKE_OAI_STORE", "none")
    assert parse_settings(["--config", config]).store.kind == "none"
    flagged = parse_settings(["--config", config, "--store", f"sqlite://{tmp_path}/s.db", "--store-ttl", "90"])
    assert (flagged.store.location, flagged.store.ttl_seconds) == (f"{tmp_path}/s.db", 90)


def test_an_unusable_store_stops_start_up(capsys):
    assert main(["--store", "postgres://db/x"]) == 2
    assert "--store 'postgres://db/x': expected sqlite:///PATH" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--store-ttl", "soon"])
    assert "argument --store-ttl: invalid duration value: 'soon'" in capsys.readouterr().err
