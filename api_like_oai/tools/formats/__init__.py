"""The tool-call formats by name, and which one a chat template's text implies.

Adding a format is one module with a `FORMAT = ToolFormat(...)` and a line in FORMATS.
"""

from __future__ import annotations

from . import generic, hermes, llama3, mistral
from .base import ARGUMENT_KEYS, ToolFormat

FORMATS: dict[str, ToolFormat] = {module.FORMAT.name: module.FORMAT for module in (hermes, llama3, mistral, generic)}


def detect(template_source: str | None) -> str | None:
    """The native format a template's text implies (as llama.cpp detects it), or None."""
    source = template_source or ""
    if "<tool_call>" in source:
        return "hermes"
    if "[TOOL_CALLS]" in source:
        return "mistral"
    if "<|python_tag|>" in source or ("ipython" in source and '"parameters"' in source):
        return "llama3"
    return None


__all__ = ["ARGUMENT_KEYS", "FORMATS", "ToolFormat", "detect"]
