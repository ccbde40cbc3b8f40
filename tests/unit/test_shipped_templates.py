"""The chat templates shipped in conversation_templates/ write exactly the prompt each model was trained on.

The expected strings below are written out by hand from each model's own format (its Hugging Face
tokenizer_config.json chat_template, FastChat's conversation for Vicuna, the Alpaca and Inkbot model
cards and vLLM's example templates) and reviewed byte for byte. Never regenerate them from the
templates' output: a difference is a question about the model's format, not a test to update.
"""

from __future__ import annotations

import pytest
import yaml

from api_like_oai import render_chat
from api_like_oai.errors import TemplateError
from api_like_oai.prompts import FormatterOptions, JinjaFormatter, shipped
from api_like_oai.prompts.fastchat import FastChatFormatter, fastchat_names

SYSTEM = {"role": "system", "content": "You are a terse assistant."}
CHAT = [
    {"role": "user", "content": "What is 2 + 2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "And 3 + 3?"},
]
WITH_SYSTEM = [SYSTEM, *CHAT]

# The BOS and EOS tokens each model's tokenizer declares.
TOKENS = {
    "chatml": ("", "<|im_end|>"),
    "llama-2": ("<s>", "</s>"),
    "llama-3": ("<|begin_of_text|>", "<|eot_id|>"),
    "mistral": ("<s>", "</s>"),
    "gemma": ("<bos>", "<eos>"),
    "phi-3": ("<s>", "<|endoftext|>"),
    "zephyr": ("<s>", "</s>"),
    "vicuna": ("<s>", "</s>"),
    "alpaca": ("<s>", "</s>"),
    "inkbot": ("<s>", "</s>"),
    "qwen2.5": ("", "<|im_end|>"),
    "llama-3.1": ("<|begin_of_text|>", "<|eot_id|>"),
    "mistral-v3": ("<s>", "</s>"),
}

# Templates that refuse a system message, as the model's own template does.
NO_SYSTEM_ROLE = {"gemma"}

# name -> the prompt for the conversation (WITH_SYSTEM, or CHAT for NO_SYSTEM_ROLE), with the generation prompt.
EXPECTED = {
    "chatml": (
        "<|im_start|>system\nYou are a terse assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n"
        "<|im_start|>assistant\n4<|im_end|>\n"
        "<|im_start|>user\nAnd 3 + 3?<|im_end|>\n"
        "<|im_start|>assistant\n"
    ),
    # The system message sits in the first [INST] block; every user turn has its own <s>; answers are " {answer} </s>".
    "llama-2": (
        "<s>[INST] <<SYS>>\nYou are a terse assistant.\n<</SYS>>\n\nWhat is 2 + 2? [/INST] 4 </s><s>[INST] And 3 + 3? [/INST]"
    ),
    "llama-3": (
        "<|begin_of_text|>"
        "<|start_header_id|>system<|end_header_id|>\n\nYou are a terse assistant.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2 + 2?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nAnd 3 + 3?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    ),
    # Mistral's "v1" format: a space before each [INST], the system message and a blank line before the first user message.
    "mistral": ("<s> [INST] You are a terse assistant.\n\nWhat is 2 + 2? [/INST] 4</s> [INST] And 3 + 3? [/INST]"),
    "gemma": (
        "<bos>"
        "<start_of_turn>user\nWhat is 2 + 2?<end_of_turn>\n"
        "<start_of_turn>model\n4<end_of_turn>\n"
        "<start_of_turn>user\nAnd 3 + 3?<end_of_turn>\n"
        "<start_of_turn>model\n"
    ),
    # No BOS in the text: the Phi-3 tokenizer adds it.
    "phi-3": (
        "<|system|>\nYou are a terse assistant.<|end|>\n"
        "<|user|>\nWhat is 2 + 2?<|end|>\n"
        "<|assistant|>\n4<|end|>\n"
        "<|user|>\nAnd 3 + 3?<|end|>\n"
        "<|assistant|>\n"
    ),
    "zephyr": (
        "<|system|>\nYou are a terse assistant.</s>\n"
        "<|user|>\nWhat is 2 + 2?</s>\n"
        "<|assistant|>\n4</s>\n"
        "<|user|>\nAnd 3 + 3?</s>\n"
        "<|assistant|>\n"
    ),
    # FastChat's vicuna_v1.1: "{system} USER: {user} ASSISTANT: {answer}</s>", with the BOS the tokenizer adds.
    "vicuna": "<s>You are a terse assistant. USER: What is 2 + 2? ASSISTANT: 4</s>USER: And 3 + 3? ASSISTANT:",
    "alpaca": (
        "<s>You are a terse assistant.\n\n"
        "### Instruction:\nWhat is 2 + 2?\n\n"
        "### Response:\n4\n\n"
        "### Instruction:\nAnd 3 + 3?\n\n"
        "### Response:\n"
    ),
    "inkbot": (
        "<s><#meta#>\n- Date: \n- Task: \n"
        "<#system#>\nYou are a terse assistant.\n"
        "<#chat#>\n"
        "<#user#>\nWhat is 2 + 2?\n"
        "<#bot#>\n4\n"
        "<#user#>\nAnd 3 + 3?\n"
        "<#bot#>\n"
    ),
    # Without tools Qwen2.5 is ChatML (tool conversations: test_tool_templates.py).
    "qwen2.5": (
        "<|im_start|>system\nYou are a terse assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n"
        "<|im_start|>assistant\n4<|im_end|>\n"
        "<|im_start|>user\nAnd 3 + 3?<|im_end|>\n"
        "<|im_start|>assistant\n"
    ),
    # Llama 3.1 writes its knowledge cutoff and a fixed date (26 Jul 2024 unless date_string is given) before the system message.
    "llama-3.1": (
        "<|begin_of_text|>"
        "<|start_header_id|>system<|end_header_id|>\n\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
        "You are a terse assistant.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2 + 2?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nAnd 3 + 3?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    ),
    # Mistral v3: no space before [INST], answers " {answer}</s>", the system message in front of the last user message.
    "mistral-v3": "<s>[INST] What is 2 + 2?[/INST] 4</s>[INST] You are a terse assistant.\n\nAnd 3 + 3?[/INST]",
}

# The same conversations with add_generation_prompt=False.
WITHOUT_GENERATION_PROMPT = {
    "chatml": EXPECTED["chatml"].removesuffix("<|im_start|>assistant\n"),
    # Llama 2 and Mistral always end on the model's turn: nothing changes.
    "llama-2": EXPECTED["llama-2"],
    "mistral": EXPECTED["mistral"],
    "llama-3": EXPECTED["llama-3"].removesuffix("<|start_header_id|>assistant<|end_header_id|>\n\n"),
    "gemma": EXPECTED["gemma"].removesuffix("<start_of_turn>model\n"),
    # Phi-3 ends a conversation without a generation prompt with EOS.
    "phi-3": (
        "<|system|>\nYou are a terse assistant.<|end|>\n"
        "<|user|>\nWhat is 2 + 2?<|end|>\n"
        "<|assistant|>\n4<|end|>\n"
        "<|user|>\nAnd 3 + 3?<|end|>\n"
        "<|endoftext|>"
    ),
    "zephyr": (
        "<|system|>\nYou are a terse assistant.</s>\n"
        "<|user|>\nWhat is 2 + 2?</s>\n"
        "<|assistant|>\n4</s>\n"
        "<|user|>\nAnd 3 + 3?</s>\n"
    ),
    "vicuna": "<s>You are a terse assistant. USER: What is 2 + 2? ASSISTANT: 4</s>USER: And 3 + 3? ",
    "alpaca": (
        "<s>You are a terse assistant.\n\n### Instruction:\nWhat is 2 + 2?\n\n### Response:\n4\n\n### Instruction:\nAnd 3 + 3?"
    ),
    "inkbot": (
        "<s><#meta#>\n- Date: \n- Task: \n"
        "<#system#>\nYou are a terse assistant.\n"
        "<#chat#>\n"
        "<#user#>\nWhat is 2 + 2?\n"
        "<#bot#>\n4\n"
        "<#user#>\nAnd 3 + 3?"
    ),
    "qwen2.5": EXPECTED["qwen2.5"].removesuffix("<|im_start|>assistant\n"),
    "llama-3.1": EXPECTED["llama-3.1"].removesuffix("<|start_header_id|>assistant<|end_header_id|>\n\n"),
    "mistral-v3": EXPECTED["mistral-v3"],
}

HI = [{"role": "user", "content": "Hi"}]

# Other conversations that exercise a template's own rules: defaults, extra roles, no system message.
OTHER_CONVERSATIONS = [
    ("llama-2", HI, "<s>[INST] Hi [/INST]"),
    ("mistral", HI, "<s> [INST] Hi [/INST]"),
    (
        "llama-3",
        [{"role": "user", "content": "  Hi \n"}],
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    ),
    (
        "vicuna",
        HI,
        "<s>A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
        "detailed, and polite answers to the user's questions. USER: Hi ASSISTANT:",
    ),
    (
        "alpaca",
        [{"role": "user", "content": "Translate to French."}, {"role": "user_context", "content": "Good morning"}],
        "<s>Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n"
        "### Instruction:\nTranslate to French.\n\n### Input:\nGood morning\n\n### Response:\n",
    ),
    (
        "inkbot",
        [
            {"role": "meta-current_date", "content": "2023-07-20"},
            {"role": "meta-task_name", "content": "general"},
            {"role": "system", "content": "A helpful dialogue."},
            {"role": "user", "content": "When was it?"},
            {"role": "user_context", "content": "It was the day after new year's eve."},
        ],
        "<s><#meta#>\n- Date: 2023-07-20\n- Task: general\n<#system#>\nA helpful dialogue.\n<#chat#>\n"
        "<#user#>\nWhen was it?\n<#user_context#>\nIt was the day after new year's eve.\n<#bot#>\n",
    ),
]


def render(name: str, messages: list[dict], **kwargs) -> str:
    bos, eos = TOKENS[name]
    return render_chat(messages, chat_prompt_model=name, bos_token=bos, eos_token=eos, **kwargs).text


def conversation_for(name: str) -> list[dict]:
    return CHAT if name in NO_SYSTEM_ROLE else WITH_SYSTEM


def index() -> dict[str, dict]:
    text = shipped.folder().joinpath("index.yaml").read_text("utf-8")
    return yaml.safe_load(text)["templates"]


def test_every_shipped_template_has_reviewed_expectations():
    assert set(index()) == set(EXPECTED) == set(WITHOUT_GENERATION_PROMPT) == set(TOKENS)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_renders_the_conversation_exactly(name):
    assert render(name, conversation_for(name)) == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(WITHOUT_GENERATION_PROMPT))
def test_renders_the_conversation_exactly_without_generation_prompt(name):
    assert render(name, conversation_for(name), add_generation_prompt=False) == WITHOUT_GENERATION_PROMPT[name]


@pytest.mark.parametrize(("name", "messages", "expected"), OTHER_CONVERSATIONS, ids=[case[0] for case in OTHER_CONVERSATIONS])
def test_renders_other_conversations_exactly(name, messages, expected):
    assert render(name, messages) == expected


@pytest.mark.parametrize("name", sorted(NO_SYSTEM_ROLE))
def test_a_system_message_is_refused_where_the_model_has_no_system_role(name):
    bos, eos = TOKENS[name]
    template = JinjaFormatter(shipped.load(name), FormatterOptions(bos_token=bos, eos_token=eos))
    with pytest.raises(TemplateError, match="System role not supported"):
        template.render(WITH_SYSTEM)


def test_gemma_gets_the_system_message_as_a_marked_instruction_in_the_first_user_turn():
    """The template refuses it; the proxy keeps it (prompts/system_turns.py), where it stood."""
    assert render("gemma", WITH_SYSTEM) == EXPECTED["gemma"].replace(
        "user\nWhat is 2 + 2?", "user\n<system-instruction>\nYou are a terse assistant.\n</system-instruction>\n\nWhat is 2 + 2?"
    )


@pytest.mark.parametrize("name", ["llama-2", "mistral", "gemma"])
def test_roles_must_alternate_where_the_model_template_says_so(name):
    with pytest.raises(TemplateError, match="roles must alternate user/assistant/user/assistant"):
        render(name, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])


@pytest.mark.parametrize(("name", "fastchat_name"), [("vicuna", "vicuna_v1.1"), ("zephyr", "zephyr"), ("llama-2", "llama-2")])
def test_agrees_with_fastchat(name, fastchat_name):
    """FastChat leaves BOS to the tokenizer; otherwise the prompt is the same."""
    fastchat_text = FastChatFormatter(fastchat_name).render(WITH_SYSTEM).text
    bos = TOKENS[name][0] if name in ("vicuna", "llama-2") else ""
    assert render(name, WITH_SYSTEM) == bos + fastchat_text


@pytest.mark.parametrize("name", shipped.names())
def test_every_name_and_alias_resolves_to_a_file_that_compiles(name):
    canonical = shipped.canonical(name)
    assert canonical in index()
    source = shipped.load(name)
    assert source is not None and source == shipped.load(canonical)
    JinjaFormatter(source)  # compiles, or raises TemplateError
    assert render(canonical, conversation_for(canonical)) == EXPECTED[canonical]
    bos, eos = TOKENS[canonical]
    via_alias = render_chat(conversation_for(canonical), chat_prompt_model=name, bos_token=bos, eos_token=eos)
    assert via_alias.text == EXPECTED[canonical]


def test_names_are_lowercase_unique_and_leave_fastchat_names_alone():
    entries = index()
    all_names = [*entries, *(alias for entry in entries.values() for alias in entry.get("aliases", []))]
    assert all(name == name.lower() for name in all_names)
    assert len(all_names) == len(set(all_names)), "a name or alias is claimed twice"
    for entry in entries.values():
        assert shipped.folder().joinpath(entry["file"]).is_file()
    aliases = {alias for entry in entries.values() for alias in entry.get("aliases", [])}
    assert not aliases & {name.lower() for name in fastchat_names()}, "an alias hides a FastChat template"
    assert shipped.canonical("vicuna_v1.1") is None
