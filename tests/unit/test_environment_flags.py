"""Every flag can be set as API_LIKE_OAI_<FLAG>: the container image is configured that way alone."""

from __future__ import annotations

import argparse

import pytest

from api_like_oai.arguments import ENV_PREFIX, Switch, build_parser, count, flag_actions

ACTIONS = flag_actions(build_parser())


def environment_value(action: argparse.Action) -> tuple[str, object]:
    """(what the environment says, the value the flag then has), never the flag's default."""
    if isinstance(action, Switch):
        return ("false", False) if action.default else ("true", True)
    if isinstance(action, argparse._StoreTrueAction):
        return "yes", True
    if isinstance(action, argparse._AppendAction):
        return "first,second", ["first", "second"]
    if action.choices:
        choice = next(str(choice) for choice in reversed(action.choices) if choice != action.default)
        return choice, choice
    if action.type in (int, count):
        return "7", 7
    if action.type is float:
        return "0.5", 0.5
    if action.type is not None:  # durations
        return "90m", 5400.0
    return "/from/the/environment", "/from/the/environment"


@pytest.mark.parametrize("action", ACTIONS, ids=[action.dest for action in ACTIONS])
def test_every_flag_comes_from_the_environment(action, monkeypatch):
    text, expected = environment_value(action)
    monkeypatch.setenv(ENV_PREFIX + action.dest.upper(), text)
    assert getattr(build_parser().parse_args([]), action.dest) == expected


def test_the_command_line_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv("API_LIKE_OAI_MODELS_DIR", "/models")
    assert build_parser().parse_args(["--models-dir", "/elsewhere"]).models_dir == "/elsewhere"
