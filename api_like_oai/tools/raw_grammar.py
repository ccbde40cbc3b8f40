"""A request's own GBNF grammar (`grammar`), checked before it is sent: llama.cpp parses it, but some
texts cost it too much or crash old builds, so their size, the nesting of their groups and the counts
of their repetitions are bounded here. Whether the text parses is llama.cpp's to say (a 400 from it).
The grammars the proxy writes itself are grammar.py's."""

from __future__ import annotations

import re

from .grammar import MAX_DEPTH, MAX_SCHEMA_BYTES, SchemaError

# A request's own GBNF text: as long as a schema may be; its groups nested no deeper than a schema
# (llama.cpp's parser recurses once per parenthesis, and old builds crash on deep nesting); its
# repetitions no larger than llama.cpp's own MAX_REPETITION_THRESHOLD (each count is a copy of the item).
MAX_GRAMMAR_BYTES = MAX_SCHEMA_BYTES
MAX_GRAMMAR_NESTING = MAX_DEPTH
MAX_GRAMMAR_REPEAT = 2000


def check_grammar(text: str) -> None:
    """SchemaError for a GBNF text past the bounds above: its size, the nesting of its groups, the
    counts of its `{m,n}` repetitions. Whether it parses is llama.cpp's to say (a 400 from it).

    The text is read as llama.cpp's parser reads it (llama-grammar.cpp), in one pass: a literal, a
    character class, a token (`<...>`) and a comment (to the end of the line: a CR or an LF) may hold
    any character and are skipped whole; the parser stops at a NUL, and at a literal, class or token
    that never ends (an error there), so this does too. Each construct is matched where it starts,
    with possessive patterns: no text makes this more than linear (a regular expression searched
    from every position, as before, took minutes of CPU on a 64 KiB unterminated class)."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_GRAMMAR_BYTES:
        raise SchemaError(f"the grammar is {size} bytes, more than {MAX_GRAMMAR_BYTES}")
    depth = position = 0
    while True:
        step = _GBNF_STEP.match(text, position)  # always matches: at worst the end, or a construct that never ends
        position = step.end()
        if step.lastgroup == "open":
            depth += 1
            if depth > MAX_GRAMMAR_NESTING:
                raise SchemaError(f"the grammar nests groups deeper than {MAX_GRAMMAR_NESTING} levels")
        elif step.lastgroup == "close":
            depth = max(depth - 1, 0)
        elif step.lastgroup == "brace":
            repeat = _GBNF_REPEAT.match(text, position - 1)
            if repeat is not None:
                _check_repeat(repeat)
                position = repeat.end()
        else:
            # The end; a NUL, where the parser stops reading; or a literal, class or token that never
            # ends, which llama.cpp refuses.
            return


def _check_repeat(repeat: re.Match) -> None:
    for count in filter(None, repeat.groups()):
        # A count of more digits than the bound has is past it (and int() refuses 4,300 digits).
        if len(count) > len(str(MAX_GRAMMAR_REPEAT)) or int(count) > MAX_GRAMMAR_REPEAT:
            raise SchemaError(
                f"the grammar repeats an item more than {MAX_GRAMMAR_REPEAT} times "
                f"({repeat.group()[:40]}): llama.cpp refuses that, or drops the bound"
            )


# What may hold any character, skipped whole (escapes as llama.cpp's parse_char reads them: a
# backslash and the next character): literals, character classes, tokens (`<...>`, `!<...>`) and
# comments, which end at a CR or an LF.
_GBNF_COMMENT = r"#[^\r\n\x00]*+"
_GBNF_SKIPPED = (r'"(?:[^"\\\x00]|\\[^\x00])*+"', r"\[(?:[^\]\\\x00]|\\[^\x00])*+\]", r"<[^>\x00]*+>", _GBNF_COMMENT)
# One step of check_grammar: whatever it need not look at, then what it must (possessive throughout,
# so a construct that never ends is read once, to the end, and the step stops before it).
_GBNF_STEP = re.compile(
    r"(?:[^()\{\"\[<#\x00]++|" + "|".join(_GBNF_SKIPPED) + r")*+"
    r"(?:(?P<open>\()|(?P<close>\))|(?P<brace>\{)|(?P<stop>[\"\[<\x00]|\Z))"
)
_GBNF_SPACE = rf"(?:[ \t\r\n]|{_GBNF_COMMENT})*+"  # llama.cpp's parse_space: blanks and comments
_GBNF_REPEAT = re.compile(rf"\{{{_GBNF_SPACE}([0-9]++){_GBNF_SPACE}(?:,{_GBNF_SPACE}([0-9]*+){_GBNF_SPACE})?\}}")
