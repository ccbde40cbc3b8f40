"""Every field of OpenAI's current Chat Completions and Completions references, sent as today's clients
send them: each is applied, shapes the prompt, is accepted and ignored, or (only where honouring it is
impossible and ignoring it would mislead) refused with a 400 naming it. The lists below are the one
place that says which; the manual's field table (docs/openai.md) says the same."""

from __future__ import annotations

import pytest
import requests

TEMPLATE = (
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    "effort={{ reasoning_effort | default('-') }} verbosity={{ verbosity | default('-') }}"
)
PROXY_FLAGS = ("--chat-template", TEMPLATE)
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
OK, REFUSED = 200, 400


def sent(field, value):
    return lambda answer, payload: payload[field] == value


# field -> [(value, other fields it needs, status, check(answer, upstream payload) or None)]
CHAT_FIELDS = {
    "messages": [
        (
            [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
            {},
            OK,
            lambda answer, payload: payload["prompt"].startswith("system: Be brief.\nuser: Hi\n"),
        )
    ],
    "model": [("gpt-4o", {}, OK, lambda answer, payload: answer["model"] == "gpt-4o")],
    "audio": [({"voice": "alloy", "format": "wav"}, {}, REFUSED, None)],
    "frequency_penalty": [(0.5, {}, OK, sent("frequency_penalty", 0.5))],
    "function_call": [("auto", {"functions": [WEATHER["function"]]}, OK, None)],
    "functions": [([WEATHER["function"]], {}, OK, lambda answer, payload: "get_weather" in payload["prompt"])],
    "logit_bias": [({"42": 5}, {}, OK, sent("logit_bias", [[42, 5]]))],
    "logprobs": [(True, {}, OK, sent("n_probs", 1))],
    "max_completion_tokens": [(5, {}, OK, sent("n_predict", 5))],
    "max_tokens": [(6, {}, OK, sent("n_predict", 6))],
    "metadata": [({"session": "abc"}, {}, OK, None)],
    "modalities": [(["text"], {}, OK, None), (["text", "audio"], {}, REFUSED, None)],
    "n": [(2, {}, OK, lambda answer, payload: len(answer["choices"]) == 2)],
    "parallel_tool_calls": [
        (
            False,
            {"tools": [WEATHER], "tool_choice": "required"},
            OK,
            lambda answer, payload: '")*' not in payload["grammar"].splitlines()[0],
        )
    ],
    # Set aside: a prediction only makes an answer faster, never different.
    "prediction": [({"type": "content", "content": "Hello"}, {}, OK, lambda answer, payload: "prediction" not in payload)],
    "presence_penalty": [(0.25, {}, OK, sent("presence_penalty", 0.25))],
    "prompt_cache_key": [("user-42", {}, OK, None)],
    "prompt_cache_retention": [("24h", {}, OK, None)],
    "reasoning_effort": [("low", {}, OK, lambda answer, payload: "effort=low" in payload["prompt"])],
    "response_format": [({"type": "json_object"}, {}, OK, sent("json_schema", {"type": "object"}))],
    "safety_identifier": [("hashed-user", {}, OK, None)],
    "seed": [(3, {}, OK, sent("seed", 3))],
    "service_tier": [("auto", {}, OK, lambda answer, payload: answer["service_tier"] == "default")],
    "stop": [(["\n\n", "END"], {}, OK, lambda answer, payload: {"\n\n", "END"} <= set(payload["stop"]))],
    "store": [(True, {}, OK, None)],
    "stream": [(False, {}, OK, None)],
    "stream_options": [({"include_usage": True, "include_obfuscation": False}, {"stream": True}, OK, None)],
    "temperature": [(0.3, {}, OK, sent("temperature", 0.3))],
    "tool_choice": [("required", {"tools": [WEATHER]}, OK, lambda answer, payload: "grammar" in payload)],
    "tools": [([WEATHER], {}, OK, lambda answer, payload: "get_weather" in payload["prompt"])],
    "top_logprobs": [(3, {"logprobs": True}, OK, sent("n_probs", 3))],
    "top_p": [(0.9, {}, OK, sent("top_p", 0.9))],
    "user": [("user-1", {}, OK, None)],
    "verbosity": [("low", {}, OK, lambda answer, payload: "verbosity=low" in payload["prompt"])],
    "web_search_options": [({}, {}, REFUSED, None)],
    # Not OpenAI's, but what llama-server and vLLM users send.
    "chat_template_kwargs": [({"reasoning_effort": "high"}, {}, OK, lambda answer, payload: "effort=high" in payload["prompt"])],
}

COMPLETION_FIELDS = {
    "model": [("gpt-3.5-turbo-instruct", {}, OK, lambda answer, payload: answer["model"] == "gpt-3.5-turbo-instruct")],
    "prompt": [("Once upon", {}, OK, sent("prompt", "Once upon"))],
    "best_of": [(1, {}, OK, None), (3, {}, REFUSED, None)],
    "echo": [(True, {}, OK, lambda answer, payload: answer["choices"][0]["text"].startswith("Once"))],
    "frequency_penalty": [(0.5, {}, OK, sent("frequency_penalty", 0.5))],
    "logit_bias": [({"7": -100}, {}, OK, sent("logit_bias", [[7, -100]]))],
    "logprobs": [(2, {}, OK, sent("n_probs", 2))],
    "max_tokens": [(7, {}, OK, sent("n_predict", 7))],
    "n": [(2, {}, OK, lambda answer, payload: len(answer["choices"]) == 2)],
    "presence_penalty": [(0.5, {}, OK, sent("presence_penalty", 0.5))],
    "seed": [(9, {}, OK, sent("seed", 9))],
    "stop": [("END", {}, OK, lambda answer, payload: "END" in payload["stop"])],
    "stream": [(False, {}, OK, None)],
    "stream_options": [({"include_usage": True}, {"stream": True}, OK, None)],
    "suffix": [("The end.", {}, OK, lambda answer, payload: payload["input_suffix"] == "The end.")],
    "temperature": [(0.2, {}, OK, sent("temperature", 0.2))],
    "top_p": [(0.5, {}, OK, sent("top_p", 0.5))],
    "user": [("user-1", {}, OK, None)],
}


def cases(fields: dict):
    return [
        pytest.param(field, *case, id=f"{field}-{n}")
        for field, field_cases in fields.items()
        for n, case in enumerate(field_cases)
    ]


def check(proxy, fake, path: str, body: dict, field: str, status: int, effect) -> None:
    response = requests.post(proxy.url + path, json=body, timeout=30)
    assert response.status_code == status, response.text
    if status == REFUSED:
        assert response.json()["error"]["param"] == field
    elif effect is not None:
        answer = response.json() if not body.get("stream") else None
        assert effect(answer, fake.requests[-1])


@pytest.mark.parametrize("field, value, needs, status, effect", cases(CHAT_FIELDS))
def test_each_chat_completions_field(proxy, fake, field, value, needs, status, effect):
    body = {"messages": [{"role": "user", "content": "Hi"}], **needs, field: value}
    check(proxy, fake, "/v1/chat/completions", body, field, status, effect)


@pytest.mark.parametrize("field, value, needs, status, effect", cases(COMPLETION_FIELDS))
def test_each_completions_field(proxy, fake, field, value, needs, status, effect):
    body = {"prompt": "Once upon", **needs, field: value}
    check(proxy, fake, "/v1/completions", body, field, status, effect)


@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "temperatur": 0.5}),
        ("/v1/completions", {"prompt": "Hi", "frobnicate": True}),
    ],
)
def test_an_unknown_field_is_still_a_400_naming_it(proxy, path, body):
    response = requests.post(proxy.url + path, json=body, timeout=30)
    assert response.status_code == 400
    assert response.json()["error"]["param"] in ("temperatur", "frobnicate")
