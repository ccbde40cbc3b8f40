"""Hermes / Qwen2.5 style: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, once per call,
after any text. Hermes 2 Pro/3, Qwen2.5, Qwen3 and many fine-tunes write this."""

from ..scan import WS
from .base import ToolFormat

FORMAT = ToolFormat(
    name="hermes",
    triggers=("<tool_call>",),
    opening=(WS,),
    closing=(WS, "</tool_call>"),
    preserved_tokens=("<tool_call>", "</tool_call>"),
    description='<tool_call>{"name": ..., "arguments": {...}}</tool_call> per call (Hermes, Qwen2.5, Qwen3)',
)
