"""The original script's flags, defaults and meaning are kept."""

from __future__ import annotations

import pytest

from api_like_oai.arguments import build_parser, settings_from_args
from api_like_oai.cli import main


def test_original_defaults():
    args = build_parser().parse_args([])
    assert args.chat_prompt == (
        "A chat between a curious user and an artificial intelligence assistant. "
        "The assistant follows the given rules no matter what."
    )
    assert (args.user_name, args.ai_name, args.system_name, args.stop) == ("USER: ", "ASSISTANT: ", "ASSISTANT's RULE: ", "</s>")
    assert (args.llama_api, args.host, args.port, args.api_key) == ("http://127.0.0.1:8080", "127.0.0.1", 8081, None)


def test_a_literal_backslash_n_in_a_flag_is_a_newline():
    settings = settings_from_args(build_parser().parse_args(["--user-name", "\\nUSER: ", "--stop", "\\n"]))
    legacy = settings.models[0].template.legacy
    assert legacy.user_name == "\nUSER: " and legacy.stop == "\n"
    assert settings.models[0].template.legacy_explicit


def test_flags_come_from_the_environment_too(monkeypatch):
    monkeypatch.setenv("API_LIKE_OAI_LLAMA_API", "http://10.0.0.9:8080")
    monkeypatch.setenv("API_LIKE_OAI_PORT", "9000")
    args = build_parser().parse_args(["--port", "9001"])
    assert args.llama_api == "http://10.0.0.9:8080" and args.port == 9001  # the command line wins


def test_unknown_template_name_stops_start_up_with_close_matches(capsys):
    assert main(["--chat-prompt-model", "vicuna_v1"]) == 2
    error = capsys.readouterr().err
    assert "unknown chat template 'vicuna_v1'" in error and "vicuna_v1.1" in error
    assert "Traceback" not in error


def test_every_original_flag_is_documented_in_help(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    help_text = capsys.readouterr().out
    for flag in (
        "--chat-prompt",
        "--user-name",
        "--ai-name",
        "--system-name",
        "--stop",
        "--llama-api",
        "--api-key",
        "--host",
        "--port",
        "--chat-prompt-model",
    ):
        assert flag in help_text


@pytest.mark.parametrize(
    ("argv", "native_api"),
    [
        ([], True),
        (["--native-api"], True),
        (["--no-native-api"], False),
        (["--native-api", "false"], False),
        (["--native-api=off"], False),
        (["--native-api", "yes"], True),
    ],
)
def test_native_api_switch_spellings(argv, native_api):
    assert settings_from_args(build_parser().parse_args(argv)).native_api is native_api


def test_native_api_switch_from_the_environment(monkeypatch):
    monkeypatch.setenv("API_LIKE_OAI_NATIVE_API", "false")
    assert build_parser().parse_args([]).native_api is False
    assert build_parser().parse_args(["--native-api"]).native_api is True  # the command line wins


def test_native_api_switch_refuses_other_words(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--native-api", "maybe"])
    assert "expected true or false, not 'maybe'" in capsys.readouterr().err
