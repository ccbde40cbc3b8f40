"""A formatter of the user's plugs in by --chat-formatter module:Class or by entry point."""

from __future__ import annotations

import sys

import pytest

from api_like_oai.cli import main
from api_like_oai.prompts import ChatFormatter

from ..plugin_formatter import ShoutingFormatter
from .conftest import make_app

BODY = {"messages": [{"role": "user", "content": "hello"}], "stop": "!"}
EXPECTED = {"prompt": "user: HELLO\nassistant:", "stop": ["###"]}


def test_plugin_satisfies_the_interface():
    from api_like_oai.prompts import FormatterOptions

    assert isinstance(ShoutingFormatter(FormatterOptions()), ChatFormatter)


def test_chat_formatter_flag_with_module_and_class():
    client = make_app("--chat-formatter", "tests.plugin_formatter:ShoutingFormatter").test_client()
    assert client.post("/v1/internal/chat-prompt", json=BODY).get_json() == EXPECTED
    info = client.get("/v1/internal/model/info").get_json()
    assert info["template"] == {"source": "plugin", "name": "shouting"}


@pytest.fixture
def installed_entry_point(tmp_path, monkeypatch):
    """A distribution on sys.path that declares the formatter in the api_like_oai.formatters group."""
    dist_info = tmp_path / "shouting_plugin-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: shouting-plugin\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text(
        "[api_like_oai.formatters]\nshouting = tests.plugin_formatter:ShoutingFormatter\n"
    )
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])


def test_chat_formatter_by_entry_point_name(installed_entry_point):
    client = make_app("--chat-formatter", "shouting").test_client()
    assert client.post("/v1/internal/chat-prompt", json=BODY).get_json() == EXPECTED


def test_a_formatter_that_cannot_load_stops_start_up(capsys):
    assert main(["--chat-formatter", "no_such_module:Thing"]) == 2
    assert "cannot load chat formatter" in capsys.readouterr().err
    assert main(["--chat-formatter", "no-such-entry-point"]) == 2
    assert "api_like_oai.formatters" in capsys.readouterr().err
