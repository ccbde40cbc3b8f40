"""render_chat: format a conversation offline, without a server."""

from __future__ import annotations

import functools

from .base import ChatFormatter, ChatPrompt, FormatterOptions, normalise_messages
from .jinja import JinjaFormatter
from .media import has_placeholder, image_markup, markup_to_placeholders, with_image_parts
from .resolve import TemplateChoice, resolve_formatter
from .system_turns import place_system_turns
from .tools import NO_CAPABILITIES, formatter_capabilities, involves_tools, prepare


def render_chat(
    messages: list[dict],
    *,
    chat_template: str | None = None,
    chat_prompt_model: str | None = None,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
    continue_final_message: bool = False,
    tools: list | None = None,
) -> ChatPrompt:
    """The prompt for `messages` from a Jinja template text, a template name, or the legacy format.

    >>> render_chat([{"role": "user", "content": "Hi"}], chat_prompt_model="chatml").text
    '<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n'
    """
    choice = TemplateChoice(chat_template=chat_template, chat_prompt_model=chat_prompt_model)
    formatter = resolve_formatter(choice, FormatterOptions(bos_token=bos_token, eos_token=eos_token))
    return render_messages(
        formatter,
        normalise_messages(messages),
        tools,
        add_generation_prompt=add_generation_prompt,
        continue_final_message=continue_final_message,
    )


def render_messages(
    formatter: ChatFormatter,
    messages: list[dict],
    tools: list[dict] | None = None,
    *,
    add_generation_prompt: bool = True,
    continue_final_message: bool = False,
    template_variables: dict | None = None,
) -> ChatPrompt:
    """`formatter`'s prompt for `messages` (text content) and `tools`: tools, calls and results given
    natively where the formatter renders them and written into the messages where it does not
    (prompts/tools.py); `developer` messages as `system` for templates that know no developer role,
    and system messages where the template takes them (prompts/system_turns.py);
    `template_variables` (chat_template_kwargs, reasoning_effort) for Jinja templates."""
    capabilities = formatter_capabilities(formatter)
    if tools or any(involves_tools(message) for message in messages):
        messages, tools = prepare(messages, tools, capabilities)
    is_jinja = isinstance(formatter, JinjaFormatter)
    if not (is_jinja and formatter.knows_role("developer")):
        messages = [{**m, "role": "system"} if m.get("role") == "developer" else m for m in messages]
    messages = place_system_turns(messages, capabilities or NO_CAPABILITIES)
    options = {"template_variables": template_variables} if is_jinja and template_variables else {}
    options |= {"add_generation_prompt": add_generation_prompt, "continue_final_message": continue_final_message, "tools": tools}
    has_images = any(isinstance(m.get("content"), str) and has_placeholder(m["content"]) for m in messages)
    if is_jinja and has_images and not continue_final_message:
        return _render_with_images(formatter, messages, options)
    return formatter.render(messages, **options)


def _render_with_images(formatter: JinjaFormatter, messages: list[dict], options: dict) -> ChatPrompt:
    """The prompt of messages with image placeholders: through the template's own image parts where it
    renders them (prompts/media.py), else with the placeholders where the images were in the text."""
    markup = template_image_markup(formatter.template_source)
    if markup is not None:
        typed = with_image_parts(messages, markup)
        prompt = formatter.render(typed, **options)
        text = markup_to_placeholders(prompt.text, markup, typed)
        if text is not None:
            return ChatPrompt(text, prompt.stop)
    return formatter.render(messages, **options)


@functools.lru_cache(maxsize=64)
def template_image_markup(template_source: str) -> str | None:
    """What the template writes for one image part (None: it renders none), learnt once per template."""
    probe = JinjaFormatter(template_source, source="probe")
    return image_markup(lambda messages: probe.render(messages, add_generation_prompt=False).text)
