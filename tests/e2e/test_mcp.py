"""MCP tools run by the proxy in front of the real llama-server and model (SmolLM2), with a real MCP
server (the `mcp` SDK's, Streamable HTTP): the request lists the server, the model is made to call
(tool_choice required: SmolLM2 does not call tools reliably on its own, the grammar holds it to one),
the proxy runs the call and the model answers; the OpenAI SDK and the Agents SDK's HostedMCPTool.
A stdio server of the config (started by the proxy) through Responses and Messages. The scripted
model's tests (tests/faults/test_mcp_tools.py, test_mcp_stdio.py) cover every other path."""

from __future__ import annotations

import asyncio
import json
import sys

import anthropic
import pytest
from agents import Agent, HostedMCPTool, ModelSettings, OpenAIResponsesModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI, OpenAI

from ..mcp_servers import McpServer

CITY_WEATHER = "Sunny and 21 degrees in"
TIMEOUT = 600  # seconds: two generations of SmolLM2 on a loaded two-core machine take minutes


@pytest.fixture(scope="module")
def mcp_http(start_mcp_server):
    return start_mcp_server("http")


@pytest.fixture(scope="module")
def mcp_proxy(llama_server, start_proxy):
    return start_proxy("--llama-api", llama_server.url, "--mcp-allow-private-urls", "--mcp-max-rounds", "2")


def weather_tool(server: McpServer, approval: str = "never") -> dict:
    return {
        "type": "mcp",
        "server_label": "weather",
        "server_url": server.url,
        "allowed_tools": ["weather"],
        "require_approval": approval,
    }


@pytest.mark.parametrize("stream", [False, True])
def test_smollm2_calls_an_mcp_tool_the_proxy_runs(mcp_proxy, mcp_http, stream):
    # Lenient, as the SDK's default: SmolLM2 may call again until the bound of rounds, whose reason
    # (max_tool_calls) the SDK's strict types do not list (tests/faults/test_mcp_tools.py holds them strict).
    client = OpenAI(base_url=mcp_proxy.url + "/v1", api_key="sk-no-key", max_retries=0, timeout=TIMEOUT)
    body = {
        "model": "smollm2",
        "input": "What is the weather in Paris?",
        "tool_choice": "required",
        "tools": [weather_tool(mcp_http)],
        "max_output_tokens": 60,
    }
    if stream:
        with client.responses.stream(**body) as events:
            kinds = [event.type for event in events]
            response = events.get_final_response()
        assert "response.mcp_call.completed" in kinds
    else:
        response = client.responses.create(**body)
    listing = response.output[0]
    call = next(item for item in response.output if item.type == "mcp_call")  # SmolLM2 may write text first
    assert (listing.type, [tool.name for tool in listing.tools]) == ("mcp_list_tools", ["weather"])
    assert (call.type, call.name, call.status, call.error) == ("mcp_call", "weather", "completed", None)
    assert call.output.startswith(CITY_WEATHER)
    assert response.status in ("completed", "incomplete")  # after the result, SmolLM2 answers or calls again
    assert response.usage.output_tokens > 0


@pytest.mark.parametrize("approval", ["never", "always"])
def test_the_agents_sdk_hosted_mcp_tool_runs_on_smollm2(mcp_proxy, mcp_http, approval):
    set_tracing_disabled(True)  # traces would go to OpenAI
    approved = []
    tool = HostedMCPTool(
        tool_config=weather_tool(mcp_http, approval),
        on_approval_request=lambda request: approved.append(request.data.name) or {"approve": True},
    )
    client = AsyncOpenAI(base_url=mcp_proxy.url + "/v1", api_key="sk-no-key", max_retries=0, timeout=TIMEOUT)
    agent = Agent(
        name="weather",
        instructions="Answer with the weather tool.",
        tools=[tool],
        model=OpenAIResponsesModel(model="smollm2", openai_client=client),
        model_settings=ModelSettings(tool_choice="required", max_tokens=60),
    )
    result = asyncio.run(Runner.run(agent, "What is the weather in Paris?", max_turns=3))
    calls = [item.raw_item for item in result.new_items if getattr(item.raw_item, "type", None) == "mcp_call"]
    assert calls and calls[0].output.startswith(CITY_WEATHER)
    assert isinstance(result.final_output, str)
    assert approved == (["weather"] if approval == "always" else [])


@pytest.fixture(scope="module")
def stdio_proxy(llama_server, start_proxy, tmp_path_factory):
    """A proxy whose config names a stdio MCP server (tests/mcp_servers.py over stdin and stdout)."""
    config = tmp_path_factory.mktemp("stdio") / "config.yaml"
    config.write_text(
        json.dumps({"mcp_servers": {"local": {"command": sys.executable, "args": ["-m", "tests.mcp_servers", "stdio"]}}})
    )
    return start_proxy("--llama-api", llama_server.url, "--config", str(config), "--mcp-max-rounds", "1")


def test_smollm2_calls_a_stdio_server_of_the_config_through_responses_and_messages(stdio_proxy):
    client = OpenAI(base_url=stdio_proxy.url + "/v1", api_key="sk-no-key", max_retries=0, timeout=TIMEOUT)
    response = client.responses.create(
        model="smollm2",
        input="What is the weather in Paris?",
        tool_choice="required",
        max_output_tokens=60,
        temperature=0,  # what is tested is the stdio server's round trip, not SmolLM2's sampling
        tools=[{"type": "mcp", "server_label": "local", "allowed_tools": ["weather"], "require_approval": "never"}],
    )
    call = next(item for item in response.output if item.type == "mcp_call")
    assert (call.server_label, call.name, call.error) == ("local", "weather", None)
    assert call.output.startswith(CITY_WEATHER)
    beta = anthropic.Anthropic(base_url=stdio_proxy.url, api_key="k", max_retries=0, timeout=TIMEOUT).beta.messages
    message = beta.create(
        model="smollm2",
        max_tokens=200,
        extra_body={"temperature": 0},
        betas=["mcp-client-2025-04-04"],
        tool_choice={"type": "any"},
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        mcp_servers=[{"type": "url", "url": "config", "name": "local", "tool_configuration": {"allowed_tools": ["weather"]}}],
    )
    assert [block.type for block in message.content[:2]] == ["mcp_tool_use", "mcp_tool_result"], [
        (block.type, getattr(block, "text", None), getattr(block, "input", None)) for block in message.content
    ]
    used, result = message.content[0], message.content[1]
    assert (used.server_name, used.name, result.is_error) == ("local", "weather", False), message.content
    assert result.content[0].text.startswith(CITY_WEATHER)
