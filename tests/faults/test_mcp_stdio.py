"""A stdio MCP server of the config (issue 39): a real one (tests/mcp_servers.py, the `mcp` SDK's, over
stdin and stdout) that the proxy starts once, behind a bridge process its workers reach over HTTP
(api_like_oai/mcp/stdio.py, bridge.py), driven through Responses and Messages with the scripted model
of tests/faults/test_mcp_tools.py. Its process killed mid-call: that call's error, the next call
works; its bridge killed: another, with a new server; the proxy stopped or killed: nothing left."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

import anthropic
import pytest
import requests
from playwright.sync_api import expect

from ..conftest import openai_client
from ..e2e.test_dashboard_browser import page  # noqa: F401 - a headless Chromium's page
from ..otlp_receiver import OtlpReceiver
from ..servers import children_of, command_line, descendants_of, eventually, kill_instance, still_running
from .test_mcp_tools import PLAN, created, fake, planned_turn  # noqa: F401 - the scripted model and its plan

ADMIN = {"Authorization": "Bearer admin-key-for-stdio"}
FILES = {"type": "mcp", "server_label": "files", "require_approval": "never"}
BRIDGE = "api_like_oai.mcp.bridge"


def stdio_config(folder) -> str:
    config = folder / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "mcp_servers": {
                    "files": {
                        "command": sys.executable,
                        "args": ["-m", "tests.mcp_servers", "stdio"],
                        "env": {"FROM_CONFIG": "1"},
                    }
                }
            }
        )
    )
    return str(config)


@pytest.fixture(scope="module")
def receiver():
    server = OtlpReceiver().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(fake, start_proxy, receiver, tmp_path_factory):  # noqa: F811 - the fake is test_mcp_tools'
    folder = tmp_path_factory.mktemp("stdio")
    return start_proxy(
        "--llama-api",
        fake.url,
        "--config",
        stdio_config(folder),
        "--mcp-call-timeout",
        "20",
        "--store",
        f"sqlite:///{folder / 'store.db'}",
        "--admin-key",
        ADMIN["Authorization"].split()[1],
        "--otlp-endpoint",
        receiver.url,
        env={"OTEL_BSP_SCHEDULE_DELAY": "100"},
    )


@pytest.fixture
def plan():
    yield PLAN
    PLAN.clear()


def respond(proxy, plan, *calls, headers=ADMIN, **body) -> dict:
    plan[:] = list(calls)
    response = requests.post(
        proxy.url + "/v1/responses",
        headers=headers,
        timeout=60,
        json={"model": "m", "input": "Go.", "tools": [FILES], "store": False, **body},
    )
    assert response.status_code == 200, response.text
    return response.json()


def server_pid(proxy, plan) -> int:
    return int(respond(proxy, plan, ("pid", {}))["output"][1]["output"])


def bridges_of(proxy) -> list[int]:
    return [pid for pid in children_of(proxy.process.pid) if BRIDGE in command_line(pid)]


@pytest.mark.parametrize("stream", [False, True])
def test_a_stdio_server_of_the_config_answers_through_responses(proxy, plan, stream):
    plan += [("add", {"a": 2, "b": 3})]
    client = openai_client(proxy.url, api_key=ADMIN["Authorization"].split()[1])
    body = {"model": "m", "input": "Add 2 and 3.", "tools": [FILES]}
    response, kinds = created(client, body, stream)
    assert ("response.mcp_call.completed" in kinds) == stream
    listing, call, answer = response.output
    assert {tool.name for tool in listing.tools} == {"add", "weather", "inventory", "fail", "big", "slow", "pid"}
    assert (call.type, call.server_label, call.name, call.output, call.error) == ("mcp_call", "files", "add", "5", None)
    assert answer.content[0].text == "Results: 5"


@pytest.mark.parametrize("stream", [False, True])
def test_a_stdio_server_of_the_config_answers_through_messages(proxy, plan, stream):
    plan += [("add", {"a": 4, "b": 5}), ("fail", {})]
    client = anthropic.Anthropic(
        base_url=proxy.url, api_key=ADMIN["Authorization"].split()[1], max_retries=0, _strict_response_validation=True
    )
    body = {
        "model": "m",
        "max_tokens": 200,
        "betas": ["mcp-client-2025-04-04"],
        "messages": [{"role": "user", "content": "Add 4 and 5, then fail."}],
        "mcp_servers": [{"type": "url", "url": "config", "name": "files"}],
    }
    if stream:
        with client.beta.messages.stream(**body) as events:
            message = events.get_final_message()
    else:
        message = client.beta.messages.create(**body)
    assert [block.type for block in message.content] == [
        "mcp_tool_use",
        "mcp_tool_result",
        "mcp_tool_use",
        "mcp_tool_result",
        "text",
    ]
    added, failed = message.content[1], message.content[3]
    assert (added.is_error, added.content[0].text, failed.is_error) == (False, "9", True)
    assert "the fail tool failed" in failed.content[0].text


def test_each_mcp_step_is_a_span_with_its_server_tool_and_error(proxy, receiver, plan):
    def traces() -> list[list[dict]]:
        """The traces of /v1/responses requests with a span of the fail tool, oldest first."""
        roots = [span for span in receiver.spans if span["attributes"].get("http.route") == "/v1/responses"]
        found = [[span for span in receiver.spans if span["trace_id"] == root["trace_id"]] for root in roots]
        return [trace for trace in found if any(span["name"] == "mcp files fail" for span in trace)]

    before = len(traces())
    respond(proxy, plan, ("add", {"a": 1, "b": 2}), ("fail", {}), input="Trace me.")
    eventually(lambda: len(traces()) > before, "the trace exported")
    trace = traces()[-1]
    [root] = [span for span in trace if not span["parent_span_id"]]
    steps = sorted((span for span in trace if span["name"].startswith("mcp ")), key=lambda span: span["start"])
    assert [span["name"] for span in steps] == ["mcp files tools/list", "mcp files add", "mcp files fail"]
    assert all(
        span["parent_span_id"] == root["span_id"] and root["start"] <= span["start"] <= span["end"] <= root["end"]
        for span in steps
    )
    listing, added, failed = steps
    assert listing["attributes"] == {"mcp.method.name": "tools/list", "api_like_oai.mcp.server": "files"}
    assert (added["attributes"]["gen_ai.tool.name"], added["error"]) == ("add", False)
    assert (failed["error"], failed["attributes"]["error.type"], failed["attributes"]["gen_ai.operation.name"]) == (
        True,
        "mcp_tool_execution_error",
        "execute_tool",
    )
    assert not root["error"]


def test_the_dashboard_shows_a_requests_mcp_steps_while_it_runs(proxy, plan):
    answered = threading.Thread(target=respond, args=(proxy, plan, ("add", {"a": 1, "b": 1}), ("slow", {"seconds": 3})))
    answered.start()
    try:
        steps = running_steps(proxy, "slow")
    finally:
        answered.join(60)
    assert [(step["server"], step["tool"], step["running"], step["error"]) for step in steps] == [
        ("files", "tools/list", False, None),
        ("files", "add", False, None),
        ("files", "slow", True, None),
    ]
    assert all(step["seconds"] >= 0 for step in steps)


def test_the_dashboard_page_lists_the_steps_under_the_request(proxy, plan, page):  # noqa: F811
    page.goto(proxy.url + "/ui")
    page.fill("#key", ADMIN["Authorization"].split()[1])
    page.click("#key-form button[type=submit]")
    expect(page.locator("#connection")).to_have_text("live", timeout=30_000)
    answered = threading.Thread(target=respond, args=(proxy, plan, ("fail", {}), ("slow", {"seconds": 4})))
    answered.start()
    try:
        steps = page.locator("#requests tr.steps")
        expect(steps).to_contain_text("files · slow", timeout=30_000)
        expect(steps).to_contain_text("(running)")
        expect(steps.locator(".step-error")).to_contain_text("files · fail")
        expect(steps.locator(".step-error")).to_contain_text("the fail tool failed")
    finally:
        answered.join(60)
    expect(page.locator("#requests tbody tr")).to_have_count(0, timeout=30_000)  # answered: its row and steps go


def running_steps(proxy, tool: str) -> list[dict]:
    """The MCP steps of the first request in flight the dashboard's stream shows running `tool`."""
    with requests.get(proxy.url + "/v1/internal/events", headers=ADMIN, stream=True, timeout=30) as stream:
        event = None
        for line in stream.iter_lines():
            if line.startswith(b"event: "):
                event = line[7:].decode()
            elif line.startswith(b"data: ") and event == "live":
                for request in json.loads(line[6:])["requests"]:
                    if any(step["running"] and step["tool"] == tool for step in request.get("mcp", ())):
                        return request["mcp"]
    raise AssertionError("no request with a running MCP step was shown")


def test_a_messages_tool_choice_may_force_a_call_of_the_mcp_servers_tools(proxy, fake, plan):  # noqa: F811
    plan.append(("add", {"a": 1, "b": 1}))
    before = len(fake.requests)
    answer = requests.post(
        proxy.url + "/v1/messages",
        headers=ADMIN,
        timeout=60,
        json={
            "model": "m",
            "max_tokens": 100,
            "tool_choice": {"type": "any"},
            "messages": [{"role": "user", "content": "Add."}],
            "mcp_servers": [{"type": "url", "url": "config", "name": "files"}],
        },
    )
    assert answer.status_code == 200, answer.text
    assert [block["type"] for block in answer.json()["content"]] == ["mcp_tool_use", "mcp_tool_result", "text"]
    forced, then = fake.requests[before], fake.requests[-1]
    assert forced.get("grammar") and not forced.get("grammar_lazy")  # the call is forced, then the model answers
    assert not then.get("grammar") or then.get("grammar_lazy")


def test_the_server_is_started_once_and_a_key_needs_its_grant(proxy, plan):
    assert server_pid(proxy, plan) == server_pid(proxy, plan)  # one process across calls
    created = requests.post(proxy.url + "/v1/internal/keys", json={"name": "ungranted"}, headers=ADMIN, timeout=10)
    key = {"Authorization": f"Bearer {created.json()['key']}"}
    refused = requests.post(
        proxy.url + "/v1/messages",
        headers=key,
        timeout=30,
        json={
            "model": "m",
            "max_tokens": 10,
            "messages": [{"role": "user", "content": "Hi"}],
            "mcp_servers": [{"type": "url", "url": "config", "name": "files"}],
        },
    )
    assert refused.status_code == 403
    assert refused.json()["error"]["message"] == "this key is not granted the MCP server 'files'"


def test_the_bridge_takes_only_requests_with_its_secret(proxy, plan):
    server_pid(proxy, plan)
    [port] = listening_ports(bridges_of(proxy)[0])
    answer = requests.post(
        f"http://127.0.0.1:{port}/mcp",
        timeout=10,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Authorization": "Bearer guessed"},
    )
    assert answer.status_code == 401


def listening_ports(pid: int) -> list[int]:
    """The TCP ports `pid` holds a listening socket of (/proc/net/tcp's state 0A)."""
    inodes = {
        os.readlink(f"/proc/{pid}/fd/{fd}")[8:-1]
        for fd in os.listdir(f"/proc/{pid}/fd")
        if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:[")
    }
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in table.read().splitlines()[1:]]
    return [int(row[1].split(":")[1], 16) for row in rows if row[3] == "0A" and row[9] in inodes]


def test_a_server_killed_mid_call_fails_that_call_and_the_next_call_works(proxy, plan):
    before = server_pid(proxy, plan)
    threading.Timer(2.0, os.kill, (before, signal.SIGKILL)).start()
    started = time.monotonic()
    killed = respond(proxy, plan, ("slow", {"seconds": 15}))
    assert time.monotonic() - started < 10  # the error came when the process died, not at the timeout
    call = killed["output"][1]
    assert (call["status"], call["error"]["type"]) == ("failed", "mcp_protocol_error")
    assert "ended during the call" in call["error"]["message"]
    assert killed["status"] == "completed"
    after = server_pid(proxy, plan)
    assert after != before and not still_running([before])


def test_a_killed_bridge_takes_its_server_with_it_and_another_starts(proxy, plan):
    server = server_pid(proxy, plan)
    [bridge] = bridges_of(proxy)
    os.kill(bridge, signal.SIGKILL)
    eventually(lambda: not still_running([server]), "the stdio server died with its bridge")
    assert server_pid(proxy, plan) != server  # the port is the same: the workers' URL still works
    assert len(bridges_of(proxy)) == 1


@pytest.mark.parametrize("ending", ["stopped", "killed"])
def test_one_server_serves_every_worker_and_nothing_outlives_the_proxy(fake, start_proxy, plan, tmp_path, ending):  # noqa: F811
    proxy = start_proxy("--llama-api", fake.url, "--config", stdio_config(tmp_path), "--workers", "2")
    server = server_pid(proxy, plan)
    assert {server_pid(proxy, plan) for _ in range(4)} == {server}  # one server per instance, whichever worker asks
    assert len(bridges_of(proxy)) == 1
    started = [*bridges_of(proxy), server, *descendants_of(server)]
    if ending == "stopped":
        proxy.stop()
    else:
        kill_instance(proxy.process)
    eventually(lambda: not still_running(started), "the bridge and its server are gone", timeout=15)


def test_a_command_that_cannot_run_is_the_calls_error_and_the_proxy_serves_on(fake, start_proxy, plan, tmp_path):  # noqa: F811
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"mcp_servers": {"files": {"command": str(tmp_path / "no-such-server")}}}))
    proxy = start_proxy("--llama-api", fake.url, "--config", str(config), "--mcp-connect-timeout", "8")
    listing = respond(proxy, plan)["output"][0]
    assert listing["type"] == "mcp_list_tools" and "'files' is not running (the server did not start" in listing["error"]
    assert "cannot run the stdio MCP server" in proxy.log()  # the shim's stderr, in the proxy's log
