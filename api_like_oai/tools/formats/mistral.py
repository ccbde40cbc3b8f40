"""Mistral v3 (Mistral 7B v0.3, Nemo, Small): `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`."""

from ..scan import WS
from .base import ToolFormat

FORMAT = ToolFormat(
    name="mistral",
    triggers=("[TOOL_CALLS]",),
    opening=(WS, "[", WS),
    separator=(WS, ",", WS),
    section_end=(WS, "]"),
    preserved_tokens=("[TOOL_CALLS]",),
    description='[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] (Mistral 7B v0.3, Nemo, Small)',
)
