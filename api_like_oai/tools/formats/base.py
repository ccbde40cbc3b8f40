"""What a tool-call format is: its markers around the JSON of each call, and the grammar they imply.

A format is data, not code: the parser (tools/parser.py) and the grammar below follow the same
description, so what the grammar lets the model write is exactly what the parser reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..scan import WS


@dataclass(frozen=True)
class ToolFormat:
    """One native way of writing tool calls.

    A model's output is content, then (from a trigger on) a section of one or more calls: each a
    JSON object {name_key: ..., arguments_key: {...}} with `opening` pieces before the first and
    `closing` pieces after each. Pieces are literal strings or WS (any whitespace).
    """

    name: str
    triggers: tuple[str, ...]  # text that opens tool calls anywhere in the output
    opening: tuple = (WS,)  # after the trigger, before the first call's JSON
    closing: tuple = ()  # after each call's JSON
    separator: tuple | None = None  # between calls of one section; None: each call has its own trigger
    section_end: tuple = ()  # after the last call of a section
    start_triggers: tuple[str, ...] = ()  # text that opens calls only at the start of the output,
    # and is the start of the JSON itself (llama3's bare "{")
    arguments_key: str = "arguments"  # the key the grammar writes; the parser reads any of ARGUMENT_KEYS
    preserved_tokens: tuple[str, ...] = ()  # special tokens among the markers: llama.cpp must send them as text
    description: str = ""

    def grammar_root(self, call_rule: str, parallel: bool) -> str:
        """The GBNF body of `root` for one call (or several when `parallel`), from the first trigger on."""
        trigger = self.triggers[0] if self.triggers else ""
        opened = (
            _sequence((trigger, *self.opening)) if not self.start_triggers else f"({_literal(trigger)})? ws" if trigger else "ws"
        )
        one_call = f"{call_rule} {_sequence(self.closing)}".strip()
        if not parallel:
            return f"{opened} {one_call} {_sequence(self.section_end)}".strip()
        if self.separator is not None:
            return f"{opened} {one_call} ({_sequence(self.separator)} {one_call})* {_sequence(self.section_end)}".strip()
        return f"{opened} {one_call} (ws {opened} {one_call})*"

    def lazy_triggers(self) -> list[dict]:
        """llama.cpp's grammar_triggers: each trigger as a word (type 1); start triggers as a
        pattern over the whole output so far (type 3), so they act only at its start."""
        triggers = [{"type": 1, "value": trigger} for trigger in self.triggers]
        triggers += [{"type": 3, "value": r"\s*(" + _regex_escape(trigger) + r")[\s\S]*"} for trigger in self.start_triggers]
        return triggers


ARGUMENT_KEYS = ("arguments", "parameters")


def _literal(text: str) -> str:
    from ..grammar import gbnf_literal  # late: grammar.py is only needed when a grammar is built

    return gbnf_literal(text)


def _sequence(pieces) -> str:
    return " ".join("ws" if piece is WS else _literal(piece) for piece in pieces if piece != "")


def _regex_escape(text: str) -> str:
    return "".join("\\" + char if char in r"\^$.|?*+()[]{}" else char for char in text)
