"""Anthropic's and the Responses API's requests translated into the chat request every generation
goes through: exact messages, tools, choices and sampling; and what neither can express, refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from api_like_oai import errors
from api_like_oai.dialects import anthropic, responses
from api_like_oai.errors import InvalidRequest
from api_like_oai.services.context import ERROR, Policy, fit

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def chat_of(module, body: dict) -> dict:
    request_model = anthropic.MessagesRequest if module is anthropic else responses.ResponsesRequest
    chat = module.to_chat_request(request_model.model_validate(body))
    return chat.model_dump(exclude_unset=True, exclude_none=True)


def messages_of(module, body: dict) -> list[dict]:
    return chat_of(module, body)["messages"]


def refused(module, body: dict) -> InvalidRequest:
    request_model = anthropic.MessagesRequest if module is anthropic else responses.ResponsesRequest
    with pytest.raises(InvalidRequest) as caught:
        module.to_chat_request(request_model.model_validate(body))
    return caught.value


# --- Anthropic -------------------------------------------------------------------------------------

CLAUDE = {"model": "claude-sonnet-4-5", "max_tokens": 32000}


def test_anthropic_conversation_with_tools_becomes_chat_messages():
    body = {**CLAUDE, "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
                                 {"type": "text", "text": "Be brief."}],
            "messages": [
                {"role": "user", "content": "Weather in Oslo?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "The user wants weather.", "signature": "sig"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Bergen"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "12 degrees"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
                     "content": [{"type": "text", "text": "no station"}, {"type": "text", "text": "try later"}]},
                    {"type": "text", "text": "<system-reminder>Be careful.</system-reminder>"},
                    {"type": "text", "text": "And now?"}]}]}
    assert messages_of(anthropic, body) == [
        {"role": "system", "content": "You are Claude Code.\nBe brief."},
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
            {"id": "toolu_2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Bergen"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "12 degrees"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: no station\ntry later"},
        {"role": "user", "content": "<system-reminder>Be careful.</system-reminder>\nAnd now?"}]


def test_anthropic_sampling_tools_and_choices():
    tool = {"name": "get_weather", "description": "Weather.", "input_schema": SCHEMA,
            "cache_control": {"type": "ephemeral"}}
    body = {**CLAUDE, "messages": [{"role": "user", "content": "Hi"}], "tools": [tool], "stop_sequences": ["END"],
            "temperature": 0.2, "top_p": 0.9, "top_k": 40, "stream": True, "metadata": {"user_id": "u1"},
            "thinking": {"type": "enabled", "budget_tokens": 2048}, "service_tier": "auto"}
    chat = chat_of(anthropic, {**body, "tool_choice": {"type": "tool", "name": "get_weather"}})
    assert {key: value for key, value in chat.items() if key != "messages"} == {
        "model": "claude-sonnet-4-5", "max_tokens": 32000, "stream": True, "temperature": 0.2, "top_p": 0.9,
        "top_k": 40, "stop": ["END"],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": SCHEMA}}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "chat_template_kwargs": {"enable_thinking": True}}


@pytest.mark.parametrize("tool_choice, expected", [
    ({"type": "auto"}, {"tool_choice": "auto"}),
    ({"type": "any"}, {"tool_choice": "required"}),
    ({"type": "any", "disable_parallel_tool_use": True}, {"tool_choice": "required", "parallel_tool_calls": False}),
    ({"type": "none"}, {"tool_choice": "none"}),
])
def test_anthropic_tool_choices(tool_choice, expected):
    body = {**CLAUDE, "messages": [{"role": "user", "content": "Hi"}], "tool_choice": tool_choice,
            "tools": [{"name": "get_weather", "input_schema": SCHEMA}]}
    chat = chat_of(anthropic, body)
    assert {key: chat[key] for key in expected} == expected
    assert ("parallel_tool_calls" in chat) == ("parallel_tool_calls" in expected)


def test_anthropic_prefill_continues_the_last_assistant_message():
    body = {**CLAUDE, "messages": [{"role": "user", "content": "Name a color."},
                                   {"role": "assistant", "content": [{"type": "text", "text": "The color is"}]}]}
    chat = chat_of(anthropic, body)
    assert (chat["add_generation_prompt"], chat["continue_final_message"]) == (False, True)
    assert chat["messages"][-1] == {"role": "assistant", "content": "The color is"}


@pytest.mark.parametrize("content, param", [
    ([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}], "messages.0.content.0"),
    ([{"type": "text", "text": "x"}, {"type": "document", "source": {}}], "messages.0.content.1"),
    ([{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image", "source": {}}]}],
     "messages.0.content.0.content.0"),
    ([{"type": "tool_use", "id": "t", "name": "f", "input": {}}], "messages.0.content.0"),
])
def test_anthropic_content_the_proxy_cannot_read_is_refused(content, param):
    error = refused(anthropic, {**CLAUDE, "messages": [{"role": "user", "content": content}]})
    assert error.param == param


@pytest.mark.parametrize("body, param", [
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0.type"),
    ({"tools": [{"name": "f", "input_schema": {"type": "string"}}]}, "tools.0.input_schema"),
    ({"tools": [{"name": "f", "input_schema": SCHEMA}], "tool_choice": {"type": "tool", "name": "g"}}, "tool_choice"),
    ({"tool_choice": {"type": "any"}}, "tool_choice"),
])
def test_anthropic_unusable_tools_are_refused(body, param):
    with pytest.raises(InvalidRequest) as caught:
        anthropic.MessagesRequest.model_validate({**CLAUDE, "messages": [{"role": "user", "content": "Hi"}], **body})
    assert caught.value.param == param


@pytest.mark.parametrize("field, value", [("max_tokens", 0), ("temperature", 1.5), ("container", "c1"),
                                          ("messages", [{"role": "system", "content": "x"}])])
def test_anthropic_schema_refusals(field, value):
    with pytest.raises(ValidationError):
        anthropic.MessagesRequest.model_validate({**CLAUDE, "messages": [{"role": "user", "content": "Hi"}], field: value})


# --- Responses -------------------------------------------------------------------------------------

def test_responses_input_items_become_chat_messages():
    body = {"instructions": "You are Codex.", "input": [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Sandbox: read-only."}]},
        {"role": "user", "content": "List the files."},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Listing.", "annotations": []}]},
        {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": '{"command": ["ls"]}'},
        {"type": "function_call", "call_id": "call_2", "name": "shell", "arguments": '{"command": ["pwd"]}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "/work"}]},
        {"type": "function_call", "call_id": "call_3", "name": "shell", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_3", "output": ""},
        {"role": "developer", "content": "Later instructions."}]}
    assert messages_of(responses, body) == [
        {"role": "system", "content": "You are Codex.\n\nSandbox: read-only."},
        {"role": "user", "content": "List the files."},
        {"role": "assistant", "content": "Listing.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "shell", "arguments": '{"command": ["ls"]}'}},
            {"id": "call_2", "type": "function", "function": {"name": "shell", "arguments": '{"command": ["pwd"]}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
        {"role": "tool", "tool_call_id": "call_2", "content": "/work"},
        {"role": "assistant", "tool_calls": [
            {"id": "call_3", "type": "function", "function": {"name": "shell", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_3", "content": ""},
        {"role": "system", "content": "Later instructions."}]


def test_responses_sampling_tools_and_format():
    tool = {"type": "function", "name": "shell", "description": "Run a command.", "parameters": SCHEMA, "strict": True}
    body = {"model": "gpt-5-codex", "input": "Hi", "tools": [tool], "tool_choice": {"type": "function", "name": "shell"},
            "parallel_tool_calls": False, "max_output_tokens": 500, "temperature": 0.3, "top_p": 0.8, "stream": True,
            "store": True, "reasoning": {"effort": "high", "summary": "auto"}, "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": "k", "text": {"format": {"type": "json_schema", "name": "answer", "schema": SCHEMA}}}
    chat = chat_of(responses, body)
    assert {key: value for key, value in chat.items() if key != "messages"} == {
        "model": "gpt-5-codex", "stream": True, "max_tokens": 500, "temperature": 0.3, "top_p": 0.8,
        "parallel_tool_calls": False,
        "tools": [{"type": "function", "function": {"name": "shell", "description": "Run a command.",
                                                    "parameters": SCHEMA, "strict": True}}],
        "tool_choice": {"type": "function", "function": {"name": "shell"}},
        "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "json_schema": SCHEMA}},
        "reasoning_effort": "high"}
    assert chat_of(responses, {"input": "Hi", "text": {"format": {"type": "json_object"}}})["response_format"] == \
        {"type": "json_object"}
    assert "response_format" not in chat_of(responses, {"input": "Hi", "text": {"format": {"type": "text"}}})


@pytest.mark.parametrize("body, param", [
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}]},
     "input.0.content.0"),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": [{"type": "input_file", "file_id": "f"}]}]},
     "input.0.output.0"),
])
def test_responses_content_the_proxy_cannot_read_is_refused(body, param):
    assert refused(responses, body).param == param


@pytest.mark.parametrize("body, param", [
    ({"tools": [{"type": "web_search"}]}, "tools.0.type"),
    ({"tools": [{"type": "function", "name": "f"}, {"type": "file_search", "vector_store_ids": []}]}, "tools.1.type"),
    ({"input": []}, "input"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    ({"tools": [{"type": "function", "name": "f", "parameters": {"type": "array"}}]}, "tools.0.parameters"),
])
def test_responses_what_the_proxy_cannot_do_is_refused(body, param):
    with pytest.raises(InvalidRequest) as caught:
        responses.ResponsesRequest.model_validate({"input": "Hi", **body})
    assert caught.value.param == param


# --- max_tokens as an upper bound ----------------------------------------------------------------------

class Prompt:
    def __init__(self, text):
        self.text, self.stop = text, []


def words(text: str) -> int:
    return len(text.split())


@pytest.mark.parametrize("max_tokens, expected", [(32000, 100 - 4), (10, 10), (None, 100 - 4)])
def test_a_bounding_max_tokens_gets_what_the_context_leaves(max_tokens, expected):
    messages = [{"role": "user", "content": "one two three four"}]
    fitted = fit(messages, lambda kept: Prompt(" ".join(m["content"] for m in kept)), words, 100, max_tokens,
                 max_tokens_is_bound=True)
    assert (fitted.n_predict, fitted.dropped_messages) == (expected, 0)


def test_a_demanding_max_tokens_is_refused_under_the_strict_policy_without_the_bound():
    messages = [{"role": "user", "content": "one two three four"}]
    render = lambda kept: Prompt(" ".join(m["content"] for m in kept))  # noqa: E731
    with pytest.raises(InvalidRequest):
        fit(messages, render, words, 100, 32000, Policy(overflow=ERROR))
    assert fit(messages, render, words, 100, 32000, Policy(overflow=ERROR), max_tokens_is_bound=True).n_predict == 96


# --- errors in Anthropic's shape ---------------------------------------------------------------------

ANTHROPIC_ERRORS = [
    (errors.InvalidRequest("bad", param="max_tokens"), 400, "invalid_request_error"),
    (errors.ContextLengthExceeded("too long"), 400, "invalid_request_error"),
    (errors.AuthenticationFailed("no key"), 401, "authentication_error"),
    (errors.ModelNotFound("no model"), 404, "not_found_error"),
    (errors.PayloadTooLarge("too big"), 413, "request_too_large"),
    (errors.ProxyError("bug"), 500, "api_error"),
    (errors.UpstreamError("garbage"), 502, "api_error"),
    (errors.UpstreamUnavailable("down"), 529, "overloaded_error"),
    (errors.UpstreamTimeout("slow"), 504, "timeout_error"),
    (errors.StoreUnavailable("store down"), 503, "api_error"),   # Anthropic's API stores nothing; mapped all the same
]


@pytest.mark.parametrize("error, status, kind", ANTHROPIC_ERRORS)
def test_every_error_has_an_anthropic_status_and_type(error, status, kind):
    assert error.anthropic_status == status
    assert error.to_anthropic() == {"type": "error", "error": {"type": kind, "message": error.to_anthropic()["error"]["message"]}}
    assert error.message in error.to_anthropic()["error"]["message"]


def test_every_error_class_is_mapped():
    classes, pending = set(), [errors.ProxyError]
    while pending:
        cls = pending.pop()
        classes.add(cls)
        pending += cls.__subclasses__()
    mapped = {type(error) for error, _, _ in ANTHROPIC_ERRORS}
    assert classes - {errors.TemplateError, errors.NotFound} <= mapped   # those two inherit a mapped parent's


@pytest.mark.parametrize("thinking, expected", [
    ({"type": "enabled", "budget_tokens": 2048}, {"enable_thinking": True}),
    ({"type": "disabled"}, {"enable_thinking": False}),
    ({"type": "adaptive"}, None),
])
def test_anthropic_thinking_reaches_the_template_as_enable_thinking(thinking, expected):
    request = anthropic.MessagesRequest.model_validate(
        {**CLAUDE, "messages": [{"role": "user", "content": "Hi"}], "thinking": thinking})
    assert anthropic.to_chat_request(request).chat_template_kwargs == expected


def test_responses_reasoning_effort_reaches_the_template():
    request = responses.ResponsesRequest.model_validate({"input": "Hi", "reasoning": {"effort": "low"}})
    assert responses.to_chat_request(request).template_variables() == {"reasoning_effort": "low"}
