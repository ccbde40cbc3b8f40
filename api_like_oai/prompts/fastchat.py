"""FastChat conversation templates (the `fschat` registry), by name.

FastChat writes wrong prompts silently in a few cases; those are refused with a 400 here.
Its token ids are for the original HF tokenizer and are never sent to llama.cpp.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import InvalidRequest
from .base import ChatPrompt
from .capabilities import TemplateCapabilities
from .tools import NO_CAPABILITIES

# Styles whose prompt puts two consecutive user turns into one malformed [INST] block.
_STRICT_ALTERNATION_STYLES = {"LLAMA2", "MISTRAL", "LLAMA3", "GEMMA"}


def load_conversation(name: str):
    """A fresh copy of the registered template `name`; KeyError if FastChat has none."""
    from fastchat.conversation import conv_templates  # imported late: start-up stays fast

    if name not in conv_templates:
        raise KeyError(name)
    return conv_templates[name].copy()


def fastchat_names() -> list[str]:
    from fastchat.conversation import conv_templates

    return sorted(conv_templates)


def check_renderable(name: str) -> None:
    """ValueError if the template has no prompt form (API-only styles such as chatgpt)."""
    conversation = load_conversation(name)
    conversation.append_message(conversation.roles[0], "hi")
    conversation.append_message(conversation.roles[1], None)
    conversation.get_prompt()


@dataclass(frozen=True)
class FastChatFormatter:
    template_name: str

    def describe(self) -> dict:
        return {"source": "chat_prompt_model", "name": f"fastchat:{self.template_name}"}

    def tool_capabilities(self) -> TemplateCapabilities:
        """No tools; one system message, which FastChat writes first: later ones would move there."""
        return replace(NO_CAPABILITIES, supports_late_system=False)

    def render(self, messages, *, add_generation_prompt=True, continue_final_message=False, tools=None) -> ChatPrompt:
        conversation = load_conversation(self.template_name)
        user_role, assistant_role = conversation.roles[0], conversation.roles[1]
        system_texts = [m["content"] for m in messages if m["role"] == "system"]
        if system_texts:
            conversation.set_system_message("\n".join(system_texts))
        turns = [m for m in messages if m["role"] != "system"]
        self._check_turns(turns, conversation.sep_style.name, continue_final_message)
        for message in turns:
            role = user_role if message["role"] == "user" else assistant_role
            conversation.append_message(role, message["content"])
        if add_generation_prompt and not continue_final_message:
            conversation.append_message(assistant_role, None)
        return ChatPrompt(conversation.get_prompt(), _stop_strings(conversation.stop_str))

    @staticmethod
    def _check_turns(turns: list[dict], style: str, continue_final_message: bool) -> None:
        for n, message in enumerate(turns):
            if message["role"] not in ("user", "assistant"):
                raise InvalidRequest(
                    f"role {message['role']!r} has no place in this FastChat template (system, user, assistant only)",
                    param="messages",
                )
            is_last = n == len(turns) - 1
            if message["role"] == "assistant" and not message["content"] and not (is_last and continue_final_message):
                # FastChat treats empty content as "the turn to generate" and writes it open.
                raise InvalidRequest(
                    f"assistant message {n} is empty; this template cannot write an empty assistant turn", param="messages"
                )
            if style in _STRICT_ALTERNATION_STYLES and n and turns[n - 1]["role"] == message["role"]:
                raise InvalidRequest(
                    "this template needs user and assistant turns to alternate; "
                    f"two {message['role']} messages follow each other",
                    param="messages",
                )


def _stop_strings(stop_str) -> tuple[str, ...]:
    if not stop_str:
        return ()
    return (stop_str,) if isinstance(stop_str, str) else tuple(stop_str)
