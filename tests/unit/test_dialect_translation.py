"""Anthropic's and the Responses API's requests translated into the chat request every generation
goes through: exact messages, tools, choices and sampling; and what neither can express, refused."""

from __future__ import annotations

from typing import get_args

import pytest
from openai.types.responses import ResponseIncludable
from pydantic import ValidationError

from api_like_oai import errors
from api_like_oai.backends.events import GenerationEvent
from api_like_oai.dialects import anthropic, anthropic_translation, responses, responses_tools, responses_translation
from api_like_oai.errors import InvalidRequest
from api_like_oai.fleet.front import BoxesGone  # imported whatever ran before: a fixed set of errors
from api_like_oai.sealing import Seal
from api_like_oai.services.fitting import ERROR, Policy, fit
from api_like_oai.supervisor.client import SupervisorGone
from api_like_oai.tools.parser import ToolCallDelta

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def translated(module, body: dict):
    """The chat request of `body`, a request of `module`'s API (anthropic or responses)."""
    request_model, translation = (
        (anthropic.MessagesRequest, anthropic_translation)
        if module is anthropic
        else (responses.ResponsesRequest, responses_translation)
    )
    return translation.to_chat_request(request_model.model_validate(body))


def chat_of(module, body: dict) -> dict:
    chat = translated(module, body)
    return chat.model_dump(exclude_unset=True, exclude_none=True)


def messages_of(module, body: dict) -> list[dict]:
    return chat_of(module, body)["messages"]


def refused(module, body: dict) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        translated(module, body)
    return caught.value


# --- Anthropic -------------------------------------------------------------------------------------

CLAUDE = {"model": "claude-sonnet-4-5", "max_tokens": 32000}


def test_anthropic_conversation_with_tools_becomes_chat_messages():
    body = {
        **CLAUDE,
        "system": [
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Be brief."},
        ],
        "messages": [
            {"role": "user", "content": "Weather in Oslo?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "The user wants weather.", "signature": "sig"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Bergen"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "12 degrees"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "is_error": True,
                        "content": [{"type": "text", "text": "no station"}, {"type": "text", "text": "try later"}],
                    },
                    {"type": "text", "text": "<system-reminder>Be careful.</system-reminder>"},
                    {"type": "text", "text": "And now?"},
                ],
            },
        ],
    }
    assert messages_of(anthropic, body) == [
        {"role": "system", "content": "You are Claude Code.\nBe brief."},
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
                {"id": "toolu_2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Bergen"}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "12 degrees"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: no station\ntry later"},
        {"role": "user", "content": "<system-reminder>Be careful.</system-reminder>\nAnd now?"},
    ]


def test_anthropic_sampling_tools_and_choices():
    tool = {"name": "get_weather", "description": "Weather.", "input_schema": SCHEMA, "cache_control": {"type": "ephemeral"}}
    body = {
        **CLAUDE,
        "messages": [{"role": "user", "content": "Hi"}],
        "tools": [tool],
        "stop_sequences": ["END"],
        "temperature": 0.2,
        "top_p": 0.9,
        "top_k": 40,
        "stream": True,
        "metadata": {"user_id": "u1"},
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "service_tier": "auto",
    }
    chat = chat_of(anthropic, {**body, "tool_choice": {"type": "tool", "name": "get_weather"}})
    assert {key: value for key, value in chat.items() if key != "messages"} == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "stream": True,
        "temperature": 0.2,
        "top_p": 0.9,
        "top_k": 40,
        "stop": ["END"],
        "user": "u1",  # metadata.user_id: the session key routing spreads by
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": SCHEMA}}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "chat_template_kwargs": {"enable_thinking": True},
    }


@pytest.mark.parametrize(
    "tool_choice, expected",
    [
        ({"type": "auto"}, {"tool_choice": "auto"}),
        ({"type": "any"}, {"tool_choice": "required"}),
        ({"type": "any", "disable_parallel_tool_use": True}, {"tool_choice": "required", "parallel_tool_calls": False}),
        ({"type": "none"}, {"tool_choice": "none"}),
    ],
)
def test_anthropic_tool_choices(tool_choice, expected):
    body = {
        **CLAUDE,
        "messages": [{"role": "user", "content": "Hi"}],
        "tool_choice": tool_choice,
        "tools": [{"name": "get_weather", "input_schema": SCHEMA}],
    }
    chat = chat_of(anthropic, body)
    assert {key: chat[key] for key in expected} == expected
    assert ("parallel_tool_calls" in chat) == ("parallel_tool_calls" in expected)


def test_anthropic_prefill_continues_the_last_assistant_message():
    body = {
        **CLAUDE,
        "messages": [
            {"role": "user", "content": "Name a color."},
            {"role": "assistant", "content": [{"type": "text", "text": "The color is"}]},
        ],
    }
    chat = chat_of(anthropic, body)
    assert (chat["add_generation_prompt"], chat["continue_final_message"]) == (False, True)
    assert chat["messages"][-1] == {"role": "assistant", "content": "The color is"}


def test_anthropic_images_become_image_url_parts_in_user_turns_and_tool_results():
    body = {
        **CLAUDE,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Compare"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "AAAA"}},
                    {
                        "type": "tool_result",
                        "tool_use_id": "t",
                        "content": [
                            {"type": "text", "text": "screenshot:"},
                            {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
                        ],
                    },
                ],
            }
        ],
    }
    request = anthropic_translation.to_chat_request(anthropic.MessagesRequest.model_validate(body))
    messages = request.model_dump(exclude_none=True)["messages"]
    assert messages[0]["content"] == [
        {"type": "text", "text": "Compare"},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}},
    ]
    assert messages[1] == {
        "role": "tool",
        "tool_call_id": "t",
        "content": [{"type": "text", "text": "screenshot:"}, {"type": "image_url", "image_url": {"url": "https://x/y.png"}}],
    }
    # a refused image is named where the client sent it
    assert [request.image_param(n, "chat") for n in range(2)] == ["messages.0.content.1", "messages.0.content.2.content.1"]


def test_responses_input_images_become_image_url_parts_in_user_messages_and_call_outputs():
    body = {
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What is it?"},
                    {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"},
                ],
            },
            {"type": "function_call", "call_id": "c", "name": "shot", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": [{"type": "input_image", "image_url": "https://x/y.png"}]},
        ],
        "tools": [{"type": "function", "name": "shot", "parameters": {"type": "object"}}],
    }
    request = responses_translation.to_chat_request(responses.ResponsesRequest.model_validate(body))
    messages = request.model_dump(exclude_none=True)["messages"]
    assert messages[0]["content"][1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    assert messages[2]["content"] == [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]
    assert [request.image_param(n, "chat") for n in range(2)] == ["input.0.content.1", "input.2.output.0"]


@pytest.mark.parametrize(
    "content, param",
    [
        ([{"type": "image", "source": {"type": "file", "file_id": "f"}}], "messages.0.content.0.source"),
        ([{"type": "text", "text": "x"}, {"type": "document", "source": {}}], "messages.0.content.1"),
        (
            [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image", "source": {"type": "url"}}]}],
            "messages.0.content.0.content.0.source",
        ),
        ([{"type": "tool_use", "id": "t", "name": "f", "input": {}}], "messages.0.content.0"),
    ],
)
def test_anthropic_content_the_proxy_cannot_read_is_refused(content, param):
    error = refused(anthropic, {**CLAUDE, "messages": [{"role": "user", "content": content}]})
    assert error.param == param


@pytest.mark.parametrize(
    "body, param",
    [
        ({"tools": [{"name": "f", "input_schema": {"type": "string"}}]}, "tools.0.input_schema"),
        (
            {"tools": [{"type": "web_search_20250305", "name": "web_search"}, {"name": "f", "input_schema": {"type": "string"}}]},
            "tools.1.input_schema",
        ),
        ({"tools": [{"name": "f", "input_schema": SCHEMA}], "tool_choice": {"type": "tool", "name": "g"}}, "tool_choice"),
        ({"tool_choice": {"type": "any"}}, "tool_choice"),
    ],
)
def test_anthropic_unusable_tools_are_refused(body, param):
    """Checked once, by the chat schema after translation; the refusal names Anthropic's field."""
    with pytest.raises(InvalidRequest) as caught:
        anthropic_translation.to_chat_request(
            anthropic.MessagesRequest.model_validate({**CLAUDE, "messages": [{"role": "user", "content": "Hi"}], **body})
        )
    assert caught.value.param == param


@pytest.mark.parametrize(
    "field, value",
    [
        ("max_tokens", 0),
        ("temperature", 1.5),
        ("bogus", "c1"),
        ("messages", [{"role": "developer", "content": "x"}]),
        ("thinking", {"type": "sometimes"}),
        ("output_config", {"effort": "extreme"}),
        ("context_management", {"edits": [{"type": "clear_everything"}]}),
    ],
)
def test_anthropic_schema_refusals(field, value):
    with pytest.raises(ValidationError):
        anthropic.MessagesRequest.model_validate({**CLAUDE, "messages": [{"role": "user", "content": "Hi"}], field: value})


# --- Responses -------------------------------------------------------------------------------------


def test_responses_input_items_become_chat_messages():
    body = {
        "instructions": "You are Codex.",
        "input": [
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
            {"role": "developer", "content": "Later instructions."},
        ],
    }
    assert messages_of(responses, body) == [
        {"role": "system", "content": "You are Codex.\n\nSandbox: read-only."},
        {"role": "user", "content": "List the files."},
        {
            "role": "assistant",
            "content": "Listing.",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "shell", "arguments": '{"command": ["ls"]}'}},
                {"id": "call_2", "type": "function", "function": {"name": "shell", "arguments": '{"command": ["pwd"]}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
        {"role": "tool", "tool_call_id": "call_2", "content": "/work"},
        {
            "role": "assistant",
            "tool_calls": [{"id": "call_3", "type": "function", "function": {"name": "shell", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "call_3", "content": ""},
        {"role": "system", "content": "Later instructions."},
    ]


def test_responses_sampling_tools_and_format():
    tool = {"type": "function", "name": "shell", "description": "Run a command.", "parameters": SCHEMA, "strict": True}
    body = {
        "model": "gpt-5-codex",
        "input": "Hi",
        "tools": [tool],
        "tool_choice": {"type": "function", "name": "shell"},
        "parallel_tool_calls": False,
        "max_output_tokens": 500,
        "temperature": 0.3,
        "top_p": 0.8,
        "stream": True,
        "store": True,
        "reasoning": {"effort": "high", "summary": "auto"},
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "k",
        "text": {"format": {"type": "json_schema", "name": "answer", "schema": SCHEMA}},
    }
    chat = chat_of(responses, body)
    assert {key: value for key, value in chat.items() if key != "messages"} == {
        "model": "gpt-5-codex",
        "stream": True,
        "max_tokens": 500,
        "temperature": 0.3,
        "top_p": 0.8,
        "parallel_tool_calls": False,
        "prompt_cache_key": "k",  # a session key for routing
        "tools": [
            {
                "type": "function",
                "function": {"name": "shell", "description": "Run a command.", "parameters": SCHEMA, "strict": True},
            }
        ],
        "tool_choice": {"type": "function", "function": {"name": "shell"}},
        "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "json_schema": SCHEMA}},
        "reasoning_effort": "high",
    }
    assert chat_of(responses, {"input": "Hi", "text": {"format": {"type": "json_object"}}})["response_format"] == {
        "type": "json_object"
    }
    assert "response_format" not in chat_of(responses, {"input": "Hi", "text": {"format": {"type": "text"}}})


@pytest.mark.parametrize(
    "body, param",
    [
        ({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]}]}, "input.0.content.0"),
        (
            {"input": [{"role": "assistant", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}]},
            "input.0.content.0",
        ),
        (
            {"input": [{"type": "function_call_output", "call_id": "c", "output": [{"type": "input_file", "file_id": "f"}]}]},
            "input.0.output.0",
        ),
    ],
)
def test_responses_content_the_proxy_cannot_read_is_refused(body, param):
    assert refused(responses, body).param == param


@pytest.mark.parametrize(
    "body, param",
    [
        ({"background": True}, "background"),
        ({"input": []}, "input"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    ],
)
def test_responses_what_the_proxy_cannot_do_is_refused(body, param):
    with pytest.raises(InvalidRequest) as caught:
        responses.ResponsesRequest.model_validate({"input": "Hi", **body})
    assert caught.value.param == param


def test_responses_unusable_tool_parameters_are_refused_naming_the_responses_field():
    body = {
        "input": "Hi",
        "tools": [
            {"type": "function", "name": "f", "parameters": {"type": "object"}},
            {"type": "function", "name": "g", "parameters": {"type": "array"}},
        ],
    }
    assert refused(responses, body).param == "tools.1.parameters"


# --- Responses tool kinds, fields and reasoning (issue 16) ---------------------------------------------

SEAL = Seal(lambda: b"k" * 32)
SHELL_SCHEMA = {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}
TARGET = {"type": "object", "properties": {"target": {"type": "string"}}, "required": ["target"]}
PATCH_GRAMMAR = 'start: "*** Begin Patch" LF body "*** End Patch"'
CODEX_TOOLS = [
    {"type": "function", "name": "exec_command", "description": "Run a command.", "strict": False, "parameters": SHELL_SCHEMA},
    {
        "type": "namespace",
        "name": "multi_agent_v1",
        "description": "Sub-agents.",
        "tools": [
            {"type": "function", "name": "close_agent", "description": "Close an agent.", "strict": False, "parameters": TARGET},
            {"type": "custom", "name": "note", "description": "Leave a note."},
        ],
    },
    {
        "type": "custom",
        "name": "apply_patch",
        "description": "Edit files.",
        "format": {"type": "grammar", "syntax": "lark", "definition": PATCH_GRAMMAR},
    },
    {"type": "local_shell"},
    {"type": "web_search", "external_web_access": True},
    {"type": "function", "name": "multi_agent_v1.close_agent", "parameters": TARGET},  # the name a namespaced one gets
    {"type": "image_generation"},
    {"type": "mcp", "server_label": "deepwiki", "server_url": "https://x"},
]


def offered(body: dict) -> list[dict]:
    return [tool["function"] for tool in chat_of(responses, {"input": "Hi", **body}).get("tools", [])]


def test_responses_tool_kinds_become_functions_whose_names_cannot_collide():
    functions = offered({"tools": CODEX_TOOLS})
    assert [function["name"] for function in functions] == [
        "exec_command",
        "multi_agent_v1.close_agent_2",
        "multi_agent_v1.note",
        "apply_patch",
        "local_shell",
        "multi_agent_v1.close_agent",
    ]
    assert functions[0] == {"name": "exec_command", "description": "Run a command.", "parameters": SHELL_SCHEMA, "strict": False}
    assert functions[1] == {
        "name": "multi_agent_v1.close_agent_2",
        "parameters": TARGET,
        "strict": False,
        "description": "(multi_agent_v1: Sub-agents.) Close an agent.",
    }
    assert functions[2]["parameters"] == functions[3]["parameters"] == responses_tools.CUSTOM_PARAMETERS
    assert functions[3]["description"] == (
        "Edit files.\nIts `input` is free text, sent to the tool as it is.\n"
        f"The input must follow this lark grammar:\n{PATCH_GRAMMAR}"
    )
    assert functions[4]["parameters"] == responses_tools.LOCAL_SHELL_PARAMETERS
    request = responses.ResponsesRequest.model_validate({"input": "Hi", "tools": CODEX_TOOLS})
    # An mcp tool is the proxy's to run (services/mcp_loop.py): not set aside, and offered once listed.
    assert responses_translation.translate(request).headers() == {"X-Tools-Set-Aside": "web_search, image_generation"}


@pytest.mark.parametrize(
    "tool_choice, chat_choice, names",
    [
        ("none", "none", None),
        ("auto", "auto", None),
        ("required", "required", None),
        ({"type": "function", "name": "exec_command"}, {"type": "function", "function": {"name": "exec_command"}}, None),
        (
            {"type": "function", "name": "close_agent", "namespace": "multi_agent_v1"},
            {"type": "function", "function": {"name": "multi_agent_v1.close_agent_2"}},
            None,
        ),
        (
            {"type": "function", "name": "multi_agent_v1.close_agent"},  # the top-level function of that name
            {"type": "function", "function": {"name": "multi_agent_v1.close_agent"}},
            None,
        ),
        ({"type": "custom", "name": "apply_patch"}, {"type": "function", "function": {"name": "apply_patch"}}, None),
        ({"type": "custom", "name": "note"}, {"type": "function", "function": {"name": "multi_agent_v1.note"}}, None),
        ({"type": "local_shell"}, {"type": "function", "function": {"name": "local_shell"}}, None),
        (
            {
                "type": "allowed_tools",
                "mode": "required",
                "tools": [
                    {"type": "function", "name": "exec_command"},
                    {"type": "namespace", "name": "multi_agent_v1"},
                    {"type": "web_search"},
                ],
            },
            "required",
            ["exec_command", "multi_agent_v1.close_agent_2", "multi_agent_v1.note"],
        ),
        (
            {
                "type": "allowed_tools",
                "mode": "auto",
                "tools": [{"type": "local_shell"}, {"type": "custom", "name": "apply_patch"}],
            },
            "auto",
            ["apply_patch", "local_shell"],
        ),
        ({"type": "allowed_tools", "mode": "required", "tools": [{"type": "image_generation"}]}, None, []),
        ({"type": "web_search_preview"}, "auto", None),
        ({"type": "mcp", "server_label": "deepwiki", "name": "ask"}, "auto", None),
        ({"type": "file_search"}, "auto", None),
    ],
)
def test_responses_tool_choice_in_every_form(tool_choice, chat_choice, names):
    chat = chat_of(responses, {"input": "Hi", "tools": CODEX_TOOLS, "tool_choice": tool_choice})
    assert chat.get("tool_choice") == chat_choice
    all_names = [function["name"] for function in offered({"tools": CODEX_TOOLS})]
    assert [tool["function"]["name"] for tool in chat.get("tools", [])] == (all_names if names is None else names)


def test_responses_a_continued_turn_names_only_its_own_items_set_aside():
    """A continued turn's input starts with the stored items of the turns before it: the header names
    what of the request's own items was set aside (it said so of the earlier ones when they were sent)."""
    body = {
        "input": [
            {"type": "web_search_call", "id": "ws_1"},
            {"role": "user", "content": "Hi"},
            {"type": "item_reference", "id": "msg_0"},
        ]
    }
    translation = responses_translation.translate(responses.ResponsesRequest.model_validate(body))
    assert translation.headers() == {"X-Input-Items-Set-Aside": "web_search_call, item_reference"}
    assert translation.headers(first_item=1) == {"X-Input-Items-Set-Aside": "item_reference"}
    assert translation.headers(first_item=3) == {}


def test_responses_a_tool_choice_of_a_tool_set_aside_says_so():
    request = responses.ResponsesRequest.model_validate(
        {"input": "Hi", "tools": [{"type": "file_search", "vector_store_ids": ["v"]}], "tool_choice": {"type": "file_search"}}
    )
    assert responses_translation.translate(request).headers() == {
        "X-Tools-Set-Aside": "file_search",
        "X-Tool-Choice-Set-Aside": "file_search",
    }
    assert "tools" not in chat_of(
        responses,
        {"input": "Hi", "tool_choice": {"type": "file_search"}, "tools": [{"type": "file_search", "vector_store_ids": ["v"]}]},
    )


@pytest.mark.parametrize(
    "body",
    [
        {"tools": CODEX_TOOLS, "tool_choice": {"type": "function", "name": "nowhere"}},
        {"tools": [{"type": "web_search"}], "tool_choice": {"type": "function", "name": "nowhere"}},
        {"tool_choice": "required"},
    ],
)
def test_responses_a_tool_choice_among_no_tools_is_refused(body):
    assert refused(responses, {"input": "Hi", **body}).param == "tool_choice"


def test_responses_calls_of_every_kind_come_back_under_the_offered_names():
    action = {"type": "exec", "command": ["ls", "-la"], "env": {}, "timeout_ms": None, "working_directory": "/w"}
    body = {
        "tools": CODEX_TOOLS,
        "input": [
            {"role": "user", "content": "Go."},
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "close_agent",
                "namespace": "multi_agent_v1",
                "arguments": '{"target": "a"}',
                "status": "completed",
                "id": "fc_1",
            },
            {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": '*** Begin Patch\n"x"'},
            {"type": "custom_tool_call", "call_id": "c3", "name": "note", "namespace": "multi_agent_v1", "input": "hi"},
            {"type": "local_shell_call", "id": "lsh_1", "call_id": "c4", "status": "completed", "action": action},
            {"type": "function_call", "call_id": "c5", "name": "gone", "namespace": "old_ns", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "closed"},
            {"type": "custom_tool_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "patched"}]},
            {"type": "custom_tool_call_output", "call_id": "c3", "output": "noted", "id": "ctco_1"},
            {"type": "local_shell_call_output", "id": "c4", "output": '{"output": "a.txt"}', "status": "completed"},
            {"type": "function_call_output", "call_id": "c5", "output": "unknown tool"},
        ],
    }

    def call(call_id, name, arguments):
        return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}

    assert messages_of(responses, body)[1:] == [
        {
            "role": "assistant",
            "tool_calls": [
                call("c1", "multi_agent_v1.close_agent_2", '{"target": "a"}'),
                call("c2", "apply_patch", '{"input": "*** Begin Patch\\n\\"x\\""}'),
                call("c3", "multi_agent_v1.note", '{"input": "hi"}'),
                call("c4", "local_shell", '{"command": ["ls", "-la"], "env": {}, "working_directory": "/w"}'),
                call("c5", "old_ns.gone", "{}"),
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "closed"},
        {"role": "tool", "tool_call_id": "c2", "content": "patched"},
        {"role": "tool", "tool_call_id": "c3", "content": "noted"},
        {"role": "tool", "tool_call_id": "c4", "content": '{"output": "a.txt"}'},
        {"role": "tool", "tool_call_id": "c5", "content": "unknown tool"},
    ]


@pytest.mark.parametrize(
    "field, value",
    [
        *[("include", [value]) for value in get_args(ResponseIncludable)],
        ("client_metadata", {"thread_id": "t", "x-codex-turn-metadata": '{"sandbox": "none"}'}),
        ("reasoning", {"summary": "auto"}),
        ("reasoning", {"summary": "detailed", "effort": "max", "context": "all_turns"}),
        ("reasoning", {"generate_summary": "concise", "mode": "standard"}),
        ("prompt_cache_key", "01a2323e-1f31"),
        ("prompt_cache_retention", "24h"),
        ("truncation", "auto"),
        ("truncation", "disabled"),
        ("max_tool_calls", 3),
        ("parallel_tool_calls", True),
        ("background", False),
        ("store", False),
        ("service_tier", "priority"),
        ("safety_identifier", "u1"),
        ("stream_options", {"include_obfuscation": False}),
        (
            "input",
            [
                {"type": "message", "role": "developer", "content": "Be terse."},
                {"role": "user", "content": "Hi"},
                {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Later."}]},
            ],
        ),
        (
            "input",
            [
                {"role": "user", "content": "Hi"},
                {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "q"}},
                {"type": "item_reference", "id": "msg_0"},
                {"type": "compaction", "encrypted_content": "x"},
            ],
        ),
    ],
)
def test_responses_fields_agents_send_are_never_refused(field, value):
    chat_of(responses, {"input": "Hi", field: value})


def test_responses_verbosity_and_effort_reach_the_template():
    request = responses.ResponsesRequest.model_validate(
        {"input": "Hi", "text": {"verbosity": "low"}, "reasoning": {"effort": "max"}}
    )
    assert responses_translation.to_chat_request(request).template_variables() == {"reasoning_effort": "max", "verbosity": "low"}


def test_responses_input_items_of_no_use_to_the_model_are_set_aside_and_named():
    body = {
        "input": [
            {"role": "user", "content": "Hi"},
            {"type": "web_search_call", "id": "ws_1", "status": "completed"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "someone else's"},
            {"type": "item_reference", "id": "msg_0"},
            {"type": "web_search_call", "id": "ws_2"},
        ]
    }
    assert messages_of(responses, body) == [{"role": "user", "content": "Hi"}]
    request = responses.ResponsesRequest.model_validate(body)
    assert responses_translation.translate(request, SEAL).headers() == {
        "X-Input-Items-Set-Aside": "web_search_call, reasoning, item_reference"
    }


@pytest.mark.parametrize(
    "max_tool_calls, expected", [(0, {"tool_choice": "none"}), (1, {"parallel_tool_calls": False}), (2, {}), (None, {})]
)
def test_responses_max_tool_calls_limits_what_the_model_is_offered(max_tool_calls, expected):
    chat = chat_of(responses, {"input": "Hi", "tools": CODEX_TOOLS[:1], "max_tool_calls": max_tool_calls})
    assert {key: chat[key] for key in ("tool_choice", "parallel_tool_calls") if key in chat} == expected


def test_responses_max_tool_calls_ends_the_answer_at_the_call_past_it():
    events = [
        GenerationEvent(text="Two calls.", completion_tokens=2),
        GenerationEvent(tool_calls=(ToolCallDelta(0, "c1", "f", "{}"),), completion_tokens=5),
        GenerationEvent(tool_calls=(ToolCallDelta(1, "c2", "g", "{}"), ToolCallDelta(2, "c3", "h", "{}")), completion_tokens=9),
        GenerationEvent(finish_reason="tool_calls", completion_tokens=12),
    ]
    assert list(responses_tools.at_most(1)(iter(events))) == [
        *events[:2],
        GenerationEvent(finish_reason="tool_calls", completion_tokens=9),
    ]
    kept = list(responses_tools.at_most(2)(iter(events)))
    assert kept[2] == GenerationEvent(tool_calls=(ToolCallDelta(1, "c2", "g", "{}"),), completion_tokens=9)
    assert kept[3:] == [GenerationEvent(finish_reason="tool_calls", completion_tokens=9)]
    assert list(responses_tools.at_most(3)(iter(events))) == events


@pytest.mark.parametrize(
    "arguments, tool_input",
    [
        ('{"input": "*** Begin Patch"}', "*** Begin Patch"),
        ('{"patch": "*** Begin Patch"}', "*** Begin Patch"),
        ("{}", ""),
        ("", ""),
        ('{"a": "x", "b": "y"}', '{"a": "x", "b": "y"}'),
        ('{"input": 5}', '{"input": 5}'),
    ],
)
def test_responses_a_custom_calls_input_is_what_the_model_wrote(arguments, tool_input):
    assert responses_tools.custom_input(arguments) == tool_input


def thought_item(**fields) -> dict:
    return {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "A summary."}], **fields}


@pytest.mark.parametrize(
    "item, recalled",
    [
        (thought_item(encrypted_content=SEAL.wrap("reasoning", "Sealed thought.")), "Sealed thought."),
        (
            thought_item(content=[{"type": "reasoning_text", "text": "Plain "}, {"type": "reasoning_text", "text": "thought."}]),
            "Plain thought.",
        ),
        (
            thought_item(encrypted_content=SEAL.wrap("reasoning", "Sealed."), content=[{"type": "reasoning_text", "text": "x"}]),
            "Sealed.",
        ),
        (
            thought_item(encrypted_content="gAAAAB-openai-s", content=[{"type": "reasoning_text", "text": "Codex's copy."}]),
            "Codex's copy.",
        ),
        (thought_item(encrypted_content=SEAL.wrap("thinking", "Another purpose.")), None),
        (thought_item(encrypted_content=SEAL.wrap("reasoning", "Tampered.")[:-2] + "xx"), None),
        (thought_item(encrypted_content="gAAAAB-openai-s"), None),
        (thought_item(), None),
    ],
)
def test_responses_a_thought_handed_back_reaches_the_next_assistant_turn(item, recalled):
    body = {
        "input": [
            {"role": "user", "content": "Hi"},
            item,
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        ]
    }
    request = responses.ResponsesRequest.model_validate(body)
    [_, assistant] = responses_translation.chat_messages(request, seal=SEAL)
    assert assistant.get("reasoning_content") == recalled
    expected = {} if recalled else {"X-Input-Items-Set-Aside": "reasoning"}
    assert responses_translation.translate(request, SEAL).headers() == expected


def test_responses_thoughts_join_the_turn_they_precede():
    def thought(text):
        return thought_item(encrypted_content=SEAL.wrap("reasoning", text))

    body = {
        "input": [
            {"role": "user", "content": "Hi"},
            thought("First."),
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
            thought("Second."),
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
            thought("Dropped: no turn follows."),
            {"role": "user", "content": "And?"},
            thought("Third."),
            {"type": "message", "role": "assistant", "content": "Done."},
        ]
    }
    messages = responses_translation.chat_messages(responses.ResponsesRequest.model_validate(body), seal=SEAL)
    assert [(m["role"], m.get("reasoning_content")) for m in messages] == [
        ("user", None),
        ("assistant", "First.\n\nSecond."),
        ("tool", None),
        ("user", None),
        ("assistant", "Third."),
    ]
    current = responses.ResponsesRequest.model_validate({**body, "reasoning": {"context": "current_turn"}})
    assert [m.get("reasoning_content") for m in responses_translation.chat_messages(current, seal=SEAL)] == [
        None,
        None,
        None,
        None,
        "Third.",
    ]


SEARCH_TOOL = {
    "type": "tool_search",
    "execution": "client",
    "description": "Find deferred tools.",
    "parameters": {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "number"}},
        "required": ["query"],
    },
}
FOUND = [
    {
        "type": "namespace",
        "name": "multi_agent_v1",
        "description": "Sub-agents.",
        "tools": [{"type": "function", "name": "spawn_agent", "parameters": TARGET, "defer_loading": True}],
    },
    {"type": "function", "name": "exec_command", "parameters": SHELL_SCHEMA},
]  # already offered: not twice


def test_responses_a_client_tool_search_offers_what_it_found_from_then_on():
    body = {
        "tools": [CODEX_TOOLS[0], SEARCH_TOOL, {"type": "tool_search"}],
        "input": [
            {"role": "user", "content": "Spawn a helper."},
            {
                "type": "tool_search_call",
                "id": "tsc_1",
                "call_id": "c1",
                "execution": "client",
                "status": "completed",
                "arguments": {"query": "agents", "limit": 2},
            },
            {"type": "tool_search_output", "call_id": "c1", "execution": "client", "status": "completed", "tools": FOUND},
            {
                "type": "function_call",
                "call_id": "c2",
                "name": "spawn_agent",
                "namespace": "multi_agent_v1",
                "arguments": '{"target": "x"}',
            },
        ],
    }
    chat = chat_of(responses, body)
    assert [tool["function"] for tool in chat["tools"]] == [
        offered({"tools": CODEX_TOOLS[:1]})[0],
        {"name": "tool_search", "description": "Find deferred tools.", "parameters": SEARCH_TOOL["parameters"]},
        {"name": "multi_agent_v1.spawn_agent", "description": "(multi_agent_v1: Sub-agents.)", "parameters": TARGET},
    ]
    assert chat["messages"][1:] == [
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "tool_search", "arguments": '{"query": "agents", "limit": 2}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": "Tools found, callable from now on: exec_command, multi_agent_v1.spawn_agent",
        },
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "multi_agent_v1.spawn_agent", "arguments": '{"target": "x"}'},
                }
            ],
        },
    ]
    request = responses.ResponsesRequest.model_validate(body)
    assert responses_translation.translate(request).headers() == {"X-Tools-Set-Aside": "tool_search"}  # the server-side one


# --- max_tokens as an upper bound ----------------------------------------------------------------------


class Prompt:
    def __init__(self, text):
        self.text, self.stop = text, []


def words(text: str) -> int:
    return len(text.split())


@pytest.mark.parametrize("max_tokens, expected", [(32000, 100 - 4), (10, 10), (None, 100 - 18)])  # None: what the bytes prove
def test_a_bounding_max_tokens_gets_what_the_context_leaves(max_tokens, expected):
    messages = [{"role": "user", "content": "one two three four"}]
    fitted = fit(
        messages, lambda kept: Prompt(" ".join(m["content"] for m in kept)), words, 100, max_tokens, max_tokens_is_bound=True
    )
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
    (errors.FleetUnavailable("no box answers"), 529, "overloaded_error"),
    (errors.Preempted("a batch line gave its slot"), 529, "overloaded_error"),
    (errors.UpstreamTimeout("slow"), 504, "timeout_error"),
    (errors.StoreUnavailable("store down"), 503, "api_error"),  # Anthropic's API stores nothing; mapped all the same
    (errors.PermissionDenied("admin only"), 403, "permission_error"),
    (errors.RateLimited("over rpm", retry_after="3"), 429, "rate_limit_error"),
    (errors.StorageQuotaExceeded("stored too much"), 429, "rate_limit_error"),
    (errors.TooManySockets("too many sockets open"), 429, "rate_limit_error"),
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
    # these inherit a mapped parent's (SupervisorGone: UpstreamUnavailable's, as a worker retries it;
    # BoxesGone: FleetUnavailable's, a 503 the client retries)
    assert classes - {errors.TemplateError, errors.NotFound, SupervisorGone, BoxesGone} <= mapped


@pytest.mark.parametrize(
    "thinking, expected",
    [
        ({"type": "enabled", "budget_tokens": 2048}, {"enable_thinking": True}),
        ({"type": "disabled"}, {"enable_thinking": False}),
        ({"type": "adaptive"}, None),
    ],
)
def test_anthropic_thinking_reaches_the_template_as_enable_thinking(thinking, expected):
    request = anthropic.MessagesRequest.model_validate(
        {**CLAUDE, "messages": [{"role": "user", "content": "Hi"}], "thinking": thinking}
    )
    assert anthropic_translation.to_chat_request(request).chat_template_kwargs == expected


def test_responses_reasoning_effort_reaches_the_template():
    request = responses.ResponsesRequest.model_validate({"input": "Hi", "reasoning": {"effort": "low"}})
    assert responses_translation.to_chat_request(request).template_variables() == {"reasoning_effort": "low"}
