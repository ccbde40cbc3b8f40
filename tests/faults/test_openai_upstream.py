"""`kind: openai` models in front of the scripted fake's OpenAI-compatible API (as vLLM or a remote
llama-server's /v1 would answer): Anthropic's Messages and the Responses API become streamed chat
requests, and the upstream's chunks are written exactly as the same answer from llama.cpp is (the
model `local` next to it, replaying the same call as a hermes-format model writes it); embeddings
are relayed; what needs llama.cpp's tokenizer is a 400 saying so."""

from __future__ import annotations

import json
import re
import time

import anthropic
import pytest
import requests

from api_like_oai.backends.llamacpp import SAMPLING_ECHOED

from ..conftest import openai_client
from .conftest import HERMES_ARGUMENTS, HERMES_CALL
from .test_anthropic_stream import usage

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city"],
    },
}
RESPONSES_WEATHER = {
    "type": "function",
    "name": WEATHER["name"],
    "description": WEATHER["description"],
    "parameters": WEATHER["input_schema"],
}
QUESTION = [{"role": "user", "content": "Weather in Zürich?"}]
# What an OpenAI-compatible server streams for the answer HERMES_CALL writes: the text, then the call.
CALL_DELTAS = [
    {"content": "Let me check. "},
    {
        "tool_calls": [
            {"index": 0, "id": "call_upstream1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
        ]
    },
    *[{"tool_calls": [{"index": 0, "function": {"arguments": piece}}]} for piece in ('{"city": "Zür', 'ich", "unit": "c"}')],
]
USAGE = {"prompt_tokens": 3, "completion_tokens": len(HERMES_CALL)}  # what the llama.cpp fake counts


@pytest.fixture(scope="module")
def proxy(fake, start_proxy, tmp_path_factory):
    config = tmp_path_factory.mktemp("config") / "config.yaml"
    config.write_text(
        f"models:\n  local:\n    upstreams: [{fake.url}]\n    chat_prompt_model: qwen2.5\n"
        f"  remote:\n    kind: openai\n    upstreams: [{fake.url}/v1]\n    upstream_model: big-model\n"
    )
    return start_proxy("--config", str(config))


@pytest.fixture(autouse=True)
def scripted(fake):
    """The same call scripted both ways: llama.cpp's tokens and the OpenAI deltas."""
    fake.tokens, fake.openai_deltas, fake.openai_finish, fake.openai_usage = HERMES_CALL, CALL_DELTAS, "tool_calls", USAGE
    yield fake
    fake.tokens, fake.openai_deltas, fake.openai_finish = (" Hello", ",", " world", "!"), None, "stop"
    fake.openai_usage, fake.openai_stop_reason, fake.behaviour = {"prompt_tokens": 3, "completion_tokens": 4}, None, "ok"


def post(proxy, path: str, body: dict) -> requests.Response:
    return requests.post(proxy.url + path, json=body, timeout=30)


def sse_events(response: requests.Response) -> list[dict]:
    assert response.status_code == 200, response.text
    return [json.loads(raw.split("\ndata: ", 1)[1]) for raw in response.text.split("\n\n")[:-1]]


def without_sampling(events: list[dict]) -> dict:
    """The sampling values the events' response objects echo (one set: asserted), removed from them."""
    echoed = [{key: event["response"].pop(key) for key in SAMPLING_ECHOED} for event in events if "response" in event]
    assert all(values == echoed[0] for values in echoed)
    return echoed[0]


def collapsed(events: list[dict]) -> list[dict]:
    """The events with ids, times and sequence numbers blanked, and consecutive deltas of one block or
    item joined: llama.cpp's text arrives in other pieces than the upstream's, the blocks must not differ."""
    text = json.dumps(events)
    for key in ("id", "call_id", "item_id", "created_at"):
        text = _blank(text, key)
    joined: list[dict] = []
    for event in json.loads(text):
        event.pop("sequence_number", None)
        previous = joined[-1] if joined else None
        if (
            previous
            and previous["type"] == event["type"]
            and event["type"].endswith("delta")
            and _place(previous) == _place(event)
            and "delta" in event
        ):
            _join(previous, event)
        else:
            joined.append(event)
    return joined


def _blank(text: str, key: str) -> str:
    return re.sub(rf'"{key}": (?:"[^"]*"|\d+)', f'"{key}": "-"', text)


def _place(event: dict):
    return event.get("index"), event.get("output_index"), event.get("content_index")


def _join(previous: dict, event: dict) -> None:
    if isinstance(event["delta"], str):
        previous["delta"] += event["delta"]
    else:
        for key in ("text", "partial_json"):
            if key in event["delta"]:
                previous["delta"][key] += event["delta"][key]


# --- the Messages API -----------------------------------------------------------------------


@pytest.mark.parametrize("tool_choice", [{"type": "auto"}, {"type": "tool", "name": "get_weather"}])
def test_a_tool_use_stream_is_written_as_for_llamacpp(proxy, tool_choice):
    body = {"max_tokens": 1000, "messages": QUESTION, "tools": [WEATHER], "tool_choice": tool_choice, "stream": True}
    local = collapsed(sse_events(post(proxy, "/v1/messages", {**body, "model": "local"})))
    remote = collapsed(sse_events(post(proxy, "/v1/messages", {**body, "model": "remote"})))
    # The prompt's token count comes with the upstream's last chunk, so message_start cannot carry it.
    assert remote[0]["message"]["usage"] == usage(0, input_tokens=0)
    remote[0]["message"]["usage"]["input_tokens"] = 3
    local[0]["message"]["model"] = "remote"
    assert remote == local
    assert [event["type"] for event in remote] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert remote[5]["delta"] == {"type": "input_json_delta", "partial_json": HERMES_ARGUMENTS}
    assert remote[-2]["delta"]["stop_reason"] == "tool_use"


def test_the_sdk_reads_the_same_message_streamed_and_not(proxy):
    client = anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0)
    request = {"model": "remote", "max_tokens": 1000, "messages": QUESTION, "tools": [WEATHER]}
    message = client.messages.create(**request)
    with client.messages.stream(**request) as stream:
        streamed = stream.get_final_message()
    for answer in (message, streamed):
        text, call = answer.content
        assert (text.type, text.text) == ("text", "Let me check. ")
        assert (call.type, call.id, call.name, call.input) == (
            "tool_use",
            "call_upstream1",
            "get_weather",
            {"city": "Zürich", "unit": "c"},
        )
        assert (answer.model, answer.stop_reason) == ("remote", "tool_use")
        assert (answer.usage.input_tokens, answer.usage.output_tokens) == (3, len(HERMES_CALL))


def test_a_tool_round_trip_reaches_the_upstream_as_a_chat_request(proxy, scripted):
    history = [
        *QUESTION,
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Zürich"}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "22°C"}]},
    ]
    body = {
        "model": "remote",
        "max_tokens": 1000,
        "system": "Be brief.",
        "messages": history,
        "tools": [WEATHER],
        "tool_choice": {"type": "any"},
        "temperature": 0.2,
        "stop_sequences": ["END"],
    }
    assert post(proxy, "/v1/messages", body).status_code == 200
    assert scripted.requests[-1] == {
        "model": "big-model",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Zürich?"},
            {
                "role": "assistant",
                "content": "Let me check.",
                "tool_calls": [
                    {"id": "toolu_01", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Zürich"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "toolu_01", "content": "22°C"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {"name": "get_weather", "description": WEATHER["description"], "parameters": WEATHER["input_schema"]},
            }
        ],
        "tool_choice": "required",
        "max_tokens": 1000,
        "temperature": 0.2,
        "stop": ["END"],
    }


@pytest.mark.parametrize(
    "finish, upstream_stop, expected",
    [
        ("length", None, ("max_tokens", None)),
        ("stop", "END", ("stop_sequence", "END")),  # vLLM says which stop string matched
        ("stop", None, ("end_turn", None)),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_stop_reasons(proxy, scripted, finish, upstream_stop, expected, stream):
    scripted.openai_deltas, scripted.openai_finish, scripted.openai_stop_reason = [{"content": "Hi"}], finish, upstream_stop
    body = {"model": "remote", "max_tokens": 1000, "messages": QUESTION, "stop_sequences": ["END"], "stream": stream}
    response = post(proxy, "/v1/messages", body)
    message = sse_events(response)[-2]["delta"] if stream else response.json()
    assert (message["stop_reason"], message["stop_sequence"]) == expected


def test_an_upstream_that_refuses_is_the_error_in_anthropics_shape(proxy, scripted):
    scripted.behaviour = "status_500"
    response = post(proxy, "/v1/messages", {"model": "remote", "max_tokens": 10, "messages": QUESTION, "stream": True})
    assert response.status_code == 502
    assert response.json()["type"] == "error" and response.json()["error"]["type"] == "api_error"


def test_an_upstream_lost_mid_stream_ends_it_with_an_error_event(proxy, scripted):
    scripted.behaviour, scripted.openai_deltas = "die_mid_stream", [{"content": word} for word in ("a", "b", "c", "d")]
    events = sse_events(post(proxy, "/v1/messages", {"model": "remote", "max_tokens": 10, "messages": QUESTION, "stream": True}))
    assert events[-1]["type"] == "error"
    assert "lost the connection" in events[-1]["error"]["message"]


# --- the Responses API ----------------------------------------------------------------------


def test_a_function_call_stream_is_written_as_for_llamacpp(proxy):
    body = {"input": "Weather in Zürich?", "tools": [RESPONSES_WEATHER], "stream": True}
    local = collapsed(sse_events(post(proxy, "/v1/responses", {**body, "model": "local"})))
    remote = collapsed(sse_events(post(proxy, "/v1/responses", {**body, "model": "remote"})))
    # the sampling echoed is each model's own (llama.cpp's defaults, OpenAI's for the remote): not the stream's
    local_sampling, remote_sampling = without_sampling(local), without_sampling(remote)
    assert remote_sampling == {"temperature": 1.0, "top_p": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}
    assert set(local_sampling) == set(remote_sampling)
    assert json.dumps(local).replace('"local"', '"remote"') == json.dumps(remote)
    assert remote[-1]["type"] == "response.completed"
    assert [item["type"] for item in remote[-1]["response"]["output"]] == ["message", "function_call"]
    assert remote[-1]["response"]["output"][1]["arguments"] == HERMES_ARGUMENTS


def test_the_openai_sdk_reads_the_same_response_streamed_and_not(proxy, scripted):
    client = openai_client(proxy.url)
    request = {"model": "remote", "input": "Weather in Zürich?", "tools": [RESPONSES_WEATHER]}
    response = client.responses.create(**request)
    with client.responses.stream(**request) as stream:
        streamed = stream.get_final_response()
    for answer in (response, streamed):
        assert answer.output_text == "Let me check. "
        [call] = [item for item in answer.output if item.type == "function_call"]
        assert (call.call_id, call.name, call.arguments) == ("call_upstream1", "get_weather", HERMES_ARGUMENTS)
    assert scripted.requests[-1]["tools"] == [
        {
            "type": "function",
            "function": {"name": "get_weather", "description": WEATHER["description"], "parameters": WEATHER["input_schema"]},
        }
    ]


def test_the_token_limit_makes_an_incomplete_response(proxy, scripted):
    scripted.openai_deltas, scripted.openai_finish = [{"content": "Hi"}], "length"
    response = openai_client(proxy.url).responses.create(model="remote", input="Hi", max_output_tokens=4)
    assert (response.status, response.incomplete_details.reason) == ("incomplete", "max_output_tokens")
    assert scripted.requests[-1]["max_tokens"] == 4


# --- other endpoints ------------------------------------------------------------------------


def test_embeddings_are_relayed_to_the_upstream(proxy, scripted):
    answer = openai_client(proxy.url, strict=False).embeddings.create(model="remote", input=["a", "b"])  # relayed as is
    assert answer.model == "remote"
    assert [item.embedding for item in answer.data] == [[0.5, -0.25], [0.5, -0.25]]
    assert scripted.requests[-1] == {"model": "big-model", "input": ["a", "b"], "encoding_format": "base64"}
    relayed = post(proxy, "/v1/embeddings", {"model": "remote", "input": "a"}).json()
    assert (relayed["model"], relayed["data"][0]["embedding"]) == ("remote", [0.5, -0.25])


@pytest.mark.parametrize(
    "path, body, cannot",
    [
        ("/v1/internal/encode", {"text": "hi"}, "tokenize text"),
        ("/v1/internal/decode", {"tokens": [1, 2]}, "turn tokens into text"),
        ("/v1/internal/token-count", {"text": "hi"}, "count tokens"),
        ("/v1/internal/chat-prompt", {"messages": QUESTION}, "show a chat's prompt"),
        ("/v1/responses/input_tokens", {"input": "hi"}, "count a prompt's tokens"),
    ],
)
def test_what_needs_llamacpp_is_a_400_saying_what_the_model_cannot_do(proxy, path, body, cannot):
    response = post(proxy, path, {**body, "model": "remote"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["param"], error["code"]) == ("model", "not_supported")
    assert f"model 'remote' is served by an OpenAI-compatible upstream, which cannot {cannot}" in error["message"]


def test_count_tokens_is_a_400_in_anthropics_shape(proxy):
    response = post(proxy, "/v1/messages/count_tokens", {"model": "remote", "messages": QUESTION})
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert "cannot count a prompt's tokens" in response.json()["error"]["message"]


def _metric(proxy, name: str, **labels: str) -> float:
    """One sample of the proxy's /metrics (0 before the series exists)."""
    wanted = [f'{key}="{value}"' for key, value in labels.items()]
    for line in requests.get(proxy.url + "/metrics", timeout=5).text.splitlines():
        if line.startswith((name + "{", name + " ")) and all(label in line for label in wanted):
            return float(line.split()[-1])
    return 0.0


def _counted(proxy, status: str) -> tuple[float, float, float]:
    """(requests with `status`, prompt tokens, completion tokens) the metrics hold for the `remote` model."""
    return (
        _metric(proxy, "api_like_oai_requests_total", endpoint="/v1/chat/completions", model="remote", status=status),
        _metric(proxy, "api_like_oai_tokens_total", model="remote", kind="prompt"),
        _metric(proxy, "api_like_oai_tokens_total", model="remote", kind="completion"),
    )


@pytest.mark.parametrize("stream", [False, True])
def test_a_relayed_request_is_counted_with_the_upstreams_usage(proxy, scripted, stream):
    """An OpenAI request passed through as it is still closes its access record: the request and the
    tokens the upstream reported are counted (and a key's usage written from them, its place freed),
    for a stream once it ended."""
    before = _counted(proxy, "200")
    body = {"model": "remote", "messages": QUESTION, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    response = post(proxy, "/v1/chat/completions", body)
    assert response.status_code == 200, response.text
    if stream:
        chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
        assert chunks[-1]["usage"]["completion_tokens"] == USAGE["completion_tokens"]  # relayed as sent
        _wait_for(lambda: _counted(proxy, "200")[0] == before[0] + 1)
    after = _counted(proxy, "200")
    assert after[0] == before[0] + 1
    assert (after[1] - before[1], after[2] - before[2]) == (USAGE["prompt_tokens"], USAGE["completion_tokens"])
    assert _metric(proxy, "api_like_oai_streams_in_flight") == 0


def test_a_relayed_stream_the_upstream_drops_is_counted_as_its_error(proxy, scripted):
    before = _counted(proxy, "502")[0]
    scripted.behaviour, scripted.openai_deltas = "die_mid_stream", [{"content": word} for word in ("a", "b", "c", "d")]
    response = post(proxy, "/v1/chat/completions", {"model": "remote", "messages": QUESTION, "stream": True})
    assert response.status_code == 200 and "upstream_unavailable" in response.text
    _wait_for(lambda: _counted(proxy, "502")[0] == before + 1)
    assert _metric(proxy, "api_like_oai_streams_in_flight") == 0


def _wait_for(condition, timeout: float = 10.0) -> None:
    """The stream's record closes as the server finishes the response, a moment after the client read it."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not counted in time"
        time.sleep(0.05)
