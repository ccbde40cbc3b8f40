"""FastChat templates by name, and the cases where FastChat would silently write a wrong prompt."""

from __future__ import annotations

import pytest

from api_like_oai import render_chat
from api_like_oai.errors import InvalidRequest
from api_like_oai.prompts import normalise_messages
from api_like_oai.prompts.fastchat import FastChatFormatter, load_conversation
from api_like_oai.prompts.resolve import UnknownTemplate


def test_vicuna_prompt_and_system_messages_joined():
    """The system messages before the first turn are one (joined by a blank line, as for every template
    that takes one system message); a later one stays where it was, in the user turn after it."""
    prompt = render_chat(
        [
            {"role": "system", "content": "Rule one."},
            {"role": "system", "content": "Rule two."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello"},
            {"role": "system", "content": "Rule three."},
            {"role": "user", "content": "Bye"},
        ],
        chat_prompt_model="vicuna_v1.1",
    )
    assert prompt.text == (
        "Rule one.\n\nRule two. USER: Hi ASSISTANT: Hello</s>"
        "USER: <system-instruction>\nRule three.\n</system-instruction>\n\nBye ASSISTANT:"
    )


def test_template_stop_str_is_returned():
    prompt = render_chat([{"role": "user", "content": "Hi"}], chat_prompt_model="zero_shot")
    assert prompt.stop == ("###",)


def test_the_registry_is_never_mutated():
    render_chat([{"role": "system", "content": "Changed"}, {"role": "user", "content": "Hi"}], chat_prompt_model="vicuna_v1.1")
    assert "Changed" not in load_conversation("vicuna_v1.1").system_message


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
        [{"role": "user", "content": "a"}, {"role": "assistant", "content": ""}, {"role": "user", "content": "b"}],
    ],
)
def test_prompts_fastchat_would_write_wrong_are_refused(messages):
    # FastChatFormatter directly: the shipped Jinja "mistral" would shadow FastChat's by name.
    with pytest.raises(InvalidRequest):
        FastChatFormatter("mistral").render(normalise_messages(messages))


@pytest.mark.parametrize("name", ["chatgpt", "bard", "gemini"])
def test_api_only_templates_are_refused_at_resolution(name):
    with pytest.raises(UnknownTemplate, match="no prompt form"):
        render_chat([{"role": "user", "content": "Hi"}], chat_prompt_model=name)


def test_list_content_is_joined():
    prompt = render_chat(
        [{"role": "user", "content": [{"type": "text", "text": "H"}, {"type": "text", "text": "i"}]}],
        chat_prompt_model="vicuna_v1.1",
    )
    assert "USER: Hi ASSISTANT:" in prompt.text
