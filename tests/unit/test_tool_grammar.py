"""JSON Schema -> GBNF: exact grammars for small schemas, and which strings the grammars accept.

`Gbnf` below is a small backtracking recogniser of the GBNF the module writes (literals, character
classes, names, groups, `|`, `*`, `+`, `?`, `{m,n}`), so that tests can say "this JSON is accepted,
that one is not" without llama-server; tests/e2e/test_tool_grammar_llama.py checks the same
grammars against the real one.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api_like_oai.tools.grammar import (
    MAX_DEPTH,
    MAX_REPEAT,
    MAX_SCHEMA_BYTES,
    MAX_STEPS,
    PRIMITIVES,
    WS,
    GrammarBuilder,
    SchemaError,
    check_size,
    gbnf_literal,
    json_literal,
)

# -- a GBNF recogniser for the tests --

_TOKEN = re.compile(
    r'\s*(?:(?P<lit>"(?:\\.|[^"\\])*")|(?P<cls>\[(?:\\.|[^\]\\])*\])|(?P<name>[a-zA-Z0-9-]+)'
    r"|(?P<rep>\{\d+(?:,\d*)?\}|[*+?])|(?P<op>[()|]))"
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "[": "[", "]": "]"}


def _unescape(text: str) -> list[str]:
    """The characters of a literal's or class's inside, GBNF escapes decoded."""
    chars, index = [], 0
    while index < len(text):
        if text[index] != "\\":
            chars.append(text[index])
            index += 1
        elif text[index + 1] in "xuU":
            digits = {"x": 2, "u": 4, "U": 8}[text[index + 1]]
            chars.append(chr(int(text[index + 2 : index + 2 + digits], 16)))
            index += 2 + digits
        else:
            chars.append(_ESCAPES[text[index + 1]])
            index += 2
    return chars


class Gbnf:
    """Parses a grammar's rules (one per line) and tells whether a text matches `root` entirely."""

    def __init__(self, grammar: str):
        self.rules = {}
        for line in grammar.splitlines():
            name, body = line.split(" ::= ", 1)
            tokens = [(match.lastgroup, match.group(match.lastgroup)) for match in _TOKEN.finditer(body)]
            assert "".join(value for _, value in tokens).replace(" ", "") == body.replace(" ", ""), body
            self.rules[name], rest = self._alternatives(tokens)
            assert not rest, f"unparsed {rest} in {name}"

    def _alternatives(self, tokens):
        sequences, tokens = self._sequence(tokens)
        sequences = [sequences]
        while tokens and tokens[0] == ("op", "|"):
            sequence, tokens = self._sequence(tokens[1:])
            sequences.append(sequence)
        return ("alt", sequences), tokens

    def _sequence(self, tokens):
        items = []
        while tokens and tokens[0] not in (("op", "|"), ("op", ")")):
            kind, value = tokens[0]
            tokens = tokens[1:]
            if (kind, value) == ("op", "("):
                item, tokens = self._alternatives(tokens)
                assert tokens[0] == ("op", ")")
                tokens = tokens[1:]
            elif kind == "lit":
                item = ("lit", "".join(_unescape(value[1:-1])))
            elif kind == "cls":
                item = ("cls", value.startswith("[^"), _ranges(_unescape(value[2 if value.startswith("[^") else 1 : -1])))
            else:
                assert kind == "name", value
                item = ("ref", value)
            while tokens and tokens[0][0] == "rep":
                item, tokens = ("rep", item, *_counts(tokens[0][1])), tokens[1:]
            items.append(item)
        return ("seq", items), tokens

    def accepts(self, text: str) -> bool:
        return any(end == len(text) for end in self._match(("ref", "root"), text, 0))

    def _match(self, node, text, pos):
        kind = node[0]
        if kind == "lit":
            if text.startswith(node[1], pos):
                yield pos + len(node[1])
        elif kind == "cls":
            if pos < len(text) and any(low <= text[pos] <= high for low, high in node[2]) != node[1]:
                yield pos + 1
        elif kind == "ref":
            yield from self._match(self.rules[node[1]], text, pos)
        elif kind == "alt":
            for sequence in node[1]:
                yield from self._match(sequence, text, pos)
        elif kind == "seq":
            yield from self._sequence_ends(node[1], text, pos)
        else:
            yield from self._repeat_ends(node[1], node[2], node[3], text, pos, 0)

    def _sequence_ends(self, items, text, pos):
        if not items:
            yield pos
            return
        for end in self._match(items[0], text, pos):
            yield from self._sequence_ends(items[1:], text, end)

    def _repeat_ends(self, item, low, high, text, pos, count):
        if count >= low:
            yield pos
        if high is None or count < high:
            for end in self._match(item, text, pos):
                if end > pos or count < low:
                    yield from self._repeat_ends(item, low, high, text, end, count + 1)


def _ranges(chars: list[str]) -> list[tuple[str, str]]:
    ranges, index = [], 0
    while index < len(chars):
        if index + 2 < len(chars) and chars[index + 1] == "-":
            ranges.append((chars[index], chars[index + 2]))
            index += 3
        else:
            ranges.append((chars[index], chars[index]))
            index += 1
    return ranges


def _counts(operator: str) -> tuple[int, int | None]:
    if operator in "*+?":
        return {"*": (0, None), "+": (1, None), "?": (0, 1)}[operator]
    low, _, high = operator[1:-1].partition(",")
    return int(low), (int(low) if "," not in operator else int(high) if high else None)


def grammar_for(schema, hint="args") -> str:
    builder = GrammarBuilder()
    return builder.render(builder.schema(schema, hint))


def accepts(schema, text: str) -> bool:
    return Gbnf(grammar_for(schema)).accepts(text)


# -- literals --


@pytest.mark.parametrize(
    ("text", "literal"),
    [
        ("Paris", '"Paris"'),
        ('say "hi"', r'"say \"hi\""'),
        ("back\\slash", r'"back\\slash"'),
        ("two\nlines\r\tend", r'"two\nlines\r\tend"'),
        ("é ✓ 🐱 你好", '"é ✓ 🐱 你好"'),
        ("bell\x07 nul\x00 del\x7f", r'"bell\x07 nul\x00 del\x7F"'),
        ("[brackets] {braces} | # ::=", '"[brackets] {braces} | # ::="'),
        ("", '""'),
    ],
)
def test_gbnf_literal_escapes_what_gbnf_needs(text, literal):
    assert gbnf_literal(text) == literal
    assert Gbnf(f"root ::= {literal}").accepts(text)


@pytest.mark.parametrize(
    ("value", "literal"),
    [
        ("get_weather", r'"\"get_weather\""'),
        ("Zürich", r'"\"Zürich\""'),
        ('a "quoted" \\ word', r'"\"a \\\"quoted\\\" \\\\ word\""'),
        ({"unit": ["c", None, 1.5, True]}, r'"{\"unit\": [\"c\", null, 1.5, true]}"'),
    ],
)
def test_json_literal_is_the_json_text_as_a_literal(value, literal):
    assert json_literal(value) == literal
    assert Gbnf(f"root ::= {literal}").accepts(json.dumps(value, ensure_ascii=False))


# -- exact grammars --

_PRIMITIVE_LINES = {name: f"{name} ::= {body}" for name, body in PRIMITIVES.items()}
WEATHER = {
    "type": "object",
    "description": "Get the weather",
    "properties": {"city": {"type": "string", "description": "City name"}, "unit": {"type": "string", "enum": ["c", "f"]}},
    "required": ["city"],
}


@pytest.mark.parametrize(
    ("schema", "rules", "primitives"),
    [
        (
            WEATHER,
            [
                'args-unit ::= "\\"c\\"" | "\\"f\\""',
                'args ::= "{" ws "\\"city\\"" ws ":" ws string ws ( "," ws "\\"unit\\"" ws ":" ws args-unit ws )? "}"',
            ],
            ["ws", "string", "char"],
        ),
        ({"type": "object", "properties": {}}, ['args ::= "{" ws "}"'], ["ws"]),
        (
            {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}}},
            [
                'args ::= "{" ws ( "\\"a\\"" ws ":" ws integer ws ( "," ws "\\"b\\"" ws ":" ws boolean ws )? '
                '| "\\"b\\"" ws ":" ws boolean ws )? "}"'
            ],
            ["ws", "integer", "boolean"],
        ),
        (
            {"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 3},
            ['args ::= "[" ws number ws ( "," ws number ws ){0,2} "]"'],
            ["ws", "number", "integer"],
        ),
        ({"type": "string", "minLength": 2, "maxLength": 5}, ['args ::= "\\"" char{2,5} "\\""'], ["char"]),
        ({"type": ["string", "null"]}, ["args ::= string | null"], ["string", "char", "null"]),
        (
            {"$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}}, "$ref": "#/$defs/Node"},
            ['args-Node ::= "{" ws ( "\\"next\\"" ws ":" ws args-Node ws )? "}"'],
            ["ws"],
        ),
    ],
)
def test_exact_grammar(schema, rules, primitives):
    builder = GrammarBuilder()
    name = builder.schema(schema, "args")
    assert builder.render(name) == "\n".join([f"root ::= {name}", *rules, *_primitive_lines(primitives)]) + "\n"


def _primitive_lines(names):
    return [line for name, line in _PRIMITIVE_LINES.items() if name in names]


@pytest.mark.parametrize(
    ("schema", "name"),
    [
        ({}, "value"),
        (True, "value"),
        ({"type": "string"}, "string"),
        ({"type": "integer"}, "integer"),
        ({"type": "number"}, "number"),
        ({"type": "boolean"}, "boolean"),
        ({"type": "null"}, "null"),
        ({"type": "object"}, "object"),
        ({"type": "object", "additionalProperties": True}, "object"),
        ({"description": "anything", "title": "X"}, "value"),
        ({"type": ["string"]}, "string"),
    ],
)
def test_plain_schemas_are_the_shared_primitives(schema, name):
    assert GrammarBuilder().schema(schema, "args") == name


def test_rules_compose_with_the_callers_wrapper():
    builder = GrammarBuilder()
    arguments = builder.schema(WEATHER, "get-weather-args")
    call = builder.rule(
        "call",
        f'"{{" {WS} "\\"name\\"" ws ":" ws {json_literal("get_weather")} ws "," ws '
        f'"\\"arguments\\"" ws ":" ws {arguments} ws "}}"',
    )
    grammar = builder.render(f'"<tool_call>" {WS} {call} {WS} "</tool_call>"')
    assert grammar.startswith('root ::= "<tool_call>" ws call ws "</tool_call>"\n')
    assert Gbnf(grammar).accepts('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')
    assert not Gbnf(grammar).accepts('<tool_call>{"name": "get_time", "arguments": {"city": "Paris"}}</tool_call>')


def test_rule_names_are_unique_sanitized_and_shared_by_equal_bodies():
    builder = GrammarBuilder()
    assert builder.rule("get_weather.args", '"a"') == "get-weather-args"
    assert builder.rule("get_weather.args", '"b"') == "get-weather-args-2"
    assert builder.rule("other", '"a"') == "get-weather-args"
    assert [builder.rule(hint, '"c"' + hint) for hint in ("value", "root", "ws", "?")] == ["value-2", "root-2", "ws-2", "rule"]


def test_a_failed_schema_leaves_the_builder_as_it_was():
    builder = GrammarBuilder()
    weather = builder.schema(WEATHER, "weather")
    before = builder.render(weather)
    with pytest.raises(SchemaError):
        builder.schema({"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "file"}}}}})
    assert builder.render(weather) == before


# -- what the grammars accept --

ACCEPTED_AND_REJECTED = [
    (
        WEATHER,
        ['{"city": "Paris", "unit": "c"}', '{"city":"Paris"}', '{\n  "city": "Zürich \\"Z\\" \\u00e9\\n"\n}'],
        [
            '{"unit": "c"}',
            '{"city": 3}',
            '{"city": "Paris", "unit": "k"}',
            '{"city": "Paris",}',
            '{"city": "Paris", "extra": 1}',
            '{"unit": "c", "city": "Paris"}',
            '{"city": "a\nb"}',
            "{" + " " * 30 + '"city": "Paris"}',
            '{"city": "Paris"}\n',
            ' {"city": "Paris"}',
        ],
    ),
    (
        {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}}},
        ["{}", '{"a": 1}', '{"b": 2}', '{"c": 3}', '{"a": 1, "c": 3}', '{"b": 2, "c": 3}', '{"a": 1, "b": 2, "c": 3}'],
        ['{"a": 1,}', '{, "b": 2}', '{"a": 1 "b": 2}', '{"b": 2, "a": 1}', '{"a": 1.5}', '{"a": 1, "a": 1}'],
    ),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "null"}, "b": {"type": "null"}, "c": {"type": "null"}, "d": {"type": "null"}},
            "required": ["c"],
        },
        ['{"c": null}', '{"a": null, "c": null}', '{"b": null, "c": null, "d": null}', '{"a":null,"b":null,"c":null,"d":null}'],
        ["{}", '{"a": null, "b": null}', '{"d": null, "c": null}'],
    ),
    # Extra keys are any string, the declared ones included (the module docstring says so).
    (
        {"type": "object", "properties": {key: {"const": key} for key in "abcde"}, "required": ["b", "d"]},
        [
            '{"b": "b", "d": "d"}',
            '{"a": "a", "b": "b", "d": "d"}',
            '{"b": "b", "c": "c", "d": "d", "e": "e"}',
            '{"a": "a", "b": "b", "c": "c", "d": "d", "e": "e"}',
        ],
        ['{"b": "b"}', '{"a": "a", "d": "d"}', '{"b": "b", "d": "d",}', '{"b": "b",, "d": "d"}', '{"d": "d", "b": "b"}'],
    ),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "required": ["a"],
            "additionalProperties": {"type": "string"},
        },
        ['{"a": 1}', '{"a": 1, "x": "y", "z": ""}'],
        ['{"x": "y"}', '{"a": 1, "x": 2}', '{"x": "y", "a": 1}'],
    ),
    (
        {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": True},
        ["{}", '{"a": "x", "z": [1, {"k": null}]}', '{"z": false}'],
        ['{"a": "x" "z": 1}', '{"a": "x",}'],
    ),
    (
        {"type": "object", "additionalProperties": {"type": "number"}},
        ["{}", '{"x": 1.5e3, "y": -0}'],
        ['{"x": "1"}', '{"x": 01}'],
    ),
    ({"type": "object"}, ["{}", '{"any": {"thing": [true, null, "x", -1.5E-3]}}'], ["[]", '{"a"}']),
    ({"type": "object", "required": ["q"]}, ['{"q": 1}', '{"q": 1, "r": 2}'], ["{}", '{"r": 2}']),
    (
        {"type": "array", "items": {"type": "string", "enum": ["x", "y"]}, "minItems": 1, "maxItems": 2},
        ['["x"]', '[ "x", "y" ]'],
        ["[]", '["x", "y", "x"]', '["z"]', '["x",]'],
    ),
    (
        {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False},
        ["[]", "[1]", '[1, "a"]'],
        ['["a"]', '[1, "a", 2]'],
    ),
    (
        {"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "boolean"}, "minItems": 2},
        ["[1, true]", "[1, true, false]"],
        ["[1]", "[true, true]"],
    ),
    ({"type": "array", "items": [{"type": "integer"}], "additionalItems": False}, ["[]", "[7]"], ["[7, 8]"]),
    ({"type": "array", "maxItems": 0}, ["[]"], ["[1]"]),
    ({"type": "string", "minLength": 1, "maxLength": 3}, ['"a"', '"abc"', '"\\n\\u0041"'], ['""', '"abcd"']),
    ({"type": "integer"}, ["0", "-7", "1234567890123456"], ["1.0", "1e3", "01", "12345678901234567", "+1"]),
    ({"type": "number"}, ["0", "-0.5", "3.25e+2", "1E-7"], [".5", "1.", "NaN", "1e"]),
    ({"type": "boolean"}, ["true", "false"], ["True", "1"]),
    ({"type": "null"}, ["null"], ["None", '"null"']),
    ({"type": ["integer", "string"]}, ["1", '"1"'], ["true"]),
    ({"enum": ["a", 1, None, {"k": [True]}]}, ['"a"', "1", "null", '{"k": [true]}'], ['"b"', "2", '{"k":[true]}']),
    ({"const": "fixed"}, ['"fixed"'], ['"other"']),
    ({"type": "string", "nullable": True}, ['"x"', "null"], ["1"]),
    ({"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Q"}, ['"x"', "null"], ["1"]),
    (
        {
            "oneOf": [
                {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"type": "array", "items": {"type": "integer"}},
            ]
        },
        ['{"a": 1}', "[1, 2]"],
        ["{}", '["a"]'],
    ),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "anyOf": [{"required": ["a"]}, {"required": ["b"]}],
        },
        ['{"a": 1}', '{"b": 2}', '{"a": 1, "b": 2}'],
        ["{}"],
    ),
    (
        {
            "allOf": [
                {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                {"properties": {"b": {"type": "integer"}, "a": {"maxLength": 2}}},
            ]
        },
        ['{"a": "xy"}', '{"a": "", "b": 1}'],
        ["{}", '{"a": "xyz"}', '{"b": 1}'],
    ),
    ({"allOf": [{"type": ["string", "integer"]}, {"type": ["number", "null"]}]}, ["1"], ['"x"', "1.5", "null"]),
    (
        {
            "$defs": {"Unit": {"type": "string", "enum": ["c", "f"]}},
            "type": "object",
            "properties": {"unit": {"allOf": [{"$ref": "#/$defs/Unit"}], "description": "pydantic v1"}},
            "required": ["unit"],
        },
        ['{"unit": "c"}'],
        ['{"unit": "k"}'],
    ),
    (
        {
            "definitions": {
                "Tree": {
                    "type": "object",
                    "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/definitions/Tree"}}},
                    "required": ["v"],
                }
            },
            "$ref": "#/definitions/Tree",
        },
        ['{"v": 1}', '{"v": 1, "kids": [{"v": 2, "kids": [{"v": 3}]}, {"v": 4}]}'],
        ['{"v": 1, "kids": [{}]}'],
    ),
    (
        {"type": "object", "properties": {"a": {"type": "integer"}, "self": {"$ref": "#"}}},
        ["{}", '{"self": {"a": 1, "self": {}}}'],
        ['{"self": {"b": 1}}'],
    ),
    ({"$defs": {"a b/c~d": {"type": "integer"}}, "$ref": "#/$defs/a%20b~1c~0d"}, ["5"], ['"5"']),
    (
        {
            "type": "string",
            "format": "date-time",
            "pattern": "^[0-9]+$",
            "minimum": 3,
            "examples": ["x"],
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "x",
            "deprecated": True,
            "readOnly": True,
            "not": {"type": "string"},
            "if": {},
            "then": {},
            "else": {},
        },
        ['"anything"'],
        ["1"],
    ),
    ({"type": "integer", "minimum": 1, "maximum": 5, "multipleOf": 2}, ["1", "100"], ["1.5"]),
    ({}, ['{"a": [1, "x", null, true, {"b": -2.5e10}]}', "[]", '""'], ["", "nul", "[1,]"]),
]


@pytest.mark.parametrize(("schema", "accepted", "rejected"), ACCEPTED_AND_REJECTED)
def test_grammar_accepts_exactly_the_valid_json(schema, accepted, rejected):
    matcher = Gbnf(grammar_for(schema))
    assert [text for text in accepted if not matcher.accepts(text)] == []
    assert [text for text in rejected if matcher.accepts(text)] == []


@pytest.mark.parametrize(
    ("whitespace", "accepted"),
    [
        ("", True),
        (" ", True),
        ("\n", True),
        ("\n" + " " * 20, True),
        ("\n\t\t", True),
        ("  ", False),
        ("\n" + " " * 21, False),
        ("\n\n", False),
        ("\t", False),
        (" \n", False),
    ],
)
def test_whitespace_between_tokens_is_bounded(whitespace, accepted):
    assert accepts({"type": "array", "items": {"type": "integer"}}, f"[{whitespace}1,{whitespace}2{whitespace}]") is accepted


# -- bounds and refusals --


@pytest.mark.parametrize(
    ("schema", "message", "path"),
    [
        (False, "the schema false allows no value", ""),
        ({"type": "object", "properties": {"city": {"type": "town"}}}, "unknown type 'town'", "properties.city.type"),
        (
            {"properties": {"a": {"items": False, "prefixItems": [], "minItems": 1}}},
            "minItems 1 is more than the 0 items allowed",
            "properties.a.minItems",
        ),
        ({"properties": {"a": False}}, "the schema false allows no value", "properties.a"),
        (
            {"$ref": "https://example.com/schema.json"},
            "$ref 'https://example.com/schema.json' is outside the schema; only #/... is followed",
            "$ref",
        ),
        ({"properties": {"a": {"$ref": "#/$defs/Missing"}}}, "$ref '#/$defs/Missing' points to nothing", "properties.a.$ref"),
        (
            {"$defs": {"A": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/A"}]}}, "$ref": "#/$defs/A"},
            "$ref '#/$defs/A' can refer to itself before writing any character",
            "$defs.A.anyOf.1.$ref",
        ),
        (
            {"$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}}, "type": "array", "items": {"$ref": "#/$defs/A"}},
            "$ref '#/$defs/A' can refer to itself before writing any character",
            "$defs.B.$ref",
        ),
        (
            {"$defs": {"A": {"allOf": [{"$ref": "#/$defs/A"}]}}, "$ref": "#/$defs/A"},
            "allOf includes $ref '#/$defs/A' within itself",
            "$defs.A.$ref",
        ),
        ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "allOf: no type is both 'string' and 'integer'", "allOf"),
        ({"allOf": [{"const": 1}, {"const": 2}]}, "allOf: cannot merge two different 'const'", "allOf"),
        (
            {"allOf": [{"anyOf": [{"type": "string"}]}, {"anyOf": [{"type": "null"}]}]},
            "allOf: cannot merge two different 'anyOf'",
            "allOf",
        ),
        ({"allOf": [{"enum": [1, 2]}, {"enum": [3]}]}, "allOf: no value is in both enums", "allOf"),
        (
            {"properties": {"tags": {"type": "array", "minItems": 2, "maxItems": 1}}},
            "maxItems 1 is less than minItems 2",
            "properties.tags.maxItems",
        ),
        (
            {"type": "string", "minLength": MAX_REPEAT + 1},
            f"minLength {MAX_REPEAT + 1} is more than the {MAX_REPEAT} a grammar allows",
            "minLength",
        ),
        ({"type": "string", "maxLength": -1}, "maxLength must be a non-negative integer", "maxLength"),
        ({"type": "array", "minItems": 1.5}, "minItems must be a non-negative integer", "minItems"),
        ({"type": "array", "maxItems": True}, "maxItems must be a non-negative integer", "maxItems"),
        ({"enum": []}, "enum must be a non-empty list", "enum"),
        ({"anyOf": []}, "anyOf must be a non-empty list", "anyOf"),
        ({"type": []}, "type must be a name or a non-empty list of names", "type"),
        ({"properties": ["a"]}, "properties must be an object", "properties"),
        ({"type": "object", "required": "a"}, "required must be a list of names", "required"),
        (
            {"type": "object", "additionalProperties": 1},
            "additionalProperties must be a boolean or a schema",
            "additionalProperties",
        ),
        ({"items": {"$ref": 7}}, "$ref must be a string", "items.$ref"),
        ({"const": float("nan")}, "the schema is not JSON (NaN, infinity or a value of no JSON type)", ""),
        ("string", "a schema must be a JSON object or a boolean", ""),
        ({"properties": {"a": 1}}, "a schema must be a JSON object or a boolean", "properties.a"),
    ],
)
def test_refused_schemas_say_why_and_where(schema, message, path):
    with pytest.raises(SchemaError) as raised:
        GrammarBuilder().schema(schema)
    assert (raised.value.message, raised.value.path) == (message, path)
    assert str(raised.value) == (f"{message} (at {path})" if path else message)


def _nested(depth: int) -> dict:
    """An array of arrays ... of strings, nesting `depth` JSON objects."""
    schema: dict = {"type": "string"}
    for _ in range(depth - 1):
        schema = {"items": schema}
    return schema


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            {"description": "x" * MAX_SCHEMA_BYTES},
            f"the schema is {MAX_SCHEMA_BYTES + 19} bytes of JSON, more than {MAX_SCHEMA_BYTES}",
        ),
        (_nested(MAX_DEPTH + 1), f"the schema nests deeper than {MAX_DEPTH} levels"),
        ({"default": float("inf")}, "the schema is not JSON (NaN, infinity or a value of no JSON type)"),
        ({"enum": [{1, 2}]}, "the schema is not JSON (NaN, infinity or a value of no JSON type)"),
    ],
)
def test_check_size_refuses_schemas_too_big_to_send(schema, message):
    with pytest.raises(SchemaError) as raised:
        check_size(schema, "tools.0.function.parameters")
    assert (raised.value.message, raised.value.path) == (message, "tools.0.function.parameters")


def test_check_size_accepts_the_largest_schema_allowed():
    check_size({"description": "x" * (MAX_SCHEMA_BYTES - 19)}, "")
    check_size(_nested(MAX_DEPTH), "")


def test_max_items_and_length_above_the_cap_are_lowered_to_it():
    grammar = grammar_for({"type": "array", "items": {"type": "string", "maxLength": 10**9}, "maxItems": 5000})
    assert f'args-item ::= "\\"" char{{0,{MAX_REPEAT}}} "\\""\n' in grammar
    assert f'args ::= "[" ws ( args-item ws ( "," ws args-item ws ){{0,{MAX_REPEAT - 1}}} )? "]"\n' in grammar


def test_too_many_rules_is_a_schema_error():
    schema = {
        "type": "object",
        "properties": {f"p{index}": {"enum": [index]} for index in range(10)},
        "required": [f"p{index}" for index in range(10)],
    }
    with pytest.raises(SchemaError, match="the grammar would need more than 5 rules"):
        GrammarBuilder(max_rules=5).schema(schema)
    GrammarBuilder(max_rules=11).schema(schema)


@pytest.mark.parametrize("combinator", ["anyOf", "allOf"])
def test_schemas_asking_for_exponential_work_are_refused(combinator):
    """Each level refers to the next 8 times through allOf, which is inlined, not a shared rule."""
    levels = 8
    defs = {f"L{level}": {combinator: [{"allOf": [{"$ref": f"#/$defs/L{level + 1}"}]}] * 8} for level in range(levels)}
    defs[f"L{levels}"] = {"type": "string"}
    with pytest.raises(SchemaError, match=f"the schema needs more than {MAX_STEPS} steps to compile"):
        GrammarBuilder().schema({"$defs": defs, "$ref": "#/$defs/L0"})


def test_many_optional_properties_keep_the_grammar_linear():
    schema = {"type": "object", "properties": {f"p{index}": {"type": "integer"} for index in range(100)}}
    grammar = grammar_for(schema)
    assert len(grammar) < 100 * 200
    assert Gbnf(grammar).accepts('{"p3": 3, "p50": 50, "p99": 99}')
    assert not Gbnf(grammar).accepts('{"p50": 50, "p3": 3}')


# -- hostile shapes: long lists and chains compile without recursion, or are refused by a bound --


def test_a_long_prefix_compiles_without_recursion_and_is_capped_at_the_repeat_bound():
    """Each prefix element past minItems nests an optional group in the one before, so only the first
    MAX_REPEAT are written (what is written stays valid); minItems above it is refused as before."""
    grammar = grammar_for({"type": "array", "prefixItems": [{}] * 5000})
    [array_rule] = [line for line in grammar.splitlines() if line.startswith("args ::= ")]
    assert array_rule.count("value ws") == MAX_REPEAT
    assert array_rule.count("( ") == array_rule.count(")?") == MAX_REPEAT
    short = Gbnf(grammar_for({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]}))
    assert short.accepts('[1, "a"]') and short.accepts("[1]") and not short.accepts("[1, 2]")


def _chain(length: int, link) -> dict:
    """A schema whose $defs refer to one another `length` deep, each through `link(next_ref)`."""
    defs = {str(n): link(f"#/$defs/{n + 1}") for n in range(length)}
    return {"type": "object", "properties": {"x": {"$ref": "#/$defs/0"}}, "$defs": {**defs, str(length): {}}}


@pytest.mark.parametrize(
    "schema",
    [
        _chain(1200, lambda ref: {"allOf": [{"$ref": ref}]}),
        {"type": "array", "allOf": [{"items": {"description": str(n)}} for n in range(1500)]},
        {"type": "object", "allOf": [{"properties": {"x": {"description": str(n)}}} for n in range(1000)]},
        {"type": "array", "prefixItems": [{"type": ["string", "null"]}] * 1500},
    ],
    ids=["allOf $ref chain", "allOf merging items", "allOf merging a property", "long prefix of alternatives"],
)
def test_long_chains_and_merges_within_the_size_bound_compile(schema):
    check_size(schema, "")
    assert grammar_for(schema).startswith("root ::= args\n")


@pytest.mark.parametrize(
    "schema, message",
    [
        (_chain(40, lambda ref: {"type": "array", "items": {"$ref": ref}}), f"nests deeper than {MAX_DEPTH} levels"),
        ({"type": "object", "properties": {f"p{n}": {"enum": [n]} for n in range(2100)}}, "more than 2000 rules"),
    ],
)
def test_chains_past_a_bound_are_refused(schema, message):
    with pytest.raises(SchemaError, match=message):
        GrammarBuilder().schema(schema)


_KEYS = st.sampled_from(["a", "b", "c"])
_LEAVES = st.sampled_from(
    [
        True,
        False,
        {},
        {"type": "string"},
        {"type": "integer"},
        {"type": ["null", "number"]},
        {"$ref": "#"},
        {"$ref": "#/$defs/a"},
        {"$ref": "#/$defs/nothing"},
        {"const": 1},
        {"enum": [1, "x", None]},
        {"type": "strung"},
        {"minLength": 2, "maxLength": 1},
        {"nullable": True},
        {"pattern": "x", "format": "date"},
    ]
)


def _long(schemas):
    """Lists of up to 1500 copies of a leaf (copies of anything larger would nest exponentially)."""
    return st.tuples(_LEAVES, st.integers(1, 1500)).map(lambda pair: [pair[0]] * pair[1]) | schemas


def _wrapped(inner):
    """One more level of the keywords that combine schemas, some lists long."""
    lists = st.lists(inner, min_size=1, max_size=3)
    return st.one_of(
        st.fixed_dictionaries(
            {"type": st.just("object"), "properties": st.dictionaries(_KEYS, inner, max_size=3)},
            optional={"required": st.lists(_KEYS, max_size=3), "additionalProperties": st.booleans() | inner},
        ),
        st.fixed_dictionaries(
            {"type": st.just("array")},
            optional={
                "items": inner,
                "prefixItems": _long(lists),
                "minItems": st.integers(0, 3),
                "maxItems": st.integers(0, 2000),
            },
        ),
        st.fixed_dictionaries({"anyOf": lists}),
        st.fixed_dictionaries({"oneOf": lists}),
        st.fixed_dictionaries({"allOf": _long(lists)}),
        st.fixed_dictionaries({"allOf": lists, "nullable": st.booleans()}),
        st.fixed_dictionaries({"$ref": st.just("#/$defs/b"), "description": st.text(max_size=3)}, optional={"items": inner}),
    )


SCHEMAS = st.recursive(_LEAVES, _wrapped, max_leaves=20)  # tests/unit/test_bad_input.py fuzzes the API with them


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(SCHEMAS, st.dictionaries(_KEYS, SCHEMAS, max_size=3))
def test_any_schema_compiles_or_is_a_schema_error(schema, defs):
    """Fuzzed: whatever the shape, the builder gives a rule or a SchemaError, never another exception
    (a RecursionError there was a 500)."""
    if isinstance(schema, dict):
        schema = {**schema, "$defs": defs}
    try:
        GrammarBuilder().schema(schema)
    except SchemaError:
        pass
