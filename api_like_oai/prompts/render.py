"""render_chat: format a conversation offline, without a server."""

from __future__ import annotations

from .base import ChatPrompt, FormatterOptions, normalise_messages
from .resolve import TemplateChoice, resolve_formatter
from .tools import render as render_with_tools


def render_chat(messages: list[dict], *, chat_template: str | None = None,
                chat_prompt_model: str | None = None, bos_token: str = "", eos_token: str = "",
                add_generation_prompt: bool = True, continue_final_message: bool = False,
                tools: list | None = None) -> ChatPrompt:
    """The prompt for `messages` from a Jinja template text, a template name, or the legacy format.

    >>> render_chat([{"role": "user", "content": "Hi"}], chat_prompt_model="chatml").text
    '<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n'
    """
    choice = TemplateChoice(chat_template=chat_template, chat_prompt_model=chat_prompt_model)
    formatter = resolve_formatter(choice, FormatterOptions(bos_token=bos_token, eos_token=eos_token))
    return render_with_tools(formatter, normalise_messages(messages), tools,
                             add_generation_prompt=add_generation_prompt,
                             continue_final_message=continue_final_message)
