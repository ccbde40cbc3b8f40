"""The Responses API's WebSocket mode end to end: the official `openai` SDK's `responses.connect()` and
the Agents SDK's WebSocket model against the proxy in front of the real llama-server with SmolLM2."""

from __future__ import annotations

import asyncio

import agents
import openai
from agents import Agent, ModelSettings, RunConfig, Runner
from agents.models.openai_responses import OpenAIResponsesWSModel

from ..agent_programs import API_KEY, access_statuses, run_codex
from ..conftest import openai_client
from ..scripted_model import FILES_WRITTEN, FINAL_ANSWER, scripted_agent

SAMPLING = {"model": "smollm", "temperature": 0, "max_output_tokens": 20, "store": False}


def last_response(connection):
    """The response whose terminal event comes next on the connection (events before it are read)."""
    for event in connection:
        assert event.type != "error", event
        if event.type in ("response.completed", "response.incomplete", "response.failed"):
            return event.response
    raise AssertionError("the socket closed before the response ended")


def test_two_store_false_turns_chain_on_one_socket_and_its_slot(client):
    with client.responses.connect() as connection:
        connection.response.create(input="My name is Ada. Remember it.", instructions="Be brief.", **SAMPLING)
        first = last_response(connection)
        connection.response.create(input="What is my name?", instructions="Be brief.", previous_response_id=first.id, **SAMPLING)
        second = last_response(connection)
    assert first.status in ("completed", "incomplete") and first.output_text.strip()
    assert second.previous_response_id == first.id and second.output_text.strip()
    # the second prompt holds the first turn (more tokens), and was read from the first's KV cache
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens // 2


WEATHER_CALLS: list[str] = []


@agents.function_tool(is_enabled=lambda context, agent: not WEATHER_CALLS)  # offered until called once
def get_weather(city: str) -> str:
    """The current weather in a city."""
    WEATHER_CALLS.append(city)
    return f"It is sunny in {city}."


def test_the_agents_sdk_websocket_model_runs_a_tool_round(proxy):
    """The Agents SDK's WebSocket Responses model, store off: the tool's output goes back over the
    socket with previous_response_id and nothing else of the history."""
    WEATHER_CALLS.clear()
    client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="sk-no-key", max_retries=0, timeout=120)
    agent = Agent(
        name="assistant",
        instructions="You are brief.",
        model=OpenAIResponsesWSModel(model="smollm", openai_client=client),
        model_settings=ModelSettings(temperature=0, max_tokens=60, store=False, tool_choice="get_weather"),
        tools=[get_weather],
    )

    async def run():
        result = Runner.run_streamed(
            agent, "What is the weather in Paris?", run_config=RunConfig(tracing_disabled=True), auto_previous_response_id=True
        )
        async for _ in result.stream_events():
            pass
        await agent.model.close()
        return result

    result = asyncio.run(run())
    assert WEATHER_CALLS and isinstance(result.final_output, str) and result.final_output.strip()
    assert len(result.raw_responses) == 2 and result.raw_responses[1].response_id != result.raw_responses[0].response_id


def test_compact_then_continue_from_the_compaction_item(proxy):
    """`responses.compact()` with the model writing the summary, and a turn continuing from its output."""
    client = openai_client(proxy.url, strict=False)  # the answer's output holds user messages (no SDK type)
    conversation = [
        {"role": "user", "content": "My name is Ada and I live in Paris."},
        {"role": "assistant", "content": "Nice to meet you, Ada."},
        {"role": "user", "content": "I like cats."},
    ]
    compacted = client.responses.compact(model="smollm", input=conversation)
    *users, compaction = compacted.output
    assert [item.role for item in users] == ["user", "user"] and compaction.type == "compaction"
    assert compacted.usage.output_tokens > 0 and compacted.usage.input_tokens > 0
    raw = [item.model_dump(exclude_none=True, warnings=False) for item in compacted.output]
    answer = client.responses.create(input=[*raw, {"role": "user", "content": "Where do I live?"}], **SAMPLING)
    assert answer.status in ("completed", "incomplete") and answer.output_text.strip()
    assert answer.usage.input_tokens > compacted.usage.output_tokens  # the summary is in its prompt


def test_steering_stops_the_response_and_its_successor_continues_it(client):
    with client.responses.connect() as connection:
        connection.response.create(input="Count from 1 to 100, one number a line.", **{**SAMPLING, "max_output_tokens": 200})
        created = connection.recv()
        assert created.type == "response.created"
        connection.response.steer(previous_response_id=created.response.id, input="Stop. Say only: done.")
        steered = last_response(connection)
        successor = last_response(connection)
    assert steered.status == "incomplete" and steered.incomplete_details.reason == "steered"
    assert steered.usage.output_tokens < 200
    assert successor.previous_response_id == steered.id and successor.output_text.strip()
    # its prompt: the steered one, what was answered, and the steering input (whether llama-server had freed
    # the stopped slot in time for its KV cache to serve it is timing, not asserted)
    assert successor.usage.input_tokens > steered.usage.input_tokens + steered.usage.output_tokens


def test_codex_runs_a_shell_task_over_the_websocket(start_fake, start_proxy, tmp_path):
    """Codex CLI (pinned) with `supports_websockets = true` in its provider's config speaks WebSocket
    mode: the task's turns go over one socket (its handshake's access line is the 101), none refused.
    The model is the scripted Qwen2.5 agent of tests/scripted_model.py."""
    proxy = start_proxy("--llama-api", start_fake(**scripted_agent()).url, "--api-key", API_KEY)
    (tmp_path / "work").mkdir()
    run = run_codex(
        proxy.url,
        "Write alpha into a.txt, then write its upper case into b.txt.",
        tmp_path / "work",
        tmp_path / "home",
        websockets=True,
    )
    assert run.returncode == 0 and run.answer == FINAL_ANSWER, run.output[-3000:]
    assert {name: (tmp_path / "work" / name).read_text() for name in FILES_WRITTEN} == FILES_WRITTEN
    statuses = access_statuses(proxy.log())
    assert ("/v1/responses", 101) in statuses
    assert [status for endpoint, status in statuses if endpoint == "/v1/responses" and status >= 400] == []
    assert len([status for endpoint, status in statuses if endpoint == "/v1/responses" and status == 200]) >= 3


def test_context_management_compacts_on_the_socket_first(client):
    """A turn over the socket whose prompt passes its compact_threshold: the model summarizes first, the
    compaction item leads the output, and the answer continues from the summary."""
    conversation = [
        {"role": "user", "content": "My name is Ada and I live in Paris."},
        {"role": "assistant", "content": "Nice to meet you, Ada."},
        {"role": "user", "content": "Where do I live?"},
    ]
    compacting = [{"type": "compaction", "compact_threshold": 20}]
    with client.responses.connect() as connection:
        connection.response.create(input=conversation, context_management=compacting, **SAMPLING)
        events = []
        for event in connection:
            events.append(event)
            if event.type in ("response.completed", "response.incomplete", "response.failed", "error"):
                break
    assert "response.compaction.compacting" in [event.type for event in events]
    output = events[-1].response.output
    assert [item.type for item in output] == ["compaction", "message"] and output[1].content[0].text.strip()
