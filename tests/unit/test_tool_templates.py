"""The shipped tool-calling templates write exactly the prompt each model was trained on.

qwen2.5, llama-3.1 and mistral-v3 are the models' own chat templates (tokenizer_config.json), shipped
verbatim. The expected strings are written out by hand from each model's documented format (Qwen's
function-calling guide, Meta's Llama 3.1 prompt-format page, Mistral's v3 tokenizer) and its template,
and reviewed byte for byte. Never regenerate them from the templates' output: a difference is a
question about the model's format, not a test to update. Where the model's template departs from
the documented format, the comment above the expectation says so.
"""

from __future__ import annotations

import datetime

import pytest

from api_like_oai import render_chat
from api_like_oai.errors import TemplateError
from api_like_oai.prompts import FormatterOptions, JinjaFormatter, jinja, shipped
from api_like_oai.prompts.tools import short_id

SYSTEM = {"role": "system", "content": "You are a weather assistant."}
USER = {"role": "user", "content": "What is the weather in Paris, and what time is it?"}
FINAL_ANSWER = {"role": "assistant", "content": "It is 22 degrees Celsius in Paris and 14:05 UTC."}
WEATHER_RESULT = '{"temperature": 22, "unit": "celsius"}'
TIME_RESULT = '{"time": "14:05"}'

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "The city's name."}},
                "required": ["city"],
            },
        },
    },
    {"type": "function", "function": {"name": "get_time", "description": "Get the current UTC time."}},
]


def call(call_id: str, name: str, arguments: dict) -> dict:
    """An OpenAI tool call, its arguments already decoded into an object (what these templates want)."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def parallel_calls(weather_id: str, time_id: str) -> list[dict]:
    """System, user, one assistant message with two calls (content null, as OpenAI clients send it),
    both results, the final answer."""
    return [
        SYSTEM,
        USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call(weather_id, "get_weather", {"city": "Paris"}), call(time_id, "get_time", {})],
        },
        {"role": "tool", "tool_call_id": weather_id, "content": WEATHER_RESULT},
        {"role": "tool", "tool_call_id": time_id, "content": TIME_RESULT},
        FINAL_ANSWER,
    ]


def sequential_calls(weather_id: str, time_id: str) -> list[dict]:
    """The same exchange with one call per assistant message (Llama 3.1 allows no more)."""
    return [
        SYSTEM,
        USER,
        {"role": "assistant", "content": None, "tool_calls": [call(weather_id, "get_weather", {"city": "Paris"})]},
        {"role": "tool", "tool_call_id": weather_id, "content": WEATHER_RESULT},
        {"role": "assistant", "content": None, "tool_calls": [call(time_id, "get_time", {})]},
        {"role": "tool", "tool_call_id": time_id, "content": TIME_RESULT},
        FINAL_ANSWER,
    ]


# The BOS and EOS tokens each model's tokenizer declares (Qwen2.5 has no BOS).
TOKENS = {
    "qwen2.5": ("", "<|im_end|>"),
    "llama-3.1": ("<|begin_of_text|>", "<|eot_id|>"),
    "mistral-v3": ("<s>", "</s>"),
}

CONVERSATIONS = {
    "qwen2.5": parallel_calls("call_1", "call_2"),
    "llama-3.1": sequential_calls("call_1", "call_2"),
    # Mistral's ids are 9 alphanumerics, as mistral_common generates them.
    "mistral-v3": parallel_calls("a1B2c3D4e", "f5G6h7J8k"),
}

EXPECTED = {
    # Tools one JSON object a line inside <tools>; each call its own <tool_call> block; the results
    # of consecutive tool messages share one user turn, each in <tool_response>.
    "qwen2.5": (
        "<|im_start|>system\nYou are a weather assistant.\n\n"
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        '{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city.", '
        '"parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city\'s name."}}, '
        '"required": ["city"]}}}\n'
        '{"type": "function", "function": {"name": "get_time", "description": "Get the current UTC time."}}\n'
        "</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n"
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\nWhat is the weather in Paris, and what time is it?<|im_end|>\n"
        "<|im_start|>assistant\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n"
        '<tool_response>\n{"temperature": 22, "unit": "celsius"}\n</tool_response>\n'
        '<tool_response>\n{"time": "14:05"}\n</tool_response><|im_end|>\n'
        "<|im_start|>assistant\nIt is 22 degrees Celsius in Paris and 14:05 UTC.<|im_end|>\n"
        "<|im_start|>assistant\n"
    ),
    # Meta's format: "Environment: ipython" and the dates in the system turn; the tools (JSON,
    # indent 4) and their instructions open the first user message (note Meta's missing space in
    # "value}.Do not"); a call is {"name": ..., "parameters": ...} ending with <|eot_id|> (custom
    # tools, not builtin ones); results are ipython turns. The template writes a result with tojson,
    # and OpenAI's tool content is a string, so the JSON result arrives as a quoted JSON string
    # (Meta's page shows the object bare): that is what the model's own template does everywhere.
    "llama-3.1": (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Environment: ipython\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
        "You are a weather assistant.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n"
        "Given the following functions, please respond with a JSON for a function call with its proper "
        "arguments that best answers the given prompt.\n\n"
        'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.'
        "Do not use variables.\n\n"
        '{\n    "type": "function",\n    "function": {\n        "name": "get_weather",\n'
        '        "description": "Get the current weather in a city.",\n'
        '        "parameters": {\n            "type": "object",\n            "properties": {\n'
        '                "city": {\n                    "type": "string",\n'
        '                    "description": "The city\'s name."\n                }\n            },\n'
        '            "required": [\n                "city"\n            ]\n        }\n    }\n}\n\n'
        '{\n    "type": "function",\n    "function": {\n        "name": "get_time",\n'
        '        "description": "Get the current UTC time."\n    }\n}\n\n'
        "What is the weather in Paris, and what time is it?<|eot_id|>"
        '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>'
        '<|start_header_id|>ipython<|end_header_id|>\n\n"{\\"temperature\\": 22, \\"unit\\": \\"celsius\\"}"<|eot_id|>'
        '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "get_time", "parameters": {}}<|eot_id|>'
        '<|start_header_id|>ipython<|end_header_id|>\n\n"{\\"time\\": \\"14:05\\"}"<|eot_id|>'
        "<|start_header_id|>assistant<|end_header_id|>\n\nIt is 22 degrees Celsius in Paris and 14:05 UTC.<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    ),
    # The v3 tokenizer's format: [AVAILABLE_TOOLS] right before the last user message; calls as one
    # JSON list with each call's 9-character id, closed by </s>; each result in [TOOL_RESULTS] with
    # its content written raw (so JSON content stays JSON, as mistral_common writes it) and the id.
    # Answers are " {answer}</s>"; there is no generation prompt (the prompt ends on the model's turn).
    # The system message is in front of the last user message, as mistral_common writes it (the model's
    # own template wrote it only when that message was the last of all: here, with calls and an answer
    # after it, it was gone; the shipped template follows mistral_common).
    "mistral-v3": (
        "<s>[AVAILABLE_TOOLS] ["
        '{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city.", '
        '"parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city\'s name."}}, '
        '"required": ["city"]}}}, '
        '{"type": "function", "function": {"name": "get_time", "description": "Get the current UTC time."}}'
        "][/AVAILABLE_TOOLS]"
        "[INST] You are a weather assistant.\n\nWhat is the weather in Paris, and what time is it?[/INST]"
        '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "a1B2c3D4e"}, '
        '{"name": "get_time", "arguments": {}, "id": "f5G6h7J8k"}]</s>'
        '[TOOL_RESULTS] {"content": {"temperature": 22, "unit": "celsius"}, "call_id": "a1B2c3D4e"}[/TOOL_RESULTS]'
        '[TOOL_RESULTS] {"content": {"time": "14:05"}, "call_id": "f5G6h7J8k"}[/TOOL_RESULTS]'
        " It is 22 degrees Celsius in Paris and 14:05 UTC.</s>"
    ),
}


def render(name: str, messages: list[dict], **kwargs) -> str:
    bos, eos = TOKENS[name]
    return render_chat(messages, chat_prompt_model=name, bos_token=bos, eos_token=eos, **kwargs).text


@pytest.fixture(autouse=True)
def pinned_clock(monkeypatch):
    """strftime_now answers a fixed day, so no expectation can depend on when the tests run."""
    day = datetime.datetime(2031, 2, 3)
    monkeypatch.setitem(jinja._environment().globals, "strftime_now", day.strftime)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_renders_a_tool_calling_conversation_exactly(name):
    assert render(name, CONVERSATIONS[name], tools=TOOLS, add_generation_prompt=True) == EXPECTED[name]


@pytest.mark.parametrize("content", [None, ""])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_null_and_empty_content_of_a_tool_call_message_render_alike(name, content):
    messages = [dict(message) for message in CONVERSATIONS[name]]
    for message in messages:
        if "tool_calls" in message:
            message["content"] = content
    assert render(name, messages, tools=TOOLS) == EXPECTED[name]


def test_llama_3_1_writes_its_own_fixed_date_not_the_clock():
    """Llama 3.1's template reads `date_string` (default "26 Jul 2024") and never strftime_now;
    the pinned clock above says 03 Feb 2031, which must not appear."""
    text = render("llama-3.1", [USER])
    assert "Today Date: 26 Jul 2024\n\n" in text
    assert "2031" not in text


def test_llama_3_1_refuses_parallel_tool_calls():
    with pytest.raises(TemplateError, match="This model only supports single tool-calls at once!"):
        render("llama-3.1", parallel_calls("call_1", "call_2"), tools=TOOLS)


@pytest.mark.parametrize("bad_id", ["call_1", "call_0123456789", "a1B2c3D4"])
def test_mistral_v3_refuses_tool_call_ids_that_are_not_9_characters(bad_id):
    """The template itself raises; render_chat (and the proxy) map such ids to 9 characters."""
    bos, eos = TOKENS["mistral-v3"]
    template = JinjaFormatter(shipped.load("mistral-v3"), FormatterOptions(bos_token=bos, eos_token=eos))
    with pytest.raises(TemplateError, match="Tool call IDs should be alphanumeric strings with length 9!"):
        template.render(parallel_calls(bad_id, "f5G6h7J8k"), tools=TOOLS)
    mapped = short_id(bad_id)
    assert f'"id": "{mapped}"' in render("mistral-v3", parallel_calls(bad_id, "f5G6h7J8k"), tools=TOOLS)


# Shorter conversations that exercise the rest of each template's rules.
OTHER_CONVERSATIONS = [
    # Without tools Qwen2.5 is ChatML with a default system message.
    (
        "qwen2.5",
        [USER],
        None,
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat is the weather in Paris, and what time is it?<|im_end|>\n"
        "<|im_start|>assistant\n",
    ),
    # Without tools Llama 3.1 still writes the dates, but no "Environment: ipython"; contents are trimmed.
    (
        "llama-3.1",
        [SYSTEM, {"role": "user", "content": " Hi\n"}],
        None,
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
        "You are a weather assistant.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
    ),
    # When the last message is the user's, Mistral v3 puts the system message in front of it, after the tools.
    (
        "mistral-v3",
        [SYSTEM, USER],
        TOOLS[1:],
        "<s>[AVAILABLE_TOOLS] "
        '[{"type": "function", "function": {"name": "get_time", "description": "Get the current UTC time."}}]'
        "[/AVAILABLE_TOOLS]"
        "[INST] You are a weather assistant.\n\nWhat is the weather in Paris, and what time is it?[/INST]",
    ),
    ("mistral-v3", [USER], None, "<s>[INST] What is the weather in Paris, and what time is it?[/INST]"),
]


@pytest.mark.parametrize(
    ("name", "messages", "tools", "expected"),
    OTHER_CONVERSATIONS,
    ids=[f"{case[0]}-{n}" for n, case in enumerate(OTHER_CONVERSATIONS)],
)
def test_renders_other_conversations_exactly(name, messages, tools, expected):
    assert render(name, messages, tools=tools) == expected
