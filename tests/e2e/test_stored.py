"""Stored responses and conversations end to end: the official `openai` SDK (strict validation) and the
OpenAI Agents SDK against the proxy in front of the real llama-server with SmolLM2, on SQLite (a
restart, two workers writing at once) and on a real Redis shared by two proxy instances."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import agents
import openai
import pytest
from agents import Agent, ModelSettings, OpenAIResponsesModel, RunConfig, Runner

from ..conftest import openai_client
from ..faults.test_workers import workers_of

SAMPLING = {"model": "smollm", "temperature": 0, "max_output_tokens": 24}
KEYS = ("sk-first-key", "sk-second-key")


@pytest.fixture(scope="module")
def store_path(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("store") / "store.sqlite3"


@pytest.fixture(scope="module")
def sqlite_proxy(llama_server, start_proxy, store_path):
    return start_proxy(
        "--llama-api", llama_server.url, "--store", f"sqlite://{store_path}", "--api-key", KEYS[0], "--api-key", KEYS[1]
    )


@pytest.fixture(scope="module")
def redis_url(redis_server) -> str:
    return redis_server.url.rsplit("/", 1)[0] + "/2"


@pytest.fixture(scope="module")
def redis_proxies(llama_server, start_proxies, redis_url):
    """Two proxy instances sharing one Redis, as behind a load balancer."""
    return start_proxies(
        *[("--llama-api", llama_server.url, "--store", redis_url, "--api-key", KEYS[0], "--api-key", KEYS[1])] * 2
    )


def client_of(proxy, key: str = KEYS[0]) -> openai.OpenAI:
    return openai_client(proxy.url, api_key=key)


def texts(items) -> list[str]:
    return [part.text for item in items if item.type == "message" for part in item.content]


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_continue_retrieve_list_and_delete(backend, request):
    proxies = [request.getfixturevalue("sqlite_proxy")] * 2 if backend == "sqlite" else request.getfixturevalue("redis_proxies")
    first_client, second_client = (client_of(proxy) for proxy in proxies)
    first = first_client.responses.create(input="My name is Ada.", instructions="Be brief.", **SAMPLING)
    assert first.store is True and first.status in ("completed", "incomplete") and len(first.id) == len("resp_") + 32
    assert second_client.responses.retrieve(first.id).model_dump() == first.model_dump()

    second = second_client.responses.create(input="What is my name?", previous_response_id=first.id, **SAMPLING)
    assert second.previous_response_id == first.id and second.instructions is None
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens  # the history was sent
    counted = first_client.responses.input_tokens.count(input="What is my name?", previous_response_id=first.id, model="smollm")
    assert counted.input_tokens == second.usage.input_tokens
    items = list(first_client.responses.input_items.list(second.id, order="asc"))
    assert texts(items) == ["My name is Ada.", first.output_text, "What is my name?"]
    assert [item.id for item in items][1] == first.output[0].id

    first_client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        second_client.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError) as caught:
        second_client.responses.create(input="Again", previous_response_id=first.id, **SAMPLING)
    assert caught.value.body["code"] == "previous_response_not_found"
    assert second_client.responses.retrieve(second.id).output_text == second.output_text  # a later turn stays


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_a_streamed_continuation_is_stored_as_streamed(backend, request):
    proxies = [request.getfixturevalue("sqlite_proxy")] * 2 if backend == "sqlite" else request.getfixturevalue("redis_proxies")
    first = client_of(proxies[0]).responses.create(input="Count from 1 to 3.", **SAMPLING)
    events = list(
        client_of(proxies[1]).responses.create(input="And to 5?", previous_response_id=first.id, stream=True, **SAMPLING)
    )
    streamed = events[-1].response  # response.completed (or .incomplete) as sent
    assert streamed.previous_response_id == first.id and streamed.store is True
    assert client_of(proxies[0]).responses.retrieve(streamed.id).model_dump() == streamed.model_dump()


def test_another_key_sees_nothing(sqlite_proxy):
    owner, other = client_of(sqlite_proxy, KEYS[0]), client_of(sqlite_proxy, KEYS[1])
    response = owner.responses.create(input="Secret plans.", **SAMPLING)
    conversation = owner.conversations.create(items=[{"role": "user", "content": "Hi"}])
    for attempt in (
        lambda: other.responses.retrieve(response.id),
        lambda: other.responses.delete(response.id),
        lambda: other.responses.input_items.list(response.id),
        lambda: other.responses.create(input="And?", previous_response_id=response.id, **SAMPLING),
        lambda: other.conversations.retrieve(conversation.id),
        lambda: other.conversations.items.list(conversation.id),
        lambda: other.responses.create(input="And?", conversation=conversation.id, **SAMPLING),
    ):
        with pytest.raises(openai.NotFoundError):
            attempt()
    assert owner.responses.retrieve(response.id).id == response.id
    assert len(owner.conversations.items.list(conversation.id).data) == 1


def test_stored_responses_survive_a_restart(llama_server, start_proxy, tmp_path):
    store = f"sqlite://{tmp_path}/store.sqlite3"
    before = start_proxy("--llama-api", llama_server.url, "--store", store)
    first = client_of(before).responses.create(input="Remember: blue.", **SAMPLING)
    conversation = client_of(before).conversations.create(items=[{"role": "user", "content": "Hi"}])
    before.stop()
    after = start_proxy("--llama-api", llama_server.url, "--store", store)
    assert client_of(after).responses.retrieve(first.id).model_dump() == first.model_dump()
    assert client_of(after).responses.create(input="Which colour?", previous_response_id=first.id, **SAMPLING).status in (
        "completed",
        "incomplete",
    )
    assert texts(client_of(after).conversations.items.list(conversation.id).data) == ["Hi"]


def test_two_workers_add_turns_to_one_conversation_at_once(llama_server, start_proxy, tmp_path):
    store = tmp_path / "store.sqlite3"
    proxy = start_proxy("--llama-api", llama_server.url, "--store", f"sqlite://{store}", "--workers", "2")
    client = client_of(proxy)
    conversation = client.conversations.create()
    answers: dict[int, object] = {}

    def turn(n: int) -> None:
        # A client, so a connection, of its own per turn: a kept-alive connection stays with the
        # worker that accepted it, and a shared client would send every later round to that worker.
        with client_of(proxy) as own:
            answers[n] = own.responses.create(
                input=f"Say the number {n}.", conversation=conversation.id, stream=False, **{**SAMPLING, "max_output_tokens": 8}
            )

    # Twelve turns at once, again until both workers have written: which worker accepts a new
    # connection is the kernel's choice, and one worker may take all twelve.
    for first in range(0, 60, 12):
        threads = [threading.Thread(target=turn, args=(n,)) for n in range(first, first + 12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        store_users = [pid for pid in workers_of(proxy) if _has_open(pid, store)]
        if len(store_users) == 2:
            break
    assert len(store_users) == 2  # both workers wrote
    assert sorted(answers) == list(range(first + 12))
    items = list(client.conversations.items.list(conversation.id, order="asc", limit=100))
    assert len(items) == 2 * len(answers)
    for user, assistant in zip(items[::2], items[1::2], strict=True):  # each turn landed whole
        n = int(user.content[0].text.split()[-1].rstrip("."))
        assert user.role == "user" and assistant.role == "assistant" and assistant.id == answers[n].output[0].id


def _has_open(pid: int, path: Path) -> bool:
    return any(fd.resolve() == path for fd in Path(f"/proc/{pid}/fd").iterdir() if fd.is_symlink())


def test_objects_expire_after_the_ttl(llama_server, start_proxy, tmp_path):
    proxy = start_proxy("--llama-api", llama_server.url, "--store", f"sqlite://{tmp_path}/s.sqlite3", "--store-ttl", "2s")
    client = client_of(proxy)
    response = client.responses.create(input="Hi", **SAMPLING)
    conversation = client.conversations.create()
    assert client.responses.retrieve(response.id).id == response.id
    time.sleep(2.5)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.create(input="Again", previous_response_id=response.id, **SAMPLING)
    assert caught.value.body["param"] == "previous_response_id"
    with pytest.raises(openai.NotFoundError, match="Conversation with id"):
        client.conversations.retrieve(conversation.id)


@pytest.mark.parametrize("stream", [False, True])
def test_a_conversation_with_the_sdk(redis_proxies, stream):
    first_client, second_client = (client_of(proxy) for proxy in redis_proxies)
    conversation = first_client.conversations.create(items=[{"role": "user", "content": "Hello."}], metadata={"user": "ada"})
    request = {"input": "Hi", "conversation": conversation.id, **SAMPLING, "max_output_tokens": 100}
    if stream:
        with second_client.responses.stream(**request) as events:
            answer = events.get_final_response()
    else:
        answer = second_client.responses.create(**request)
    assert answer.conversation.id == conversation.id
    items = list(first_client.conversations.items.list(conversation.id, order="asc"))
    assert texts(items) == ["Hello.", "Hi", answer.output_text]
    first_client.conversations.items.delete(items[0].id, conversation_id=conversation.id)
    assert [item.id for item in second_client.conversations.items.list(conversation.id)] == [
        items[2].id,
        items[1].id,
    ]  # newest first by default
    assert second_client.conversations.update(conversation.id, metadata={"user": "bob"}).metadata == {"user": "bob"}
    assert first_client.conversations.delete(conversation.id).deleted


# --- the OpenAI Agents SDK: previous_response_id and conversation_id sessions ------------------------------------

WEATHER_CALLS: list[str] = []


@agents.function_tool(is_enabled=lambda context, agent: not WEATHER_CALLS)  # offered until called once
def get_weather(city: str) -> str:
    """The current weather in a city."""
    WEATHER_CALLS.append(city)
    return f"It is sunny in {city}."


def agent_of(proxy, **settings) -> Agent:
    model = OpenAIResponsesModel(
        model="smollm", openai_client=openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key=KEYS[0], max_retries=0, timeout=120)
    )
    return Agent(
        name="assistant",
        instructions="You are brief.",
        model=model,
        model_settings=ModelSettings(temperature=0, max_tokens=100, **settings),
    )


async def run(agent: Agent, text: str, stream: bool, **options):
    """One run of `agent` on `text`, streamed (every event read) or not."""
    config = RunConfig(tracing_disabled=True)
    if not stream:
        return await Runner.run(agent, text, run_config=config, **options)
    result = Runner.run_streamed(agent, text, run_config=config, **options)
    async for _ in result.stream_events():
        pass
    return result


@pytest.mark.parametrize("stream", [False, True])
def test_agents_sdk_previous_response_id(sqlite_proxy, stream):
    async def two_turns():
        agent = agent_of(sqlite_proxy)
        first = await run(agent, "Hi", stream)
        return first, await run(agent, "Say hello.", stream, previous_response_id=first.last_response_id)

    first, second = asyncio.run(two_turns())
    assert isinstance(second.final_output, str) and second.final_output.strip()
    items = list(client_of(sqlite_proxy).responses.input_items.list(second.last_response_id, order="asc"))
    assert texts(items) == ["Hi", first.final_output, "Say hello."]


@pytest.mark.parametrize("stream", [False, True])
def test_agents_sdk_conversation_id(redis_proxies, stream):
    conversation = client_of(redis_proxies[0]).conversations.create()
    first = asyncio.run(run(agent_of(redis_proxies[0]), "Hi", stream, conversation_id=conversation.id))
    second = asyncio.run(run(agent_of(redis_proxies[1]), "Say hello.", stream, conversation_id=conversation.id))
    items = list(client_of(redis_proxies[1]).conversations.items.list(conversation.id, order="asc"))
    assert texts(items) == ["Hi", first.final_output, "Say hello.", second.final_output]


@pytest.mark.parametrize("stream", [False, True])
def test_agents_sdk_tool_round_chained_by_previous_response_id(sqlite_proxy, stream):
    """The SDK sends the tool's output with the previous response's id, and nothing else of the history;
    the tool is offered until called once, so that the second turn answers in text."""
    WEATHER_CALLS.clear()
    agent = agent_of(sqlite_proxy, tool_choice="get_weather").clone(tools=[get_weather])
    result = asyncio.run(run(agent, "What is the weather in Paris?", stream, auto_previous_response_id=True))
    assert WEATHER_CALLS and isinstance(result.final_output, str)
    items = list(client_of(sqlite_proxy).responses.input_items.list(result.last_response_id, order="asc"))
    assert [item.type for item in items] == ["message", "function_call", "function_call_output"]
    assert items[2].output == f"It is sunny in {WEATHER_CALLS[0]}."
