"""A user's own chat formatter, defined outside the package, as the plug-in interface documents."""

from __future__ import annotations

from api_like_oai.prompts import ChatPrompt, FormatterOptions


class ShoutingFormatter:
    """Writes every message upper-cased behind its role; stops at '###'."""

    def __init__(self, options: FormatterOptions):
        self.options = options

    def describe(self) -> dict:
        return {"source": "plugin", "name": "shouting"}

    def render(self, messages, *, add_generation_prompt=True, continue_final_message=False, tools=None):
        lines = [f"{m['role']}: {m['content'].upper()}" for m in messages]
        if add_generation_prompt:
            lines.append(f"{self.options.response_role}:")
        return ChatPrompt("\n".join(lines), ("###",))
