"""How much of a JSON text being written may be given out, and what closes it if the writing stops.

A tool call's arguments stream as the model writes them (where a grammar holds the call), and what
was streamed cannot be taken back. If the output ends inside the call (max_tokens, a stop string,
stop-generation), the client must still get arguments that `json.loads` reads: `JsonPrefix`
follows the text as it arrives and knows the longest prefix that is valid JSON so far and ends
where closing it adds no key and no value of its own (inside a string, a number or a literal, or
after a whole value); `closing()` is the text that completes that prefix.

    check = JsonPrefix()
    check.feed('{"city": "Pa')      check.safe_end == 12, check.closing() == '"}'
    check.feed('ris", "unit')       check.safe_end == 16, check.closing() == "}" (the member waits)
    check.feed('": "c"}')           check.safe_end == 30, check.complete
"""

from __future__ import annotations

import re

# Where the text is: what may come next.
VALUE = "value"  # a value (after ":" or "," in an array, or at the start)
ARRAY_START = "array_start"  # a value or "]"
OBJECT_START = "object_start"  # a key or "}"
KEY = "key"  # a key (after "," in an object)
IN_KEY, COLON = "in_key", "colon"
IN_STRING, IN_NUMBER, IN_LITERAL = "in_string", "in_number", "in_literal"
AFTER = "after"  # "," or the end of the container (or nothing, at the top)

_STRING_STATES = frozenset((IN_STRING, IN_KEY))
STRING_RUN = re.compile(r'[^"\\\x00-\x1f]+')  # inside a string: nothing to follow but its length
_SPACE = frozenset(" \t\r\n")
_LITERALS = {"t": "rue", "f": "alse", "n": "ull"}
_ESCAPES = frozenset('"\\/bfnrt')
_HEX = frozenset("0123456789abcdefABCDEF")

# A number's lexer: (state, character class) -> next state. Classes: "0", "d" (1-9), "-", "+", ".", "e".
_NUMBER = {
    ("start", "-"): "sign",
    ("start", "0"): "zero",
    ("start", "d"): "int",
    ("sign", "0"): "zero",
    ("sign", "d"): "int",
    ("zero", "."): "dot",
    ("zero", "e"): "exp",
    ("int", "0"): "int",
    ("int", "d"): "int",
    ("int", "."): "dot",
    ("int", "e"): "exp",
    ("dot", "0"): "frac",
    ("dot", "d"): "frac",
    ("frac", "0"): "frac",
    ("frac", "d"): "frac",
    ("frac", "e"): "exp",
    ("exp", "-"): "exp_sign",
    ("exp", "+"): "exp_sign",
    ("exp", "0"): "exp_digits",
    ("exp", "d"): "exp_digits",
    ("exp_sign", "0"): "exp_digits",
    ("exp_sign", "d"): "exp_digits",
    ("exp_digits", "0"): "exp_digits",
    ("exp_digits", "d"): "exp_digits",
}
_NUMBER_ENDS = frozenset(("zero", "int", "frac", "exp_digits"))  # a number may end in these states


def _number_class(char: str) -> str:
    if char == "0":
        return "0"
    if "1" <= char <= "9":
        return "d"
    return "e" if char in "eE" else char


class JsonPrefix:
    """One JSON value followed as its text arrives (see the module's docstring).

    `length`: characters fed; `safe_end`: the length of the prefix that may be given out;
    `broken`: the text cannot be the start of JSON any more (safe_end stays where it was);
    `complete`: the top-level value is whole."""

    def __init__(self):
        self.length = 0  # characters fed
        self.position = 0  # characters read (the same, until the text breaks)
        self.safe_end = 0
        self.broken = False
        self.complete = False
        self.state = VALUE
        self.stack: list[str] = []  # the open containers' closing brackets, innermost last
        self.escape = ""  # the escape being read in a string ("\\", "\\u", "\\u0", ...)
        self.number = ""  # the number lexer's state
        self.literal_rest = ""  # what is left of true / false / null
        self.safe_tail = ""  # what completes the value open at safe_end
        self.safe_depth = 0  # how many containers are open at safe_end

    def feed(self, text: str) -> None:
        if self.state == IN_STRING and not self.escape and not self.broken and STRING_RUN.fullmatch(text):
            self.string_run(len(text))  # the common token: more of a string value, safe all along
            return
        self.length += len(text)
        position = 0
        while position < len(text) and not self.broken:
            if self.state in _STRING_STATES and not self.escape:
                run = STRING_RUN.match(text, position)
                if run:
                    self.position += run.end() - position
                    position = run.end()
                    if self.state == IN_STRING:
                        self._safe('"')
                    continue
            self.position += 1
            self.broken = not getattr(self, "_" + self.state)(text[position])
            position += 1

    def string_run(self, count: int) -> None:
        """`count` more characters inside a string value (IN_STRING, no escape open), none of them a
        quote, a backslash or a control character (STRING_RUN): all of them may be given out."""
        self.length += count
        self.position += count
        self._safe('"')

    def closing(self) -> str:
        """The text that makes the first `safe_end` characters a whole JSON value ("" when nothing was safe)."""
        if self.safe_end == 0:
            return ""
        return self.safe_tail + "".join(reversed(self.stack[: self.safe_depth]))

    # --- one character at a time: each handler returns False if the character breaks the JSON --

    def _safe(self, tail: str = "") -> None:
        self.safe_end, self.safe_tail, self.safe_depth = self.position, tail, len(self.stack)

    def _value(self, char: str) -> bool:
        if char in _SPACE:
            return True
        if char == "{" or char == "[":
            self.stack.append("}" if char == "{" else "]")
            self.state = OBJECT_START if char == "{" else ARRAY_START
            self._safe()
            return True
        if char == '"':
            self.state = IN_STRING
            self._safe('"')
            return True
        if char in _LITERALS:
            self.state, self.literal_rest = IN_LITERAL, _LITERALS[char]
            self._safe(self.literal_rest)
            return True
        self.state, self.number = IN_NUMBER, "start"
        return self._in_number(char)

    def _array_start(self, char: str) -> bool:
        return self._container_start(char, self._value)

    def _object_start(self, char: str) -> bool:
        return self._container_start(char, self._key)

    def _container_start(self, char: str, first_member) -> bool:
        if char == self.stack[-1]:
            return self._close(char)
        if char in _SPACE:
            self._safe()
            return True
        return first_member(char)

    def _key(self, char: str) -> bool:
        if char == '"':
            self.state = IN_KEY
        return char == '"' or char in _SPACE

    def _in_key(self, char: str) -> bool:
        if self.escape or char == "\\":
            return self._escape_char(char)
        if char == '"':
            self.state = COLON
        return char >= " "

    def _colon(self, char: str) -> bool:
        if char == ":":
            self.state = VALUE
        return char == ":" or char in _SPACE

    def _in_string(self, char: str) -> bool:
        if self.escape or char == "\\":
            if not self._escape_char(char):
                return False
            if not self.escape:
                self._safe('"')  # an escape is given out whole, never cut
            return True
        if char == '"':
            self._value_done()
            return True
        return char >= " "  # control characters must be escaped in JSON

    def _escape_char(self, char: str) -> bool:
        escape = self.escape
        if not escape:
            self.escape = "\\"
            return True
        if escape == "\\":
            self.escape = "\\u" if char == "u" else ""
            return char in _ESCAPES or char == "u"
        self.escape = "" if len(escape) == 5 else escape + char
        return char in _HEX

    def _in_number(self, char: str) -> bool:
        following = _NUMBER.get((self.number, _number_class(char)))
        if following is None:
            if self.number not in _NUMBER_ENDS:
                return False
            # The number ended at the previous character (already safe): this one follows it.
            self.state, self.complete = AFTER, not self.stack
            return self._after(char)
        self.number = following
        self._safe("" if following in _NUMBER_ENDS else "0")
        return True

    def _in_literal(self, char: str) -> bool:
        if char != self.literal_rest[0]:
            return False
        self.literal_rest = self.literal_rest[1:]
        self._safe(self.literal_rest)
        if not self.literal_rest:
            self._value_done()
        return True

    def _after(self, char: str) -> bool:
        if char in _SPACE:
            self._safe()
            return True
        if char == "," and self.stack:
            self.state = KEY if self.stack[-1] == "}" else VALUE
            return True
        return self._close(char)

    def _close(self, char: str) -> bool:
        if not self.stack or self.stack[-1] != char:
            return False
        self.stack.pop()
        self._value_done()
        return True

    def _value_done(self) -> None:
        self.state = AFTER
        self.complete = not self.stack
        self._safe()
