"""The MCP tool loop's pure decisions (mcp/policy.py) and the server URL check with its pinned address
(mcp/addresses.py): a DNS answer with any non-public address is refused (that the connection then goes
to the address checked is tests/faults/test_mcp_tools.py's)."""

from __future__ import annotations

import socket

import pytest

from api_like_oai.errors import InvalidRequest
from api_like_oai.mcp import addresses, policy

WEATHER = {"name": "weather", "annotations": {"readOnlyHint": True}}
ADD = {"name": "add", "annotations": None}


@pytest.mark.parametrize(
    ("allowed", "offered"),
    [
        (None, ["weather", "add"]),
        (["add"], ["add"]),
        ({"read_only": True}, ["weather"]),
        ({"read_only": False}, ["add"]),
        ({"tool_names": ["weather", "add"], "read_only": True}, ["weather"]),
        ({"tool_names": []}, []),
        ({}, ["weather", "add"]),
    ],
)
def test_allowed_tools_filter_the_listed_tools(allowed, offered):
    assert [tool["name"] for tool in (WEATHER, ADD) if policy.tool_allowed(tool, allowed)] == offered


@pytest.mark.parametrize(
    ("require", "asked"),
    [
        (None, {"add", "weather"}),
        ("always", {"add", "weather"}),
        ("never", set()),
        ({"never": {"tool_names": ["weather"]}}, {"add"}),
        ({"always": {"tool_names": ["add"]}}, {"add", "weather"}),
        ({"always": {"tool_names": ["add"]}, "never": {"tool_names": ["weather", "add"]}}, {"add"}),
    ],
)
def test_require_approval_says_which_calls_wait_for_the_client(require, asked):
    assert {name for name in ("add", "weather") if policy.needs_approval(name, require)} == asked


CALL = policy.Call("c1", "tools", "add", "{}")


@pytest.mark.parametrize(
    ("actions", "client_calls", "rounds", "step"),
    [
        ([(policy.RUN, CALL)], 0, 1, policy.AGAIN),
        ([(policy.RUN, CALL)], 0, 3, policy.BOUND),
        ([(policy.RUN, CALL), (policy.ASK, CALL)], 0, 1, policy.ANSWER),
        ([(policy.RUN, CALL)], 1, 1, policy.ANSWER),
        ([], 0, 0, policy.ANSWER),
    ],
)
def test_a_round_leads_to_another_an_answer_or_the_bound(actions, client_calls, rounds, step):
    assert policy.after_round(actions, client_calls, rounds, max_rounds=3) == step


def test_decide_asks_for_approval_only_where_needed():
    other = policy.Call("c2", "tools", "weather", "{}")
    assert policy.decide([CALL, other], lambda call: call.name == "add") == [(policy.ASK, CALL), (policy.RUN, other)]


def test_an_output_is_cut_on_a_character_with_a_note():
    assert policy.truncated("short", 10) == "short"
    cut = policy.truncated("é" * 10, 5)  # 20 bytes; a cut inside a character keeps the whole ones before it
    assert cut.startswith("éé") and cut.endswith("[output truncated by the proxy: 4 of 20 bytes]")


def answering(*answers):
    return lambda host, port, *args, **kwargs: [
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port)) for address in answers
    ]


@pytest.mark.parametrize("answer", [["127.0.0.1"], ["93.184.216.34", "10.0.0.5"], ["169.254.169.254"], ["::1"]])
def test_a_host_with_any_non_public_address_is_refused(monkeypatch, answer):
    monkeypatch.setattr(socket, "getaddrinfo", answering(*answer))
    with pytest.raises(InvalidRequest) as refused:
        addresses.pinned("https://mcp.example.com/mcp", "tools.0.server_url", allow_private=False)
    assert refused.value.param == "tools.0.server_url"


def test_a_public_host_is_pinned_to_the_address_checked(monkeypatch):
    monkeypatch.setattr(socket, "getaddrinfo", answering("93.184.216.34"))
    assert addresses.pinned("https://mcp.example.com/mcp", "p", allow_private=False) == addresses.Pinned(
        "https://mcp.example.com/mcp", "mcp.example.com", "93.184.216.34"
    )


@pytest.mark.parametrize("url", ["ftp://mcp.example.com/", "file:///etc/passwd", "http:///nohost"])
def test_only_http_urls_are_taken(url):
    with pytest.raises(InvalidRequest):
        addresses.pinned(url, "p", allow_private=True)


@pytest.mark.parametrize(
    ("grants", "server", "tools"),
    [
        (None, "github", ()),
        (("github",), "github", ()),
        (("github.search", "github.read"), "github", ("search", "read")),
        (("files",), "github", None),
        ((), "github", None),
        (("github.search", "github"), "github", ()),
        (("githubx",), "github", None),
    ],
)
def test_a_keys_grants_give_a_named_server_whole_tool_by_tool_or_not(grants, server, tools):
    assert policy.granted(grants, server) == tools


@pytest.mark.parametrize(
    ("allowed", "narrowed"),
    [
        (None, ["add"]),
        (["add", "fail"], ["add"]),
        ({"read_only": True}, {"read_only": True, "tool_names": ["add"]}),
        ({"tool_names": ["weather"]}, {"tool_names": []}),
    ],
)
def test_a_grant_of_some_tools_narrows_allowed_tools(allowed, narrowed):
    assert policy.narrowed(allowed, ("add",)) == narrowed


def test_keys_create_takes_mcp_server_grants():
    from api_like_oai.keys_command import _changes, keys_parser

    args = keys_parser().parse_args(["create", "--name", "agent", "--mcp-servers", "github, files.read_file"])
    changes = _changes(args)
    assert changes.mcp_servers == ["github", "files.read_file"]
    assert changes.record_fields(0.0)["mcp_servers"] == ("github", "files.read_file")


def test_the_config_names_mcp_servers_at_urls_and_stdio_ones(tmp_path):
    from api_like_oai.arguments import parse_settings

    config = tmp_path / "config.yaml"
    config.write_text(
        "mcp_servers:\n  github:\n    url: https://mcp.example.com/mcp\n    headers: {X-Team: a}\n"
        "  files:\n    command: npx\n    args: [-y, server-files]\n    env: {ROOT: /srv}\n"
    )
    bounds = parse_settings(["--config", str(config), "--mcp-max-rounds", "3"]).mcp
    assert (bounds.max_rounds, bounds.named("github")) == (
        3,
        policy.NamedServer("github", "https://mcp.example.com/mcp", (("X-Team", "a"),)),
    )
    files = bounds.named("files")
    assert (files.stdio, files.url, files.command, files.env) == (True, None, ("npx", "-y", "server-files"), (("ROOT", "/srv"),))
    # The main process's bridge (mcp/stdio.py) is where the workers reach it, with its secret.
    bridged = bounds.bridged({"files": ("http://127.0.0.1:4000/mcp", "s3cret")})
    assert (bridged.named("files").url, bridged.named("files").headers) == (
        "http://127.0.0.1:4000/mcp",
        (("Authorization", "Bearer s3cret"),),
    )
    assert bridged.named("github") == bounds.named("github")


@pytest.mark.parametrize(
    "server",
    [
        "{command: npx, url: 'https://x.example/mcp'}",
        "{}",
        "{url: 'https://x.example/mcp', args: [a]}",
        "{command: npx, headers: {A: b}}",
        "{command: ' '}",
    ],
)
def test_an_mcp_server_of_the_config_is_a_url_or_a_command(tmp_path, capsys, server):
    from api_like_oai.cli import main

    config = tmp_path / "config.yaml"
    config.write_text(f"mcp_servers:\n  files: {server}\n")
    assert main(["--config", str(config)]) == 2
    assert "mcp_servers.files: " in capsys.readouterr().err


LISTED = {
    "type": "mcp_list_tools",
    "server_label": "s",
    "tools": [{"name": "add", "input_schema": {"type": "object"}}, {"name": "sub", "input_schema": {"type": "object"}}],
}


@pytest.mark.parametrize(
    ("choice", "chat_choice", "offered", "set_aside"),
    [
        (
            {"type": "mcp", "server_label": "s", "name": "sub"},
            {"type": "function", "function": {"name": "sub"}},
            ["f", "add", "sub"],
            {},
        ),
        ({"type": "mcp", "server_label": "s"}, "required", ["add", "sub"], {}),
        ({"type": "mcp", "server_label": "other"}, "auto", ["f", "add", "sub"], {"X-Tool-Choice-Set-Aside": "mcp"}),
    ],
)
def test_a_tool_choice_of_an_mcp_server_or_tool_is_held(choice, chat_choice, offered, set_aside):
    from api_like_oai.dialects.responses import ResponsesRequest
    from api_like_oai.dialects.responses_translation import translate

    translation = translate(
        ResponsesRequest.model_validate(
            {
                "model": "m",
                "input": [{"role": "user", "content": "Hi"}, LISTED],
                "tool_choice": choice,
                "tools": [
                    {"type": "mcp", "server_label": "s", "server_url": "https://mcp.example.com/mcp"},
                    {"type": "function", "name": "f", "parameters": {"type": "object"}},
                ],
            }
        )
    )
    chosen = translation.chat.tool_choice
    assert (chosen if isinstance(chosen, str) else chosen.model_dump(exclude_none=True)) == chat_choice
    assert [tool.function.name for tool in translation.chat.tools] == offered
    assert translation.headers() == set_aside


def test_a_stdio_server_without_its_bridge_is_unavailable_not_a_500():
    from api_like_oai.dialects.responses_mcp import McpTool
    from api_like_oai.errors import UpstreamUnavailable
    from api_like_oai.services.mcp_loop import servers_of

    bounds = policy.Bounds(named_servers=(policy.NamedServer("files", command=("npx",)),))
    with pytest.raises(UpstreamUnavailable, match="'files' is not running"):
        servers_of([("tools.0.server_url", McpTool(type="mcp", server_label="files"))], bounds)
