"""MCP tools run by the proxy (issue 39), against real MCP servers (the `mcp` SDK's, over Streamable HTTP
and HTTP+SSE) and a scripted model (Qwen2.5's template, Hermes calls) whose calls are planned per test.
The Responses API's `mcp` tool: listed once per conversation, calls run and fed back within one
response, errors and timeouts as the call's error, the round bound, approvals (stored and stateless),
the URL checks; through the official OpenAI SDK (streamed and not, its types strict) and the Agents
SDK's HostedMCPTool. Anthropic's MCP connector (`mcp_servers`) through the Anthropic SDK's beta."""

from __future__ import annotations

import asyncio
import json
import re
import socket

import anthropic
import pytest
import requests
from agents import Agent, HostedMCPTool, OpenAIResponsesModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI
from openai.types.responses import (
    ResponseOutputMessage,
)
from openai.types.responses.response_output_item import McpApprovalRequest, McpCall, McpListTools

from api_like_oai.mcp.addresses import Pinned
from api_like_oai.mcp.client import Endpoint, list_tools
from api_like_oai.mcp.policy import Bounds

from ..conftest import openai_client
from ..mcp_servers import BIG_BYTES, WEATHER, McpServer
from ..scripted_model import QWEN_TEMPLATE, SCRIPTED_PROPS, offered_tools
from ..servers import Proxy, RedisServer, eventually, free_port, launch_all, stop
from .test_responses_tools import hermes_call

_RESULTS = re.compile(r"<tool_response>\n(.*?)\n</tool_response>", re.DOTALL)
PLAN: list = []  # the scripted model's calls, in order: (name, arguments); then it answers


def planned_turn(body: dict) -> list[str]:
    """The next call of PLAN (one per tool result already in the prompt), else an answer quoting every
    result; "looping" in PLAN: a call of `add` whatever came back."""
    prompt = body.get("prompt", "")
    results = _RESULTS.findall(prompt)
    if PLAN == ["looping"]:
        return hermes_call("add", {"a": len(results), "b": 1}, preface="")
    if not offered_tools(prompt) or len(results) >= len(PLAN):
        return ["Results: ", " | ".join(results) or "none"]
    name, arguments = PLAN[len(results)]
    return hermes_call(name, arguments, preface="")


@pytest.fixture(scope="module")
def mcp_http(start_mcp_server):
    return start_mcp_server("http")


@pytest.fixture(scope="module")
def mcp_sse(start_mcp_server):
    return start_mcp_server("sse")


@pytest.fixture(scope="module")
def fake(start_fake):
    # Every generation reads its prompt with progress events first, as a real llama-server's do.
    return start_fake(
        chat_template=QWEN_TEMPLATE,
        props_extra=dict(SCRIPTED_PROPS),
        script=planned_turn,
        prompt_progress=({"total": 40, "cache": 0, "processed": 40, "time_ms": 2.0},),
    )


@pytest.fixture(scope="module")
def proxy(fake, start_proxy):
    return start_proxy(
        "--llama-api",
        fake.url,
        "--mcp-allow-private-urls",
        # a call's bound is the connect timeout plus the call timeout: 12 s with the default 10 for the hanging tool
        "--mcp-connect-timeout",
        "3",
        "--mcp-call-timeout",
        "2",
        "--mcp-max-rounds",
        "3",
        "--mcp-max-output-bytes",
        "1000",
    )


@pytest.fixture
def plan():
    yield PLAN
    PLAN.clear()


def mcp_tool(server: McpServer, **fields) -> dict:
    return {"type": "mcp", "server_label": "tools", "server_url": server.url, "require_approval": "never", **fields}


def created(client, body: dict, stream: bool):
    """(the response, its events' types: none when not streamed), created streamed or not."""
    if not stream:
        return client.responses.create(**body), []
    with client.responses.stream(**body) as events:
        kinds = [event.type for event in events]
        return events.get_final_response(), kinds


def output_types(response) -> list[str]:
    return [item.type for item in response.output]


@pytest.mark.parametrize("stream", [False, True])
def test_a_task_of_two_tool_rounds_completes_in_one_response(proxy, fake, mcp_http, plan, stream):
    plan += [("add", {"a": 2, "b": 3}), ("weather", {"city": "Paris"})]
    client = openai_client(proxy.url)
    body = {"model": "m", "input": "Add 2 and 3, then tell me the weather in Paris.", "tools": [mcp_tool(mcp_http)]}
    response, kinds = created(client, body, stream)
    if stream:
        assert_streamed_in_order(kinds)
    assert response.status == "completed"
    assert output_types(response) == ["mcp_list_tools", "mcp_call", "mcp_call", "message"]
    listing, add, weather, answer = response.output
    assert isinstance(listing, McpListTools) and isinstance(add, McpCall) and isinstance(answer, ResponseOutputMessage)
    assert {tool.name for tool in listing.tools} == {"add", "weather", "inventory", "fail", "big", "slow"}
    assert next(tool for tool in listing.tools if tool.name == "weather").annotations["readOnlyHint"] is True
    assert (add.server_label, add.name, json.loads(add.arguments), add.output, add.error, add.status) == (
        "tools",
        "add",
        {"a": 2, "b": 3},
        "5",
        None,
        "completed",
    )
    assert weather.output == WEATHER.format(city="Paris")
    assert answer.content[0].text == f"Results: 5 | {WEATHER.format(city='Paris')}"
    assert response.usage.output_tokens > 0


def assert_streamed_in_order(kinds: list[str]) -> None:
    """The listing's and each call's events, each inside its output_item.added and .done."""
    mcp_kinds = [kind for kind in kinds if kind.startswith(("response.mcp", "response.output_item"))]
    call = [
        "response.output_item.added",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_call.in_progress",
        "response.mcp_call.completed",
        "response.output_item.done",
    ]
    assert mcp_kinds == [
        "response.output_item.added",
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.output_item.done",
        *call,
        *call,
        "response.output_item.added",
        "response.output_item.done",
    ]
    assert kinds[-1] == "response.completed"


def test_a_legacy_sse_server_returns_json(proxy, mcp_sse, plan):
    plan.append(("inventory", {}))
    response = openai_client(proxy.url).responses.create(
        model="m", input="What is in stock?", tools=[mcp_tool(mcp_sse, server_label="shop")]
    )
    assert output_types(response) == ["mcp_list_tools", "mcp_call", "message"]
    assert json.loads(response.output[1].output) == {"apples": 3, "pears": 0}


@pytest.mark.parametrize("stream", [False, True])
def test_a_failing_tool_and_a_hanging_one_are_the_calls_errors(proxy, fake, mcp_http, plan, stream):
    plan += [("fail", {}), ("slow", {"seconds": 30})]
    client = openai_client(proxy.url)
    body = {"model": "m", "input": "Try the tools.", "tools": [mcp_tool(mcp_http)]}
    response, kinds = created(client, body, stream)
    assert kinds.count("response.mcp_call.failed") == (2 if stream else 0)
    assert response.status == "completed"
    failed, hung = response.output[1], response.output[2]
    assert (failed.status, failed.error.type, hung.status, hung.error.type) == (
        "failed",
        "mcp_tool_execution_error",
        "failed",
        "mcp_protocol_error",
    )
    assert "the fail tool failed" in failed.error.content[0]["text"]
    assert "did not answer within" in hung.error.message
    told = fake.requests[-1]["prompt"]  # the model read both errors
    assert "the fail tool failed" in told and "did not answer within" in told


def test_listings_and_calls_are_counted_per_server_and_tool(proxy, mcp_http, plan):
    plan += [("add", {"a": 1, "b": 1}), ("fail", {})]
    openai_client(proxy.url).responses.create(model="m", input="Count.", tools=[mcp_tool(mcp_http, server_label="counted")])
    metrics = requests.get(proxy.url + "/metrics", timeout=10).text
    for labels in (
        'outcome="ok",server="counted",tool="tools/list"',
        'outcome="ok",server="counted",tool="add"',
        'outcome="error",server="counted",tool="fail"',
    ):
        assert f"api_like_oai_mcp_calls_total{{{labels}}} 1.0" in metrics
    assert 'api_like_oai_mcp_call_seconds_count{server="counted",tool="add"} 1.0' in metrics


def test_an_oversized_output_is_cut_with_a_note(proxy, mcp_http, plan):
    plan.append(("big", {}))
    response = openai_client(proxy.url).responses.create(model="m", input="Big.", tools=[mcp_tool(mcp_http)])
    output = response.output[1].output
    assert output.startswith("x" * 1000) and f"1000 of {BIG_BYTES} bytes" in output


def test_a_looping_model_stops_at_the_round_bound(proxy, mcp_http, plan):
    plan.append("looping")
    # Not strict: the SDK's IncompleteDetails names only max_output_tokens and content_filter (Open
    # Responses' takes any reason); its default, lenient parsing reads this one.
    client = openai_client(proxy.url, strict=False)
    response = client.responses.create(model="m", input="Loop.", tools=[mcp_tool(mcp_http)])
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_tool_calls"
    assert output_types(response) == ["mcp_list_tools", "mcp_call", "mcp_call", "mcp_call"]  # --mcp-max-rounds 3


def test_allowed_tools_are_the_only_ones_offered(proxy, fake, mcp_http, plan):
    listed = openai_client(proxy.url).responses.create(
        model="m", input="Hi.", tools=[mcp_tool(mcp_http, allowed_tools={"read_only": True})]
    )
    assert offered_tools(fake.requests[-1]["prompt"]) == ["weather"]
    assert [tool.name for tool in listed.output[0].tools] == ["weather"]  # the item lists what is imported
    openai_client(proxy.url).responses.create(model="m", input="Hi.", tools=[mcp_tool(mcp_http, allowed_tools=["add", "fail"])])
    assert offered_tools(fake.requests[-1]["prompt"]) == ["add", "fail"]


def test_the_list_is_kept_and_an_approval_resumes_a_stored_response(proxy, fake, mcp_http, plan):
    plan += [("add", {"a": 20, "b": 22}), ("weather", {"city": "Oslo"})]
    client = openai_client(proxy.url)
    tools = [mcp_tool(mcp_http, require_approval={"never": {"tool_names": ["weather"]}})]
    first = client.responses.create(model="m", input="Add, then the weather.", tools=tools)
    assert output_types(first) == ["mcp_list_tools", "mcp_approval_request"]
    request = first.output[1]
    assert isinstance(request, McpApprovalRequest) and (request.name, json.loads(request.arguments)) == (
        "add",
        {"a": 20, "b": 22},
    )
    second = client.responses.create(
        model="m",
        previous_response_id=first.id,
        tools=tools,
        tool_choice="required",
        input=[{"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}],
    )
    assert output_types(second) == ["mcp_call", "mcp_call", "message"]  # listed once: not again
    asked = fake.requests[-2]  # the approved call ran first: the forced tool_choice has had its call
    assert not asked.get("grammar") or asked.get("grammar_lazy")
    approved, weather, answer = second.output
    assert (approved.approval_request_id, approved.output, weather.approval_request_id) == (request.id, "42", None)
    assert answer.content[0].text == f"Results: 42 | {WEATHER.format(city='Oslo')}"


def test_a_denied_call_is_not_run_and_the_model_is_told(proxy, fake, mcp_http, plan):
    plan.append(("add", {"a": 1, "b": 1}))
    client = openai_client(proxy.url)
    tools = [mcp_tool(mcp_http, require_approval="always")]
    first = client.responses.create(model="m", input="Add.", tools=tools, store=False)
    items = [item.model_dump(exclude_none=True) for item in first.output]
    second = client.responses.create(
        model="m",
        tools=tools,
        store=False,
        input=[
            {"role": "user", "content": "Add."},
            *items,
            {"type": "mcp_approval_response", "approval_request_id": items[1]["id"], "approve": False, "reason": "not today"},
        ],
    )
    denied = second.output[0]
    assert (denied.type, denied.status, denied.output) == ("mcp_call", "failed", None)
    assert "did not approve this call: not today" in denied.error.content[0]["text"]
    assert "did not approve this call: not today" in fake.requests[-1]["prompt"]


ADMIN = {"Authorization": "Bearer admin-key-for-mcp"}


@pytest.fixture(scope="module")
def guarded(fake, mcp_http, start_proxy, tmp_path_factory):
    """A proxy without --mcp-allow-private-urls, with managed keys and a config naming an MCP server."""
    folder = tmp_path_factory.mktemp("mcp")
    config = folder / "config.yaml"
    config.write_text(f"mcp_servers:\n  named:\n    url: {mcp_http.url}\n    headers:\n      X-From: config\n")
    return start_proxy(
        "--llama-api",
        fake.url,
        "--config",
        str(config),
        "--store",
        f"sqlite:///{folder / 'store.db'}",
        "--admin-key",
        ADMIN["Authorization"].split()[1],
    )


def test_a_server_url_at_a_private_address_is_refused_unless_allowed(guarded, mcp_http):
    response = requests.post(
        guarded.url + "/v1/responses",
        timeout=30,
        headers=ADMIN,
        json={"model": "m", "input": "Hi.", "tools": [mcp_tool(mcp_http)]},
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["param"], error["code"]) == ("tools.0.server_url", "invalid_mcp_server_url")
    assert "--mcp-allow-private-urls" in error["message"]


def key_for(proxy, name: str, **grants) -> dict:
    created = requests.post(proxy.url + "/v1/internal/keys", json={"name": name, **grants}, headers=ADMIN, timeout=10)
    assert created.status_code == 201, created.text
    return {"Authorization": f"Bearer {created.json()['key']}"}


NAMED = {"type": "mcp", "server_label": "named", "require_approval": "never"}


def test_a_named_server_of_the_config_is_granted_per_key(guarded, fake, plan):
    plan.append(("add", {"a": 40, "b": 2}))
    body = {"model": "m", "input": "Add.", "tools": [NAMED], "store": False}
    as_admin = requests.post(guarded.url + "/v1/responses", json=body, headers=ADMIN, timeout=30).json()
    assert [item["type"] for item in as_admin["output"]] == ["mcp_list_tools", "mcp_call", "message"]
    assert as_admin["output"][1]["output"] == "42"
    refused = requests.post(guarded.url + "/v1/responses", json=body, headers=key_for(guarded, "ungranted"), timeout=30)
    assert refused.status_code == 403
    assert refused.json()["error"]["message"] == "this key is not granted the MCP server 'named'"
    granted = key_for(guarded, "granted", mcp_servers=["named.add", "named.weather"])
    answered = requests.post(
        guarded.url + "/v1/responses", json=body | {"tools": [NAMED | {"server_url": "config"}]}, headers=granted, timeout=30
    )
    assert answered.status_code == 200 and answered.json()["output"][1]["output"] == "42"
    assert offered_tools(fake.requests[-2]["prompt"]) == ["add", "weather"]  # the grant's tools only


def test_a_named_server_the_config_does_not_have_is_a_400(guarded):
    response = requests.post(
        guarded.url + "/v1/responses",
        headers=ADMIN,
        timeout=30,
        json={"model": "m", "input": "Hi.", "tools": [{"type": "mcp", "server_label": "absent"}]},
    )
    assert response.status_code == 400
    assert (response.json()["error"]["param"], response.json()["error"]["message"]) == (
        "tools.0.server_label",
        "no MCP server named 'absent' in the config (named: named); give server_url",
    )


@pytest.mark.parametrize("field", ["connector_id", "tunnel_id"])
def test_openai_hosted_connectors_are_refused(proxy, field):
    response = requests.post(
        proxy.url + "/v1/responses",
        timeout=30,
        json={"model": "m", "input": "Hi.", "tools": [{"type": "mcp", "server_label": "x", field: "connector_gmail"}]},
    )
    assert response.status_code == 400
    assert "OpenAI-hosted" in response.json()["error"]["message"]


async def _run_agent(agent: Agent, task: str, streamed: bool) -> str:
    if not streamed:
        return (await Runner.run(agent, task)).final_output
    result = Runner.run_streamed(agent, task)
    async for _ in result.stream_events():
        pass
    return result.final_output


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("approval", ["never", "always"])
def test_the_agents_sdk_hosted_mcp_tool_finishes_its_task(proxy, mcp_http, plan, approval, streamed):
    plan.append(("add", {"a": 2, "b": 3}))
    set_tracing_disabled(True)  # traces would go to OpenAI
    asked = []

    def approve(request):
        asked.append(request.data.name)
        return {"approve": True}

    tool = HostedMCPTool(
        tool_config={"type": "mcp", "server_label": "tools", "server_url": mcp_http.url, "require_approval": approval},
        on_approval_request=approve if approval == "always" else None,
    )
    client = AsyncOpenAI(base_url=proxy.url + "/v1", api_key="sk-no-key", max_retries=0)
    agent = Agent(
        name="calculator",
        instructions="Use the tools.",
        tools=[tool],
        model=OpenAIResponsesModel(model="m", openai_client=client),
    )
    assert asyncio.run(_run_agent(agent, "Add 2 and 3.", streamed)) == "Results: 5"
    assert asked == (["add"] if approval == "always" else [])


def test_the_connection_goes_to_the_pinned_address_whatever_dns_says_later(monkeypatch, mcp_http):
    """The address checked is the one connected to: the host is never looked up again, so an answer that
    changed since (rebinding) is never used. (The SDK's servers take only a Host of localhost.)"""
    asked, resolve = [], socket.getaddrinfo
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, *args, **kwargs: asked.append(host) or resolve(host, *args, **kwargs))
    target = Pinned(f"http://localhost:{mcp_http.port}/mcp", "localhost", "127.0.0.1")
    assert "add" in {tool["name"] for tool in list_tools(Endpoint(target), Bounds())}
    assert "localhost" not in asked


# --- Anthropic's MCP connector ---------------------------------------------------------------------


def anthropic_beta(proxy):
    return anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0, _strict_response_validation=True)


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_mcp_servers_give_tool_use_and_result_blocks(proxy, mcp_http, plan, stream):
    plan += [("add", {"a": 2, "b": 3}), ("weather", {"city": "Rome"})]
    body = {
        "model": "m",
        "max_tokens": 200,
        "betas": ["mcp-client-2025-04-04"],
        "messages": [{"role": "user", "content": "Add 2 and 3, then the weather in Rome."}],
        "mcp_servers": [
            {"type": "url", "url": mcp_http.url, "name": "tools", "tool_configuration": {"allowed_tools": ["add", "weather"]}}
        ],
    }
    beta = anthropic_beta(proxy).beta.messages
    if stream:
        with beta.stream(**body) as events:
            kinds = [(event.type, getattr(event, "content_block", None) and event.content_block.type) for event in events]
            message = events.get_final_message()
        assert ("content_block_start", "mcp_tool_use") in kinds and ("content_block_start", "mcp_tool_result") in kinds
    else:
        message = beta.create(**body)
    assert [block.type for block in message.content] == [
        "mcp_tool_use",
        "mcp_tool_result",
        "mcp_tool_use",
        "mcp_tool_result",
        "text",
    ]
    use, result = message.content[0], message.content[1]
    assert (use.name, use.server_name, use.input, result.tool_use_id, result.is_error, result.content[0].text) == (
        "add",
        "tools",
        {"a": 2, "b": 3},
        use.id,
        False,
        "5",
    )
    assert message.content[4].text == f"Results: 5 | {WEATHER.format(city='Rome')}"
    assert message.stop_reason == "end_turn"


def test_anthropic_mcp_blocks_sent_back_reach_the_prompt_and_toolsets_filter(proxy, fake, mcp_http, plan):
    plan += [("add", {"a": 2, "b": 3}), ("inventory", {})]
    before = len(fake.requests)
    first = anthropic_beta(proxy).beta.messages.create(
        model="m",
        max_tokens=200,
        betas=["mcp-client-2025-11-20"],
        messages=[{"role": "user", "content": "Go."}],
        mcp_servers=[{"type": "url", "url": mcp_http.url, "name": "tools"}],
        tools=[
            {
                "type": "mcp_toolset",
                "mcp_server_name": "tools",
                "default_config": {"enabled": False},
                "configs": {"add": {"enabled": True}, "inventory": {"enabled": True}},
            }
        ],
    )
    assert offered_tools(fake.requests[before]["prompt"]) == ["add", "inventory"]
    assert first.content[-1].text.startswith("Results: 5 | ")
    plan.clear()
    anthropic_beta(proxy).beta.messages.create(
        model="m",
        max_tokens=200,
        betas=["mcp-client-2025-04-04"],
        mcp_servers=[{"type": "url", "url": mcp_http.url, "name": "tools"}],
        messages=[
            {"role": "user", "content": "Go."},
            {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]},
            {"role": "user", "content": "Again?"},
        ],
    )
    prompt = fake.requests[-1]["prompt"]
    assert prompt.count("<tool_response>") == 2 and '"apples": 3' in prompt


def test_anthropic_mcp_server_at_a_private_address_is_refused_unless_allowed(guarded, mcp_http):
    response = requests.post(
        guarded.url + "/v1/messages",
        timeout=30,
        headers={"anthropic-beta": "mcp-client-2025-04-04", **ADMIN},
        json={
            "model": "m",
            "max_tokens": 10,
            "messages": [{"role": "user", "content": "Hi"}],
            "mcp_servers": [{"type": "url", "url": mcp_http.url, "name": "tools"}],
        },
    )
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert "--mcp-allow-private-urls" in response.json()["error"]["message"]


def test_a_required_tool_choice_holds_the_first_round_only(proxy, fake, mcp_http, plan):
    plan.append(("add", {"a": 1, "b": 2}))
    response = openai_client(proxy.url).responses.create(
        model="m", input="Add.", tool_choice="required", tools=[mcp_tool(mcp_http, allowed_tools=["add"])]
    )
    assert output_types(response) == ["mcp_list_tools", "mcp_call", "message"]
    first, second = fake.requests[-2], fake.requests[-1]
    assert first.get("grammar") and not first.get("grammar_lazy")  # the call is forced
    assert not second.get("grammar") or second.get("grammar_lazy")  # then the model may answer


@pytest.fixture
def cut_call(fake):
    """Every generation a call of `add` the token limit cut inside its arguments."""
    fake.script, fake.stop_type = (lambda body: hermes_call("add", {"a": 2, "b": 3}, preface="")[:-2]), "limit"
    yield
    fake.script, fake.stop_type = planned_turn, "eos"


@pytest.mark.parametrize("stream", [False, True])
def test_a_call_cut_by_the_token_limit_is_never_run(proxy, fake, mcp_http, cut_call, stream):
    """Its arguments are a prefix of the model's (`{"a": 2, "b"` closed into `{"a": 2}` for a client to
    parse): run, a tool would act on what the model never asked. The answer ends at the limit, in one round."""
    before = len(fake.requests)
    body = {
        "model": "m",
        "max_tokens": 30,
        "betas": ["mcp-client-2025-04-04"],
        "messages": [{"role": "user", "content": "Add 2 and 3."}],
        "mcp_servers": [{"type": "url", "url": mcp_http.url, "name": "tools"}],
    }
    beta = anthropic_beta(proxy).beta.messages
    if stream:
        with beta.stream(**body) as events:
            message = events.get_final_message()
    else:
        message = beta.create(**body)
    assert message.stop_reason == "max_tokens" and len(fake.requests) - before == 1
    assert not [block for block in message.content if block.type.startswith("mcp_tool")], message.content
    asked = {"model": "m", "input": "Add.", "max_output_tokens": 30, "tools": [mcp_tool(mcp_http)]}
    if stream:  # the SDK's stream helper wants response.completed; an incomplete one ends with response.incomplete
        events = list(openai_client(proxy.url).responses.create(**asked, stream=True))
        assert events[-1].type == "response.incomplete"
        response = events[-1].response
    else:
        response = openai_client(proxy.url).responses.create(**asked)
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert output_types(response)[0] == "mcp_list_tools" and "mcp_call" not in output_types(response)
    assert len(fake.requests) - before == 2  # one generation each


@pytest.fixture(scope="module")
def fleet_front(fake, mcp_http, tmp_path_factory):
    """A fleet: a box (no keys) serving `m` with the config's named MCP server, a front with managed keys."""
    folder = tmp_path_factory.mktemp("mcp-fleet")
    (folder / "secret").write_text("a-fleet-secret-for-the-mcp-tests-0123456789\n")
    (folder / "box.yaml").write_text(
        f"models:\n  m:\n    upstreams: [{fake.url}]\nmcp_servers:\n  named:\n    url: {mcp_http.url}\n"
    )
    redis_server = RedisServer().start()
    common = ["--fleet", redis_server.url, "--fleet-secret-file", str(folder / "secret")]
    port = free_port()
    box = Proxy(
        [*common, "--config", str(folder / "box.yaml"), "--advertise", f"http://127.0.0.2:{port}"], port=port, host="127.0.0.2"
    )
    front = Proxy([*common, "--admin-key", ADMIN["Authorization"].split()[1], "--store", redis_server.url], host="127.0.0.4")
    try:
        launch_all([box, front])
        eventually(lambda: requests.get(front.url + "/v1/models", headers=ADMIN, timeout=5).json()["data"], "the box's model")
        yield front
    finally:
        stop(*(proxy.process for proxy in (box, front) if proxy.process))
        redis_server.stop()


def test_a_named_server_of_a_boxs_config_is_granted_per_key_through_a_front(fleet_front, plan):
    """The box has no keys: the front sends its tenant's grants with the fleet call, and the box holds the
    tenant to them as one proxy does (before, a box took a fleet call's client as granted everything)."""
    plan.append(("add", {"a": 40, "b": 2}))
    body = {"model": "m", "input": "Add.", "tools": [NAMED], "store": False}
    refused = requests.post(fleet_front.url + "/v1/responses", json=body, headers=key_for(fleet_front, "ungranted"), timeout=30)
    assert refused.status_code == 403 and refused.json()["error"]["message"] == "this key is not granted the MCP server 'named'"
    sneaking = key_for(fleet_front, "sneaking") | {"X-Fleet-MCP-Grants": "named"}  # a client's own say is dropped
    assert requests.post(fleet_front.url + "/v1/responses", json=body, headers=sneaking, timeout=30).status_code == 403
    granted = key_for(fleet_front, "granted", mcp_servers=["named.add"])
    answered = requests.post(fleet_front.url + "/v1/responses", json=body, headers=granted, timeout=30)
    assert answered.status_code == 200 and answered.json()["output"][1]["output"] == "42"
