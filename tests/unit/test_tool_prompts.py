"""Tools into the prompt: native for templates that render them, written into messages otherwise."""

from __future__ import annotations

import json

import pytest

from api_like_oai import render_chat
from api_like_oai.prompts import JinjaFormatter, normalise_messages
from api_like_oai.prompts.capabilities import probe
from api_like_oai.prompts.shipped import load
from api_like_oai.prompts.tools import NO_CAPABILITIES, prepare, short_id, tools_prompt
from api_like_oai.services.fitting import fit

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CALL = {"id": "call_Ab3", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def conversation(assistant_content=None, tool_content="18 C") -> list[dict]:
    return normalise_messages(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": assistant_content, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_Ab3", "content": tool_content},
        ]
    )


def test_a_formatter_without_tools_gets_them_written_into_the_messages():
    messages, tools = prepare(conversation(), [WEATHER], None)
    assert tools is None
    assert messages == [
        {"role": "system", "content": "Be brief.\n\n" + tools_prompt([WEATHER])},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'},
        {"role": "user", "content": "<tool_response>\n18 C\n</tool_response>"},
    ]


def test_the_tools_prompt_lists_each_function_as_json():
    text = tools_prompt([WEATHER])
    assert '\n{"name": "get_weather", "description": "Weather in a city.", "parameters": ' in text
    assert '<tool_call>\n{"name": "<tool name>", "arguments": {<arguments as JSON>}}\n</tool_call>' in text


def test_without_a_system_message_one_is_added():
    messages, _ = prepare(normalise_messages([{"role": "user", "content": "Hi"}]), [WEATHER], None)
    assert messages[0] == {"role": "system", "content": tools_prompt([WEATHER])}


def test_templates_without_a_system_role_get_the_tools_before_the_first_user_message():
    no_system = NO_CAPABILITIES.__class__(**{**NO_CAPABILITIES.__dict__, "supports_system_role": False})
    messages, _ = prepare(normalise_messages([{"role": "user", "content": "Hi"}]), [WEATHER], no_system)
    assert messages == [{"role": "user", "content": tools_prompt([WEATHER]) + "\n\nHi"}]


def test_tool_results_and_the_next_user_message_become_one_user_turn():
    messages = normalise_messages(
        [
            {"role": "user", "content": "Two cities"},
            {"role": "assistant", "content": "", "tool_calls": [CALL, {**CALL, "id": "call_2"}]},
            {"role": "tool", "tool_call_id": "call_Ab3", "content": "18 C"},
            {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "20 C"}]},
            {"role": "user", "content": "Thanks"},
        ]
    )
    prepared, _ = prepare(messages, None, None)
    assert [m["role"] for m in prepared] == ["user", "assistant", "user"]
    assert prepared[2]["content"] == ("<tool_response>\n18 C\n</tool_response>\n<tool_response>\n20 C\n</tool_response>\nThanks")


@pytest.mark.parametrize("assistant_content", [None, "", "Let me look."])
def test_every_shape_of_a_call_message_renders_with_every_shipped_tool_template(assistant_content):
    for name in ("qwen2.5", "llama-3.1", "mistral-v3", "chatml", "llama-2", "vicuna_v1.1"):
        text = render_chat(conversation(assistant_content), chat_prompt_model=name, tools=[WEATHER]).text
        assert "Paris" in text and "18 C" in text, name


def test_qwen_gets_the_arguments_as_an_object_not_a_string_encoded_twice():
    text = render_chat(conversation(), chat_prompt_model="qwen2.5", tools=[WEATHER]).text
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    assert '\\"city\\"' not in text


def test_mistral_gets_nine_character_ids_the_same_for_call_and_result():
    capabilities = probe(load("mistral-v3"))
    messages, tools = prepare(conversation(), [WEATHER], capabilities)
    assert tools == [WEATHER]
    call_id = messages[2]["tool_calls"][0]["id"]
    assert call_id == short_id("call_Ab3") == messages[3]["tool_call_id"]
    assert len(call_id) == 9 and call_id.isalnum()
    text = JinjaFormatter(load("mistral-v3")).render(messages, tools=tools).text
    assert f'"id": "{call_id}"' in text


def test_tool_results_are_named_after_their_call():
    capabilities = probe(load("qwen2.5"))
    messages, _ = prepare(conversation(), [WEATHER], capabilities)
    assert messages[3]["name"] == "get_weather"


def test_the_deprecated_function_call_history_becomes_a_call_and_its_result():
    messages = normalise_messages(
        [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": None, "function_call": {"name": "get_weather", "arguments": "{}"}},
            {"role": "function", "name": "get_weather", "content": "18 C"},
        ]
    )
    prepared, _ = prepare(messages, None, probe(load("qwen2.5")))
    assert prepared[1]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": {}}
    assert prepared[2]["role"] == "tool"
    assert prepared[2]["tool_call_id"] == prepared[1]["tool_calls"][0]["id"]


def test_arguments_that_are_not_json_reach_the_template_as_written():
    broken = {**CALL, "function": {"name": "get_weather", "arguments": "{oops"}}
    messages = normalise_messages(
        [{"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": [broken]}]
    )
    prepared, _ = prepare(messages, None, probe(load("qwen2.5")))
    assert prepared[1]["tool_calls"][0]["function"]["arguments"] == "{oops"


def test_context_fitting_drops_a_call_together_with_its_results():
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "old question"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_Ab3", "content": "x" * 40},
        {"role": "assistant", "content": "old answer"},
        {"role": "user", "content": "new question"},
    ]
    kept_versions = []

    def render(kept):
        kept_versions.append([m["role"] for m in kept])
        return type("Prompt", (), {"text": json.dumps(kept)})()

    fitted = fit(messages, render, lambda text: len(text) // 4, context_length=60, max_tokens=10)
    assert ["system", "user", "tool", "assistant", "user"] not in kept_versions  # never an orphan result
    assert ["system", "user", "assistant", "tool", "assistant", "user"] in kept_versions
    assert ["system", "assistant", "user"] in kept_versions
    assert fitted.dropped_messages >= 3
