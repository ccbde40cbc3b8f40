"""The exact JSON each request sends to llama.cpp."""

from __future__ import annotations

import pytest

from api_like_oai.prompts import ChatPrompt
from api_like_oai.protocol import LLAMA_CPP_FIELDS, ChatCompletionRequest, CompletionRequest
from api_like_oai.services.chat import upstream_payload as chat_payload
from api_like_oai.services.completions import upstream_request
from api_like_oai.services.fitting import fit

MESSAGES = [{"role": "user", "content": "Hi"}]
PROMPT = ChatPrompt("<user>Hi<bot>", ("</s>",))


def upstream_payload(request: ChatCompletionRequest, prompt: ChatPrompt) -> dict:
    """The chat payload of `prompt`, fitted as for a model whose context length is unknown: the reply's
    length is the request's max_tokens (max_completion_tokens first), else llama.cpp's -1."""
    return chat_payload(request, fit([], lambda _: prompt, None, None, request.token_limit()))


EXAMPLE_VALUES = {
    "grammar": 'root ::= "x"',
    "json_schema": {"type": "object"},
    "samplers": ["top_k"],
    "penalize_nl": True,
    "ignore_eos": True,
    "cache_prompt": False,
}


def test_chat_payload_with_openai_fields():
    request = ChatCompletionRequest(
        messages=MESSAGES,
        stop=["\n", "</s>"],
        max_completion_tokens=9,
        max_tokens=99,
        temperature=0.2,
        top_p=0.9,
        seed=4,
        presence_penalty=0.1,
        frequency_penalty=0.3,
        logit_bias={"15": -100, "7": 2.5},
        logprobs=True,
        top_logprobs=0,
    )
    assert upstream_payload(request, PROMPT) == {
        "prompt": "<user>Hi<bot>",
        "stop": ["</s>", "\n"],
        "stream": True,
        "n_predict": 9,
        "frequency_penalty": 0.3,
        "presence_penalty": 0.1,
        "seed": 4,
        "temperature": 0.2,
        "top_p": 0.9,
        "logit_bias": [[15, -100.0], [7, 2.5]],
        "n_probs": 1,
    }


def test_nulls_send_nothing_but_the_defaults():
    request = ChatCompletionRequest(messages=MESSAGES, stop=None, temperature=None, seed=None, top_k=None)
    assert upstream_payload(request, PROMPT) == {"prompt": "<user>Hi<bot>", "stop": ["</s>"], "stream": True, "n_predict": -1}


@pytest.mark.parametrize("field", LLAMA_CPP_FIELDS)
def test_each_llama_cpp_field_passes_through_only_when_given(field):
    value = EXAMPLE_VALUES.get(field, 3)
    payload = upstream_payload(ChatCompletionRequest(messages=MESSAGES, **{field: value}), PROMPT)
    assert payload[field] == value
    _, completion_payload = upstream_request(CompletionRequest(prompt="x", **{field: value}), "x")
    assert completion_payload[field] == value
    assert field not in upstream_payload(ChatCompletionRequest(messages=MESSAGES), PROMPT)


@pytest.mark.parametrize(
    "response_format, constraint",
    [
        ({"type": "text"}, {}),
        ({"type": "json_object"}, {"json_schema": {"type": "object"}}),
        ({"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "array"}}}, {"json_schema": {"type": "array"}}),
    ],
)
def test_response_format_becomes_a_json_schema(response_format, constraint):
    payload = upstream_payload(ChatCompletionRequest(messages=MESSAGES, response_format=response_format), PROMPT)
    assert {k: v for k, v in payload.items() if k == "json_schema"} == constraint


def test_suffix_goes_to_infill():
    path, payload = upstream_request(CompletionRequest(prompt="def f():", suffix="\nf()", max_tokens=5), "def f():")
    assert path == "/infill"
    assert payload == {
        "stop": [],
        "stream": True,
        "n_predict": 5,
        "input_prefix": "def f():",
        "input_suffix": "\nf()",
        "prompt": "",
    }
    assert upstream_request(CompletionRequest(prompt="x"), "x") == (
        "/completion",
        {"stop": [], "stream": True, "n_predict": -1, "prompt": "x"},
    )
