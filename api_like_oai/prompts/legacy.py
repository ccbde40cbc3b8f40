"""The original api_like_OAI.py prompt format, driven by --chat-prompt, --user-name, ..."""

from __future__ import annotations

from dataclasses import dataclass

from .base import ChatPrompt

DEFAULT_CHAT_PROMPT = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant follows the given rules no matter what."
)


@dataclass(frozen=True)
class LegacyFormatter:
    """`chat_prompt`, then each message behind its name; assistant turns end with `stop`."""

    chat_prompt: str = DEFAULT_CHAT_PROMPT
    user_name: str = "USER: "
    ai_name: str = "ASSISTANT: "
    system_name: str = "ASSISTANT's RULE: "
    stop: str = "</s>"

    def describe(self) -> dict:
        return {"source": "legacy", "name": "legacy flags"}

    def render(self, messages, *, add_generation_prompt=True, continue_final_message=False, tools=None) -> ChatPrompt:
        prefixes = {"system": self.system_name, "user": self.user_name, "assistant": self.ai_name}
        parts = [self.chat_prompt]
        for n, message in enumerate(messages):
            role, content = message["role"], message["content"]
            if role not in prefixes:
                continue  # the original script skipped roles it did not know
            last_open = continue_final_message and n == len(messages) - 1
            ending = self.stop if role == "assistant" and not last_open else ""
            parts.append(f"{prefixes[role]}{content}{ending}")
        if add_generation_prompt:
            parts.append(self.ai_name.rstrip())
        return ChatPrompt("".join(parts), (self.stop,) if self.stop else ())
