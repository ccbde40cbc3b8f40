"""Llama 3.1 / 3.2 JSON tool calling: the answer is a bare `{"name": ..., "parameters": {...}}`
(several separated by `;`), or follows the special token `<|python_tag|>`."""

from ..scan import WS
from .base import ToolFormat

FORMAT = ToolFormat(
    name="llama3",
    triggers=("<|python_tag|>",),
    opening=(WS,),
    separator=(WS, ";", WS),
    start_triggers=("{",),
    arguments_key="parameters",
    preserved_tokens=("<|python_tag|>",),
    description='a bare {"name": ..., "parameters": {...}} at the start, or after <|python_tag|> (Llama 3.1, 3.2, 3.3)',
)
