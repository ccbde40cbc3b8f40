"""System and developer messages after the first turn: kept where they were, in a form the template takes.

The expected prompts are written out by hand from each template's format (see test_shipped_templates.py)
and reviewed byte for byte: where the template writes a late system message in place, the prompt is
the template's own; where it raises, drops or moves one, the instruction is in the neighbouring user
turn, marked <system-instruction>, exactly where the system message stood."""

from __future__ import annotations

import pytest

from api_like_oai import render_chat
from api_like_oai.errors import TemplateError
from api_like_oai.prompts import FormatterOptions, JinjaFormatter, normalise_messages
from api_like_oai.prompts.capabilities import probe
from api_like_oai.prompts.system_turns import place_system_turns
from api_like_oai.prompts.tools import NO_CAPABILITIES, short_id

from .test_shipped_templates import TOKENS

SYSTEM = {"role": "system", "content": "You are a terse assistant."}
LATE = {"role": "system", "content": "Answer in French from now on."}
QUESTION, ANSWER = {"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "4"}
FOLLOW_UP = {"role": "user", "content": "And 3 + 3?"}
# A system message after an answer, before the next question.
AFTER_ANSWER = [SYSTEM, QUESTION, ANSWER, LATE, FOLLOW_UP]
INSTRUCTION = "<system-instruction>\nAnswer in French from now on.\n</system-instruction>"

IN_PLACE_CHATML = (
    "<|im_start|>system\nYou are a terse assistant.<|im_end|>\n<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n"
    "<|im_start|>assistant\n4<|im_end|>\n<|im_start|>system\nAnswer in French from now on.<|im_end|>\n"
    "<|im_start|>user\nAnd 3 + 3?<|im_end|>\n<|im_start|>assistant\n"
)
IN_PLACE_HEADERS = (
    "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2 + 2?<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>"
    "<|start_header_id|>system<|end_header_id|>\n\nAnswer in French from now on.<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nAnd 3 + 3?<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n"
)

# name -> the prompt for AFTER_ANSWER, with the generation prompt.
EXPECTED = {
    # Templates that write a late system message where it stands: their own prompt, unchanged.
    "chatml": IN_PLACE_CHATML,
    "qwen2.5": IN_PLACE_CHATML,
    "llama-3": "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a terse assistant.<|eot_id|>"
    + IN_PLACE_HEADERS,
    "llama-3.1": "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
    "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
    "You are a terse assistant.<|eot_id|>" + IN_PLACE_HEADERS,
    "phi-3": "<|system|>\nYou are a terse assistant.<|end|>\n<|user|>\nWhat is 2 + 2?<|end|>\n<|assistant|>\n4<|end|>\n"
    "<|system|>\nAnswer in French from now on.<|end|>\n<|user|>\nAnd 3 + 3?<|end|>\n<|assistant|>\n",
    "zephyr": "<|system|>\nYou are a terse assistant.</s>\n<|user|>\nWhat is 2 + 2?</s>\n<|assistant|>\n4</s>\n"
    "<|system|>\nAnswer in French from now on.</s>\n<|user|>\nAnd 3 + 3?</s>\n<|assistant|>\n",
    # Llama 2 and Mistral raise (their alternation), Vicuna leaves it out, Alpaca and Inkbot write the
    # last system message first: the instruction opens the next user turn instead.
    "llama-2": "<s>[INST] <<SYS>>\nYou are a terse assistant.\n<</SYS>>\n\nWhat is 2 + 2? [/INST] 4 </s>"
    f"<s>[INST] {INSTRUCTION}\n\nAnd 3 + 3? [/INST]",
    "mistral": "<s> [INST] You are a terse assistant.\n\nWhat is 2 + 2? [/INST] 4</s>"
    f" [INST] {INSTRUCTION}\n\nAnd 3 + 3? [/INST]",
    # Mistral v3 raises on any system message but the first, which it writes in front of the last user message.
    "mistral-v3": f"<s>[INST] What is 2 + 2?[/INST] 4</s>[INST] You are a terse assistant.\n\n{INSTRUCTION}\n\nAnd 3 + 3?[/INST]",
    "vicuna": f"<s>You are a terse assistant. USER: What is 2 + 2? ASSISTANT: 4</s>USER: {INSTRUCTION}\n\nAnd 3 + 3? ASSISTANT:",
    "alpaca": "<s>You are a terse assistant.\n\n### Instruction:\nWhat is 2 + 2?\n\n### Response:\n4\n\n"
    f"### Instruction:\n{INSTRUCTION}\n\nAnd 3 + 3?\n\n### Response:\n",
    "inkbot": "<s><#meta#>\n- Date: \n- Task: \n<#system#>\nYou are a terse assistant.\n<#chat#>\n<#user#>\nWhat is 2 + 2?\n"
    f"<#bot#>\n4\n<#user#>\n{INSTRUCTION}\n\nAnd 3 + 3?\n<#bot#>\n",
    # Gemma has no system role at all: the first system message opens the first user turn the same way.
    "gemma": "<bos><start_of_turn>user\n<system-instruction>\nYou are a terse assistant.\n</system-instruction>\n\n"
    "What is 2 + 2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n"
    f"<start_of_turn>user\n{INSTRUCTION}\n\nAnd 3 + 3?<end_of_turn>\n<start_of_turn>model\n",
}


def render(name: str, messages: list[dict], **kwargs) -> str:
    bos, eos = TOKENS.get(name, ("", ""))
    return render_chat(messages, chat_prompt_model=name, bos_token=bos, eos_token=eos, **kwargs).text


def test_every_shipped_template_has_an_expectation():
    assert set(EXPECTED) == set(TOKENS)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_system_message_after_an_answer_keeps_its_place(name):
    assert render(name, AFTER_ANSWER) == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_developer_message_is_a_system_message_for_templates_without_that_role(name):
    late_developer = [SYSTEM, QUESTION, ANSWER, {**LATE, "role": "developer"}, FOLLOW_UP]
    assert render(name, late_developer) == EXPECTED[name]


# Claude Code's `messages.1.role: "system"`: a system message right after the task, the answer to come.
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("llama-2", f"<s>[INST] <<SYS>>\nYou are a terse assistant.\n<</SYS>>\n\nWhat is 2 + 2?\n\n{INSTRUCTION} [/INST]"),
        ("mistral-v3", f"<s>[INST] You are a terse assistant.\n\nWhat is 2 + 2?\n\n{INSTRUCTION}[/INST]"),
        ("vicuna", f"<s>You are a terse assistant. USER: What is 2 + 2?\n\n{INSTRUCTION} ASSISTANT:"),
        (
            "qwen2.5",
            "<|im_start|>system\nYou are a terse assistant.<|im_end|>\n<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n"
            "<|im_start|>system\nAnswer in French from now on.<|im_end|>\n<|im_start|>assistant\n",
        ),
    ],
)
def test_a_system_message_right_after_the_user_closes_that_user_turn(name, expected):
    assert render(name, [SYSTEM, QUESTION, LATE]) == expected


# --- templates as models ship them, which raise on a late system message -------------------------

# Qwen3.5's rule (and Qwen3-Coder's, MiniMax's): a system message anywhere but first raises. ChatML
# turns; tool calls in the assistant turn, results in a user turn, as Qwen's templates write them.
QWEN35_LIKE = """{%- for message in messages %}
    {%- if message.role == 'system' %}
        {%- if not loop.first %}{{- raise_exception('System message must be at the beginning.') }}{%- endif %}
        {{- '<|im_start|>system\\n' + message.content + '<|im_end|>\\n' }}
    {%- elif message.role == 'user' or (message.role == 'assistant' and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
    {%- elif message.role == 'assistant' %}
        {{- '<|im_start|>assistant' }}
        {%- for call in message.tool_calls %}
            {{- '\\n<tool_call>\\n{"name": "' + call.function.name + '", "arguments": ' }}
            {{- call.function.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
        {{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"""

# A Llama-style header template with the same rule, as some fine-tunes and GGUF conversions ship it.
LLAMA_LIKE = """{{- bos_token }}
{%- for message in messages %}
    {%- if message.role == 'system' and not loop.first %}
        {{- raise_exception('System message must be at the beginning') }}
    {%- endif %}
    {{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"""


def render_with(template: str, messages: list[dict], **kwargs) -> str:
    return render_chat(messages, chat_template=template, **kwargs).text


@pytest.mark.parametrize("template", [QWEN35_LIKE, LLAMA_LIKE], ids=["qwen3.5-like", "llama-like"])
def test_the_templates_themselves_refuse_a_late_system_message(template):
    with pytest.raises(TemplateError, match="System message must be at the beginning"):
        JinjaFormatter(template, FormatterOptions()).render(normalise_messages(AFTER_ANSWER))
    capabilities = probe(template)
    assert capabilities.supports_system_role and not capabilities.supports_late_system


def test_qwen35_like_gets_the_instruction_in_the_next_user_turn():
    assert render_with(QWEN35_LIKE, AFTER_ANSWER) == (
        "<|im_start|>system\nYou are a terse assistant.<|im_end|>\n<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n"
        f"<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\n{INSTRUCTION}\n\nAnd 3 + 3?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_llama_like_gets_the_instruction_in_the_next_user_turn():
    assert render_with(LLAMA_LIKE, AFTER_ANSWER, bos_token="<|begin_of_text|>") == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a terse assistant.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2 + 2?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>"
        f"<|start_header_id|>user<|end_header_id|>\n\n{INSTRUCTION}\n\nAnd 3 + 3?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_two_system_messages_before_the_first_turn_become_one():
    messages = [SYSTEM, {"role": "developer", "content": "Use metric units."}, QUESTION]
    assert render_with(QWEN35_LIKE, messages) == (
        "<|im_start|>system\nYou are a terse assistant.\n\nUse metric units.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n"
    )


CALL = {"id": "call_1", "type": "function", "function": {"name": "run", "arguments": '{"command": "ls"}'}}
TOOL_SESSION = [
    {"role": "system", "content": "You run commands."},
    {"role": "user", "content": "List the files."},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
    {"role": "system", "content": "The user is watching."},
]


def test_after_a_tool_result_the_instruction_joins_the_result_turn():
    """Agents add reminders after a tool's result: in the same user turn as the result, so a template
    that wants a model turn after the results still gets one."""
    assert render_with(QWEN35_LIKE, TOOL_SESSION) == (
        "<|im_start|>system\nYou run commands.<|im_end|>\n<|im_start|>user\nList the files.<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "run", "arguments": {"command": "ls"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\na.txt\n\n<system-instruction>\nThe user is watching.\n</system-instruction>"
        "\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


def test_mistral_v3_takes_an_instruction_after_a_tool_result():
    """Mistral v3 wants the model's turn after results (its alternation): the instruction rides with the result."""
    text = render("mistral-v3", TOOL_SESSION, tools=[{"type": "function", "function": {"name": "run"}}])
    assert text.endswith(
        '[TOOL_RESULTS] {"content": a.txt\n\n<system-instruction>\nThe user is watching.\n'
        '</system-instruction>, "call_id": "' + short_id("call_1") + '"}[/TOOL_RESULTS]'
    )
    assert "[INST] You run commands.\n\nList the files.[/INST]" in text


# --- the rule itself ---------------------------------------------------------------------------

LATE_ONLY = NO_CAPABILITIES.__class__(**{**NO_CAPABILITIES.__dict__, "supports_late_system": False})


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


def system(text: str) -> dict:
    return {"role": "system", "content": text}


def marked(text: str) -> str:
    return f"<system-instruction>\n{text}\n</system-instruction>"


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        # Between two answers (the model's own continuation): a user turn of its own, which keeps alternation.
        (
            [system("s"), user("u"), assistant("a"), system("x"), assistant("b")],
            [system("s"), user("u"), assistant("a"), user(marked("x")), assistant("b")],
        ),
        # After the last answer, the model to answer next: a user turn of its own.
        ([user("u"), assistant("a"), system("x")], [user("u"), assistant("a"), user(marked("x"))]),
        # Several in a row: one instruction, their texts joined; an empty one carries nothing.
        ([user("u"), system("x"), system(""), {"role": "developer", "content": "y"}], [user("u\n\n" + marked("x\n\ny"))]),
        # Between a call and its results: after the results, which stay with their call.
        (
            [
                user("u"),
                {"role": "assistant", "content": "", "tool_calls": [CALL]},
                system("x"),
                {"role": "tool", "tool_call_id": "call_1", "content": "r"},
                assistant("a"),
            ],
            [
                user("u"),
                {"role": "assistant", "content": "", "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_1", "content": "r\n\n" + marked("x")},
                assistant("a"),
            ],
        ),
    ],
)
def test_where_each_late_system_message_goes(messages, expected):
    assert place_system_turns(messages, LATE_ONLY) == expected


def test_templates_that_place_late_system_messages_get_the_messages_unchanged():
    assert place_system_turns(AFTER_ANSWER, NO_CAPABILITIES) is AFTER_ANSWER


def test_other_roles_before_the_first_turn_stay_where_they_were():
    """Inkbot's meta roles come before its system message; the system messages there are joined."""
    meta = {"role": "meta-task_name", "content": "general"}
    assert place_system_turns([system("a"), meta, system("b"), user("u")], LATE_ONLY) == [system("a\n\nb"), meta, user("u")]
