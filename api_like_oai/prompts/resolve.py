"""Which chat formatter serves a model: the first configured source wins.

1. a formatter plug-in (`--chat-formatter module:Class` or an `api_like_oai.formatters` entry point)
2. `--chat-template` (file, URL or inline text; loaded into text before it reaches this module)
3. `--chat-prompt-model NAME`: a shipped template of that name, else FastChat's registry
4. legacy flags given explicitly on the command line
5. the model's own template, from llama.cpp's /props
6. the legacy flags' defaults, exactly as the original script
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass, field
from importlib import metadata

from . import fastchat as fastchat_templates
from . import shipped
from .base import ChatFormatter, FormatterOptions
from .jinja import JinjaFormatter
from .legacy import LegacyFormatter

FORMATTER_ENTRY_POINTS = "api_like_oai.formatters"


class UnknownTemplate(ValueError):
    """A named template or formatter that does not exist; the message lists close matches."""


@dataclass(frozen=True)
class TemplateChoice:
    """The template settings of one model, as the user gave them."""

    chat_formatter: str | None = None
    chat_template: str | None = None  # the template's text
    chat_template_name: str = "inline"  # where that text came from (path, URL, "inline")
    chat_prompt_model: str | None = None
    legacy: LegacyFormatter = field(default_factory=LegacyFormatter)
    legacy_explicit: bool = False
    response_role: str = "assistant"

    def uses_model_template(self) -> bool:
        """True when the choice falls through to the model's own template (needs /props)."""
        return not (self.chat_formatter or self.chat_template or self.chat_prompt_model or self.legacy_explicit)


def resolve_formatter(choice: TemplateChoice, options: FormatterOptions, model_template: str | None = None) -> ChatFormatter:
    """The formatter for `choice`; `model_template` is the upstream's own Jinja template, if any."""
    if choice.chat_formatter:
        return load_plugin(choice.chat_formatter)(options)
    if choice.chat_template:
        return JinjaFormatter(choice.chat_template, options, "chat_template", choice.chat_template_name)
    if choice.chat_prompt_model:
        return named_formatter(choice.chat_prompt_model, options)
    if model_template and not choice.legacy_explicit:
        return JinjaFormatter(model_template, options, "model", "the model's own template")
    return choice.legacy


def named_formatter(name: str, options: FormatterOptions) -> ChatFormatter:
    """A shipped Jinja template by name or alias, else a FastChat template; UnknownTemplate if neither."""
    shipped_source = shipped.load(name)
    if shipped_source is not None:
        return JinjaFormatter(shipped_source, options, "chat_prompt_model", shipped.canonical(name))
    try:
        fastchat_templates.check_renderable(name)
    except KeyError:
        known = shipped.names() + fastchat_templates.fastchat_names()
        close = difflib.get_close_matches(name, known, n=5, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UnknownTemplate(f"unknown chat template {name!r}{hint}") from None
    except ValueError as exc:
        raise UnknownTemplate(
            f"FastChat template {name!r} has no prompt form ({exc}); it describes a hosted API, not a local model"
        ) from None
    return fastchat_templates.FastChatFormatter(name)


def load_plugin(spec: str):
    """The formatter class named by `module:Class`, or by an entry point of that name."""
    if ":" in spec:
        module_name, _, class_name = spec.partition(":")
        try:
            return getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError) as exc:
            raise UnknownTemplate(f"cannot load chat formatter {spec!r}: {exc}") from None
    entry_points = {ep.name: ep for ep in metadata.entry_points(group=FORMATTER_ENTRY_POINTS)}
    if spec not in entry_points:
        raise UnknownTemplate(
            f"no chat formatter {spec!r} in entry-point group "
            f"{FORMATTER_ENTRY_POINTS} (installed: {sorted(entry_points) or 'none'})"
        )
    return entry_points[spec].load()
