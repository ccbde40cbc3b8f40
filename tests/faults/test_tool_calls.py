"""Tool calls in each native format, replayed by a scripted fake llama.cpp exactly as tool-trained
models write them (SmolLM2 cannot on demand), split at awkward places, through the real proxy CLI
and the official SDK with strict response validation."""

from __future__ import annotations

import json

import pytest
import requests

from ..conftest import openai_client
from .conftest import HERMES_ARGUMENTS, HERMES_CALL

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city"],
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "description": "The time now."}}
MESSAGES = [{"role": "user", "content": "Weather in Zürich?"}]

# What each format's models write, token by token, split inside markers, keys and strings.
REPLAYS = {
    "hermes": HERMES_CALL,
    "mistral": ["[TOOL_CALLS]", "[{", '"name": "get_weather", ', '"arguments": {"city": "Zür', 'ich", "unit": "c"}}', "]"],
    "llama3": ['{"name": "get_weather", "para', 'meters": {"city": "Zür', 'ich", "unit": "c"}}'],
    "generic": ["<tool", "_call>", '{"name": "get_weather", "arguments": {"city": "Zürich", "unit": "c"}}', "</tool_call>"],
}
TEMPLATES = {"hermes": "qwen2.5", "mistral": "mistral-v3", "llama3": "llama-3.1", "generic": "chatml"}
CONTENT_BEFORE = {"hermes": "Let me check. ", "mistral": None, "llama3": None, "generic": None}
ARGUMENTS = HERMES_ARGUMENTS
MARKUP = ("<tool", "tool_call", "</", "[TOOL", "TOOL_CALLS", "python_tag")


@pytest.fixture(scope="module")
def proxies(fake, start_proxies):
    started = start_proxies(*(("--llama-api", fake.url, "--chat-prompt-model", template) for template in TEMPLATES.values()))
    return dict(zip(TEMPLATES, started, strict=True))


@pytest.fixture(autouse=True)
def reset(fake):
    fake.tokens, fake.stop_type = REPLAYS["hermes"], "eos"
    yield
    fake.tokens, fake.stop_type = (" Hello", ",", " world", "!"), "eos"


def collect_stream(stream, markup_is_text: bool = False) -> tuple[str | None, list[dict], str, list]:
    """(content, tool calls, finish_reason, chunks) assembled from a streamed answer as clients do,
    checking on the way what the SDKs rely on (and, unless the markup is expected to come back as
    text, that none of it reaches the content)."""
    content, calls, finish_reason, chunks = None, {}, None, list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    for chunk in chunks:
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                assert markup_is_text or not any(marker in delta.content for marker in MARKUP), delta.content
                content = (content or "") + delta.content
            for call in delta.tool_calls or ():
                if call.index not in calls:
                    assert call.id and call.type == "function" and call.function.name
                    calls[call.index] = {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.function.name, "arguments": ""},
                    }
                else:
                    assert call.id is None and call.type is None and call.function.name is None
                calls[call.index]["function"]["arguments"] += call.function.arguments or ""
            finish_reason = choice.finish_reason or finish_reason
    return content, [calls[i] for i in sorted(calls)], finish_reason, chunks


@pytest.mark.parametrize("format_name", REPLAYS)
@pytest.mark.parametrize("tool_choice", ["auto", "required"])
def test_each_format_gives_the_same_call_streamed_and_not(fake, proxies, format_name, tool_choice):
    fake.tokens = REPLAYS[format_name]
    client = openai_client(proxies[format_name].url)
    request = {"model": "m", "messages": MESSAGES, "tools": [WEATHER, TIME], "tool_choice": tool_choice}
    answer = client.chat.completions.create(**request)
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == CONTENT_BEFORE[format_name]
    [call] = choice.message.tool_calls
    assert (call.type, call.function.name, call.function.arguments) == ("function", "get_weather", ARGUMENTS)
    assert call.id.startswith("call_") and len(call.id) == 29

    content, calls, finish_reason, _ = collect_stream(client.chat.completions.create(**request, stream=True))
    assert (content, finish_reason) == (CONTENT_BEFORE[format_name], "tool_calls")
    assert [c["function"] for c in calls] == [{"name": "get_weather", "arguments": ARGUMENTS}]


@pytest.mark.parametrize(
    "format_name, sent",
    [
        ("hermes", {"preserved_tokens": ["<tool_call>", "</tool_call>"]}),
        ("mistral", {"preserved_tokens": ["[TOOL_CALLS]"]}),
        ("llama3", {"preserved_tokens": ["<|python_tag|>"]}),
        ("generic", {}),
    ],
)
def test_required_sends_a_grammar_and_the_marker_tokens(fake, proxies, format_name, sent):
    fake.tokens = REPLAYS[format_name]
    requests.post(
        proxies[format_name].url + "/v1/chat/completions",
        timeout=30,
        json={"messages": MESSAGES, "tools": [WEATHER], "tool_choice": "required"},
    ).raise_for_status()
    payload = fake.requests[-1]
    assert {key: payload[key] for key in sent} == sent
    assert payload["grammar"].startswith("root ::= ")
    assert "get_weather" in payload["grammar"] and "grammar_lazy" not in payload


def test_auto_without_lazy_grammars_upstream_sends_no_grammar(fake, proxies):
    """This fake's /props does not show a llama-server that knows lazy grammars: an eager grammar
    would force a call, so calls are parsed without one."""
    requests.post(
        proxies["hermes"].url + "/v1/chat/completions", timeout=30, json={"messages": MESSAGES, "tools": [WEATHER]}
    ).raise_for_status()
    assert "grammar" not in fake.requests[-1]


def test_auto_with_lazy_grammars_upstream_sends_triggers(start_fake, start_proxy):
    fake = start_fake(props_extra={"chat_template_caps": {"supports_tools": False}})
    proxy = start_proxy("--llama-api", fake.url, "--chat-prompt-model", "qwen2.5")
    requests.post(
        proxy.url + "/v1/chat/completions", timeout=30, json={"messages": MESSAGES, "tools": [WEATHER]}
    ).raise_for_status()
    payload = fake.requests[-1]
    assert payload["grammar_lazy"] is True
    assert payload["grammar_triggers"] == [{"type": 1, "value": "<tool_call>"}]
    assert payload["grammar"].startswith('root ::= "<tool_call>"')


@pytest.mark.parametrize("stream", [False, True])
def test_parallel_calls_have_their_own_index_and_id(fake, proxies, stream):
    fake.tokens = [
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>\n<tool',
        '_call>{"name": "get_time"}</tool_call>',
    ]
    client = openai_client(proxies["hermes"].url)
    request = {"model": "m", "messages": MESSAGES, "tools": [WEATHER, TIME]}
    if stream:
        content, calls, finish_reason, _ = collect_stream(client.chat.completions.create(**request, stream=True))
    else:
        message = client.chat.completions.create(**request).choices[0].message
        content, calls = message.content, [c.model_dump() for c in message.tool_calls]
    assert content is None
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("get_weather", '{"city": "Oslo"}'),
        ("get_time", "{}"),
    ]
    assert len({c["id"] for c in calls}) == 2


@pytest.mark.parametrize(
    "tokens, name",
    [
        (['Sure <tool_call>{"name": "get_weather", "arguments": {"city": ]}</tool_call>'], "broken JSON"),
        (['<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>'], "unknown tool"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_what_is_not_a_valid_call_comes_back_as_text(fake, proxies, tokens, name, stream):
    fake.tokens = tokens
    client = openai_client(proxies["hermes"].url)
    request = {"model": "m", "messages": MESSAGES, "tools": [WEATHER]}
    if stream:
        chunks = list(client.chat.completions.create(**request, stream=True))
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish_reason = chunks[-1].choices[0].finish_reason
        assert not any(c.choices[0].delta.tool_calls for c in chunks if c.choices)
    else:
        choice = client.chat.completions.create(**request).choices[0]
        content, finish_reason = choice.message.content, choice.finish_reason
        assert choice.message.tool_calls is None
    assert (content, finish_reason) == ("".join(tokens), "stop"), name


def answers(client, request: dict, markup_is_text: bool) -> dict[str, tuple[str | None, list[dict], str]]:
    """{"folded": ..., "streamed": ...}: (content, calls as (name, arguments), finish_reason) of each."""
    choice = client.chat.completions.create(**request).choices[0]
    folded = (
        choice.message.content,
        [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or ()],
        choice.finish_reason,
    )
    content, calls, finish_reason, _ = collect_stream(
        client.chat.completions.create(**request, stream=True), markup_is_text=markup_is_text
    )
    return {
        "folded": folded,
        "streamed": (content, [(c["function"]["name"], c["function"]["arguments"]) for c in calls], finish_reason),
    }


CUT_REPLAYS = [(name, REPLAYS[name][:end]) for name in REPLAYS for end in range(1, len(REPLAYS[name]))]


@pytest.mark.parametrize("format_name, tokens", CUT_REPLAYS, ids=[f"{name}-{len(tokens)}" for name, tokens in CUT_REPLAYS])
@pytest.mark.parametrize("stop_type, finish_reason", [("limit", "length"), ("eos", "stop")])
def test_a_call_cut_by_the_end_of_generation_never_has_broken_arguments(
    fake, proxies, format_name, tokens, stop_type, finish_reason
):
    """The replay cut after each of its tokens, by the token limit or an end of generation. A call
    given whole is the whole call; one the cut falls in comes back as text, except where its arguments
    streamed (a grammar held it: tool_choice "required", streamed): closed into JSON, not "tool_calls"."""
    fake.tokens, fake.stop_type = tokens, stop_type
    client = openai_client(proxies[format_name].url)
    text = "".join(tokens)
    for tool_choice in ("auto", "required"):
        request = {"model": "m", "messages": MESSAGES, "tools": [WEATHER], "tool_choice": tool_choice}
        for mode, (content, calls, finish) in answers(client, request, markup_is_text=True).items():
            context = (tool_choice, mode, text)
            if not calls:
                assert (content, finish) == (text, finish_reason), context
            elif calls == [("get_weather", ARGUMENTS)]:
                assert finish == {"length": "length", "stop": "tool_calls"}[finish_reason], context
            else:
                assert (tool_choice, mode) == ("required", "streamed"), context
                [(name, arguments)] = calls
                assert name == "get_weather" and isinstance(json.loads(arguments), dict), context
                assert (content, finish) == (CONTENT_BEFORE[format_name], finish_reason), context


@pytest.mark.parametrize(
    "tool_choice, streamed_calls",
    [
        ("auto", None),  # no grammar: the stream holds the call back as the fold does
        ("required", [("get_weather", '{"city": "Zür"}')]),
    ],
)
def test_a_call_cut_by_the_token_limit_ends_with_length(fake, proxies, tool_choice, streamed_calls):
    """Without a grammar the cut call cannot be told from text; with one its arguments streamed as
    written, so the stream closes them (the fold, which streamed nothing, gives the text back)."""
    tokens = ['<tool_call>{"name": "get_weather", ', '"arguments": {"city": "Zür']
    fake.tokens, fake.stop_type = tokens, "limit"
    client = openai_client(proxies["hermes"].url)
    request = {"model": "m", "messages": MESSAGES, "tools": [WEATHER], "tool_choice": tool_choice, "max_tokens": 9}
    got = answers(client, request, markup_is_text=True)
    assert got["folded"] == ("".join(tokens), [], "length")
    assert got["streamed"] == (got["folded"] if streamed_calls is None else (None, streamed_calls, "length"))


def test_n_choices_usage_and_logprobs_together(fake, proxies):
    fake.tokens = REPLAYS["hermes"]
    client = openai_client(proxies["hermes"].url)
    content_by_choice, calls_by_choice = {}, {}
    chunks = list(
        client.chat.completions.create(
            model="m", messages=MESSAGES, tools=[WEATHER], n=2, stream=True, logprobs=True, stream_options={"include_usage": True}
        )
    )
    for chunk in chunks:
        for choice in chunk.choices:
            content_by_choice[choice.index] = content_by_choice.get(choice.index, "") + (choice.delta.content or "")
            for call in choice.delta.tool_calls or ():
                calls_by_choice.setdefault(choice.index, []).append(call)
    assert content_by_choice == {0: "Let me check. ", 1: "Let me check. "}
    assert {index: calls[0].function.name for index, calls in calls_by_choice.items()} == {0: "get_weather", 1: "get_weather"}
    assert chunks[-1].usage.completion_tokens == 2 * len(REPLAYS["hermes"])


@pytest.mark.parametrize("stream", [False, True])
def test_deprecated_functions_are_answered_with_function_call(fake, proxies, stream):
    fake.tokens = REPLAYS["hermes"]
    body = {"messages": MESSAGES, "functions": [WEATHER["function"]], "function_call": {"name": "get_weather"}, "stream": stream}
    response = requests.post(proxies["hermes"].url + "/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 200, response.text
    if stream:
        events = [json.loads(e[6:]) for e in response.text.split("\n\n") if e.startswith("data: {")]
        calls = [
            e["choices"][0]["delta"]["function_call"]
            for e in events
            if e["choices"] and "function_call" in e["choices"][0]["delta"]
        ]
        assert calls[0]["name"] == "get_weather"
        assert "".join(c["arguments"] for c in calls) == ARGUMENTS
        assert events[-1]["choices"][0]["finish_reason"] == "function_call"
    else:
        choice = response.json()["choices"][0]
        assert choice["finish_reason"] == "function_call"
        assert choice["message"]["function_call"] == {"name": "get_weather", "arguments": ARGUMENTS}
        assert "tool_calls" not in choice["message"]


def test_chat_prompt_shows_format_and_grammar(proxies):
    answer = requests.post(
        proxies["mistral"].url + "/v1/internal/chat-prompt",
        timeout=30,
        json={"messages": MESSAGES, "tools": [WEATHER], "tool_choice": "required"},
    ).json()
    assert answer["tool_call_format"] == "mistral"
    assert answer["grammar"].startswith('root ::= "[TOOL_CALLS]"')
    assert answer["grammar_lazy"] is False
    assert "[AVAILABLE_TOOLS]" in answer["prompt"]


def test_an_openai_compatible_upstream_gets_the_tools_unchanged(fake, start_proxy, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(f"models:\n  remote:\n    kind: openai\n    upstreams: [{fake.url}/v1]\n    upstream_model: big-model\n")
    proxy = start_proxy("--config", str(config))
    body = {
        "model": "remote",
        "messages": MESSAGES,
        "tools": [WEATHER, TIME],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "parallel_tool_calls": False,
        "stream": True,
    }
    response = requests.post(proxy.url + "/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 200
    assert fake.requests[-1] == {**body, "model": "big-model"}


@pytest.mark.parametrize(
    "parameters, message",
    [
        ({"type": "string"}, "type 'object'"),
        ({"type": "object", "properties": {"x": {"type": "strung"}}}, "unknown type"),
        (
            {"type": "object", "properties": {f"p{n}": {"type": "string", "description": "x" * 100} for n in range(800)}},
            "bytes of JSON",
        ),
    ],
)
def test_a_malformed_or_oversized_tool_is_a_400_naming_it(proxies, parameters, message):
    tool = {"type": "function", "function": {"name": "f", "parameters": parameters}}
    response = requests.post(
        proxies["hermes"].url + "/v1/chat/completions", timeout=30, json={"messages": MESSAGES, "tools": [WEATHER, tool]}
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"].startswith("tools.1.function.parameters") and message in error["message"]


def test_a_tool_without_a_name_is_a_400_naming_it(proxies):
    response = requests.post(
        proxies["hermes"].url + "/v1/chat/completions",
        timeout=30,
        json={"messages": MESSAGES, "tools": [{"type": "function", "function": {}}]},
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "tools.0.function.name"
