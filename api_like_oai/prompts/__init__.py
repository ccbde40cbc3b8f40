"""The prompt layer: messages -> prompt text and stop strings. No Flask, no network."""

from .base import ChatFormatter, ChatPrompt, FormatterOptions, merge_stops, normalise_messages
from .jinja import JinjaFormatter
from .legacy import LegacyFormatter
from .resolve import TemplateChoice, UnknownTemplate, resolve_formatter

__all__ = [
    "ChatFormatter",
    "ChatPrompt",
    "FormatterOptions",
    "JinjaFormatter",
    "LegacyFormatter",
    "TemplateChoice",
    "UnknownTemplate",
    "merge_stops",
    "normalise_messages",
    "resolve_formatter",
]
