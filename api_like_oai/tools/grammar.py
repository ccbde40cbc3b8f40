"""JSON Schema -> llama.cpp GBNF grammar, so that even a small model writes arguments valid for a tool.

`GrammarBuilder` collects named rules: `schema()` turns one JSON schema into rules and returns the
name of the rule matching its JSON, `rule()` adds a caller's rule (a tool-call wrapper), and
`render()` writes the grammar around a root expression, with the shared primitives it uses.

Every rule matches its value without surrounding whitespace; the whitespace between JSON tokens
is the one bounded rule `ws` (WS), so a small model cannot loop on whitespace.

Followed: `type` (one name or a list; absent: implied by object or array keywords, else any value),
`enum`, `const`, `properties` (in declared order), `required`, `additionalProperties` (absent
counts as false when `properties` is given: tool arguments must not invent keys), `items`,
`prefixItems` (and the older tuple form `items: [...]` with `additionalItems`), `minItems`,
`maxItems`, `minLength`, `maxLength`, `anyOf`, `oneOf` (both as alternatives), `allOf` (merged),
`nullable` (OpenAPI), `$ref` to a JSON pointer inside the schema (`#/$defs/X`, `#/definitions/X`,
`#`), recursion included. Every other keyword (`pattern`, `format`, `minimum`, `multipleOf`,
`not`, `patternProperties`, `description`, `default`, ...) is ignored: the grammar then allows
more than the schema, never fewer of its values, so the schemas real clients send do not fail.

Refused with SchemaError: the `false` schema, an unknown type name, a malformed keyword value,
a `$ref` outside the schema or to nothing, a `$ref` cycle through which no character is written
(left recursion, which llama.cpp refuses), an `allOf` whose members cannot be merged (two
different `anyOf`, `const` or disjoint types), a min above its max, and the bounds below.

Bounds: a schema of at most MAX_SCHEMA_BYTES of JSON nesting at most MAX_DEPTH levels, at most
`max_rules` rules per grammar, MAX_STEPS subschemas compiled per schema (`allOf` members
and keywords beside `anyOf` are compiled where used, so a small schema could otherwise ask for
exponential work). maxItems and maxLength above MAX_REPEAT are lowered to it (what is
written stays valid; llama.cpp expands a bounded repetition into one rule per step and refuses
more than 2000); minItems and minLength above it are refused, since lowering them would allow
invalid values. A `prefixItems` list longer than MAX_REPEAT caps the array there too: each prefix
element past minItems is an optional group nested in the one before. Long lists and chains
(`prefixItems`, `allOf` merged member by member, `$ref` chains through `allOf`) are compiled by
loops, not recursion, so only MAX_DEPTH bounds how deep the compiler recurses. Numbers are
written with at most 16 digits before and after the point.

Looser than the schema: besides the ignored keywords, an additional property's key may be any
string, a declared key included (`{"a": 1}` passes the grammar of `{"properties": {"a":
{"type": "string"}}, "additionalProperties": true}`).
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

WS = "ws"
MAX_SCHEMA_BYTES = 64 * 1024
MAX_DEPTH = 32
MAX_REPEAT = 1000
MAX_STEPS = 20_000  # subschemas compiled per schema() call, inlined allOf members included
# The shared rules, in the order render() writes them. DEL (U+007F) is kept out of unescaped
# characters like the other control characters; 16 digits keep a small model from looping on them.
PRIMITIVES: dict[str, str] = {
    WS: r'| " " | "\n" [ \t]{0,20}',
    "value": "object | array | string | number | boolean | null",
    "object": r'"{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"',
    "array": r'"[" ws ( value ws ( "," ws value ws )* )? "]"',
    "string": r'"\"" char* "\""',
    "char": r'[^"\\\x7F\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )',
    "number": r'integer ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?',
    "integer": r'"-"? ( "0" | [1-9] [0-9]{0,15} )',
    "boolean": r'"true" | "false"',
    "null": r'"null"',
}
_RESERVED_NAMES = frozenset({"root", *PRIMITIVES})
_SCALAR_RULES = {"number": "number", "integer": "integer", "boolean": "boolean", "null": "null"}
# The keywords the grammar follows; any other one is ignored and, in allOf, never merged.
_FOLLOWED = frozenset(
    {
        "type",
        "enum",
        "const",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "prefixItems",
        "additionalItems",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "anyOf",
        "oneOf",
        "allOf",
        "nullable",
        "$ref",
    }
)

_NOT_NAME_CHARS = re.compile(r"[^a-zA-Z0-9-]+")
_NAME = re.compile(r"[a-zA-Z0-9-]+")
# Literals, character classes and repetition counts: the parts of a rule body that name no rule.
_NOT_REFERENCES = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|\{[0-9,]*\}')
_LITERAL_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f\x7f]')


class SchemaError(ValueError):
    """A schema the grammar cannot follow; .path says where (e.g. "properties.city.type")."""

    def __init__(self, message: str, path: str = ""):
        super().__init__(f"{message} (at {path})" if path else message)
        self.message = message
        self.path = path


def gbnf_literal(text: str) -> str:
    """`text` as a GBNF quoted literal: quote, backslash and control characters escaped, the rest kept."""
    return '"' + _NEEDS_ESCAPE.sub(_escape_char, text) + '"'


def _escape_char(match: re.Match) -> str:
    char = match.group()
    return _LITERAL_ESCAPES.get(char) or f"\\x{ord(char):02X}"


def json_literal(value: Any) -> str:
    """The GBNF literal of `value` written as JSON (non-ASCII kept); ValueError for NaN or infinity."""
    return gbnf_literal(json.dumps(value, ensure_ascii=False, allow_nan=False))


def check_size(schema: Any, path: str = "") -> None:
    """SchemaError unless `schema` is an object or boolean, at most MAX_DEPTH deep and MAX_SCHEMA_BYTES long."""
    if not isinstance(schema, (dict, bool)):
        raise SchemaError("a schema must be a JSON object or a boolean", path)
    if isinstance(schema, dict) and _nests_deeper_than(schema, MAX_DEPTH):
        raise SchemaError(f"the schema nests deeper than {MAX_DEPTH} levels", path)
    try:
        size = len(json.dumps(schema, ensure_ascii=False, allow_nan=False).encode("utf-8", "surrogatepass"))
    except (TypeError, ValueError):
        raise SchemaError("the schema is not JSON (NaN, infinity or a value of no JSON type)", path) from None
    if size > MAX_SCHEMA_BYTES:
        raise SchemaError(f"the schema is {size} bytes of JSON, more than {MAX_SCHEMA_BYTES}", path)


def _nests_deeper_than(value: Any, limit: int) -> bool:
    """Whether dicts and lists nest more than `limit` levels; iterative, so any depth is safe."""
    pending = [(value, 1)]
    while pending:
        node, depth = pending.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        pending.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


@dataclass(frozen=True)
class _At:
    """Where the compiler is: the schema path for errors, the hint for rule names, the nesting depth,
    and the $ref whose rule body begins here (no character written since), to find left recursion."""

    path: str
    hint: str
    depth: int = 0
    left_ref: str | None = None

    def inner(self, key: str | None, hint: str | None = None, *, after_text: bool = False) -> _At:
        """A subschema at `key`; `after_text` when the grammar writes a character before it."""
        path = f"{self.path}.{key}" if self.path and key else (key or self.path)
        return _At(path, hint or self.hint, self.depth + 1, None if after_text else self.left_ref)

    def keyword(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key


@dataclass(frozen=True)
class _Member:
    """One member of an object: its `"key" ws ":" ws value` expression, and whether it is required,
    optional, or (the additional properties) repeated."""

    pair: str
    kind: str  # "required" | "optional" | "repeated"

    def first(self) -> str:
        """The member written first in the object, so without a leading comma."""
        return _seq(self.pair, WS, self.after_comma() if self.kind == "repeated" else "")

    def after_comma(self) -> str:
        text = f'"," ws {self.pair} ws'
        return {"required": text, "optional": f"( {text} )?", "repeated": f"( {text} )*"}[self.kind]


class GrammarBuilder:
    """Collects named GBNF rules; schema() returns a rule name that matches JSON valid for the schema."""

    def __init__(self, *, max_rules: int = 2000):
        self.max_rules = max_rules
        self._rules: dict[str, str | None] = {}  # name -> body; None while a recursive rule is compiled
        self._names_by_body: dict[str, str] = {}
        self._root: Any = None
        self._root_hint = ""
        self._ref_rules: dict[str, str] = {}
        self._left_refs: dict[str, dict[str, str]] = {}  # ref -> refs its rule begins with -> their path
        self._steps = 0

    # -- public API --

    def schema(self, schema: dict | bool, name_hint: str = "value", *, size_checked: bool = False) -> str:
        """The name of a rule matching exactly the JSON texts valid for `schema` (within the module's
        loosening); SchemaError if it cannot, and then the builder is left as it was. `size_checked`:
        the caller checked it with check_size already (a request's tool parameters are, when validated)."""
        if not size_checked:
            check_size(schema, "")
        rules_before = list(self._rules)
        self._root, self._root_hint, self._ref_rules, self._left_refs, self._steps = schema, name_hint, {}, {}, 0
        try:
            name = self._named(schema, _At("", name_hint))
            self._check_left_recursion()
        except SchemaError:
            self._forget_rules_after(rules_before)
            raise
        return name

    def rule(self, name_hint: str, body: str) -> str:
        """Adds `name ::= body` under a new name derived from `name_hint` (or finds a rule with that
        body) and returns the name; SchemaError past max_rules."""
        if body in self._names_by_body:
            return self._names_by_body[body]
        return self._define(self._reserve(name_hint), body)

    def render(self, root_body: str) -> str:
        """The whole grammar: `root ::= root_body`, the rules in the order added, then the primitives used."""
        lines = [f"root ::= {root_body}", *(f"{name} ::= {body}" for name, body in self._rules.items())]
        used = _primitives_used([root_body, *self._rules.values()])
        lines += [f"{name} ::= {body}" for name, body in PRIMITIVES.items() if name in used]
        return "\n".join(lines) + "\n"

    # -- rules --

    def _reserve(self, hint: str) -> str:
        if len(self._rules) >= self.max_rules:
            raise SchemaError(f"the grammar would need more than {self.max_rules} rules")
        base = _NOT_NAME_CHARS.sub("-", hint).strip("-") or "rule"
        name, number = base, 1
        while name in self._rules or name in _RESERVED_NAMES:
            number += 1
            name = f"{base}-{number}"
        self._rules[name] = None
        return name

    def _define(self, name: str, body: str) -> str:
        self._rules[name] = body
        self._names_by_body.setdefault(body, name)
        return name

    def _forget_rules_after(self, names_before: list[str]) -> None:
        for name in list(self._rules)[len(names_before) :]:
            body = self._rules.pop(name)
            if self._names_by_body.get(body) == name:
                del self._names_by_body[body]

    def _step(self, at: _At) -> None:
        """Counts one subschema compiled; SchemaError past MAX_DEPTH levels or MAX_STEPS subschemas."""
        self._steps += 1
        if at.depth > MAX_DEPTH:
            raise SchemaError(f"the schema nests deeper than {MAX_DEPTH} levels (counting $ref)", at.path)
        if self._steps > MAX_STEPS:
            raise SchemaError(f"the schema needs more than {MAX_STEPS} steps to compile", at.path)

    def _named(self, schema: Any, at: _At) -> str:
        """A single rule name for `schema`: a primitive's, or a rule made for its expression."""
        expression = self._expression(schema, at)
        return expression if _NAME.fullmatch(expression) else self.rule(at.hint, expression)

    # -- schemas --

    def _expression(self, schema: Any, at: _At) -> str:
        """A GBNF expression (names joined by `|`, or one sequence) matching the JSON valid for `schema`."""
        self._step(at)
        if schema is True:
            return "value"
        if schema is False:
            raise SchemaError("the schema false allows no value", at.path)
        if not isinstance(schema, dict):
            raise SchemaError("a schema must be a JSON object or a boolean", at.path)
        if "nullable" not in schema:
            return self._non_null_expression(schema, at)
        core = {key: value for key, value in schema.items() if key != "nullable"}
        expression = self._non_null_expression(core, at)
        return _alternatives([expression, "null"]) if schema["nullable"] is True else expression

    def _non_null_expression(self, schema: dict, at: _At) -> str:
        if "$ref" in schema:
            return self._ref(schema, at)
        if "allOf" in schema:
            return self._expression(self._merge_all_of(schema, at), at.inner(None))
        if "anyOf" in schema or "oneOf" in schema:
            return self._any_of(schema, at)
        if "const" in schema:
            return _json_literal_at(schema["const"], at.keyword("const"))
        if "enum" in schema:
            return self._enum(schema["enum"], at)
        return self._typed(schema, at)

    def _enum(self, values: Any, at: _At) -> str:
        if not isinstance(values, list) or not values:
            raise SchemaError("enum must be a non-empty list", at.keyword("enum"))
        return _alternatives(_json_literal_at(value, at.keyword("enum")) for value in values)

    def _any_of(self, schema: dict, at: _At) -> str:
        """Each alternative (with the keywords beside anyOf/oneOf applied to it) as a named rule."""
        key = "anyOf" if "anyOf" in schema else "oneOf"
        options = schema[key]
        if not isinstance(options, list) or not options:
            raise SchemaError(f"{key} must be a non-empty list", at.keyword(key))
        siblings = {name: value for name, value in schema.items() if name != key}
        names = []
        for index, option in enumerate(options):
            applied = {"allOf": [option, siblings]} if _FOLLOWED.intersection(siblings) else option
            names.append(self._named(applied, at.inner(f"{key}.{index}", f"{at.hint}-{index}")))
        return _alternatives(names)

    def _typed(self, schema: dict, at: _At) -> str:
        types = schema.get("type", _implied_type(schema))
        if isinstance(types, list) and len(types) == 1:
            types = types[0]
        if isinstance(types, list):
            if not types or not all(isinstance(name, str) for name in types):
                raise SchemaError("type must be a name or a non-empty list of names", at.keyword("type"))
            return _alternatives(
                self._named({**schema, "type": name}, at.inner(None, f"{at.hint}-{name}")) for name in dict.fromkeys(types)
            )
        if types is None:
            return "value"
        if types == "object":
            return self._object(schema, at)
        if types == "array":
            return self._array(schema, at)
        if types == "string":
            return self._string(schema, at)
        if isinstance(types, str) and types in _SCALAR_RULES:
            return _SCALAR_RULES[types]
        raise SchemaError(f"unknown type {types!r}", at.keyword("type"))

    def _string(self, schema: dict, at: _At) -> str:
        low, high = _bounds(schema, "minLength", "maxLength", at)
        if (low, high) == (0, None):
            return "string"
        return _seq(r'"\""', _repeat("char", low, high), r'"\""')

    def _object(self, schema: dict, at: _At) -> str:
        properties = schema.get("properties")
        extra = schema.get("additionalProperties", properties is None)
        required = schema.get("required", [])
        if properties is not None and not isinstance(properties, dict):
            raise SchemaError("properties must be an object", at.keyword("properties"))
        if not isinstance(required, list) or not all(isinstance(key, str) for key in required):
            raise SchemaError("required must be a list of names", at.keyword("required"))
        if not isinstance(extra, (bool, dict)):
            raise SchemaError("additionalProperties must be a boolean or a schema", at.keyword("additionalProperties"))
        if properties is None and not required and extra is True:
            return "object"
        members = self._members(properties or {}, required, extra, at)
        return _seq('"{"', WS, self._members_expression(members, at.hint), '"}"')

    def _members(self, properties: dict, required: list[str], extra: bool | dict, at: _At) -> list[_Member]:
        extra_value = (
            "value"
            if extra is True or extra is False
            else self._named(extra, at.inner("additionalProperties", f"{at.hint}-extra", after_text=True))
        )
        members = []
        for key, subschema in properties.items():
            value = self._named(subschema, at.inner(f"properties.{key}", f"{at.hint}-{key}", after_text=True))
            members.append(_Member(_pair(json_literal(key), value), "required" if key in required else "optional"))
        # Required but undeclared keys are written too (with any value, or the additional one's).
        members += [
            _Member(_pair(json_literal(key), extra_value), "required") for key in dict.fromkeys(required) if key not in properties
        ]
        if extra is not False:
            members.append(_Member(_pair("string", extra_value), "repeated"))
        return members

    def _members_expression(self, members: list[_Member], hint: str) -> str:
        """The members in order, commas between those written, each followed by ws.

        Whichever member comes first is written without a comma: that is one of the optional
        members before the first required one, or the first required one. `rest` is what may
        follow member i, kept as a list of parts; it is named when used twice and long."""
        first_required = next((i for i, member in enumerate(members) if member.kind == "required"), len(members))
        rest = [member.after_comma() for member in members[first_required + 1 :]]
        firsts = [_seq(members[first_required].first(), *rest)] if first_required < len(members) else []
        if first_required < len(members):
            rest = [members[first_required].after_comma(), *rest]
        for index in reversed(range(first_required)):
            if index > 0 and len(rest) > 1:  # used by this first member and by the one before
                rest = [self.rule(f"{hint}-rest", _seq(*rest))]
            firsts.insert(0, _seq(members[index].first(), *rest))
            rest = [members[index].after_comma(), *rest]
        if not firsts:
            return ""
        written = _alternatives(firsts)
        if first_required == len(members):
            return f"( {written} )?"
        return f"( {written} )" if len(firsts) > 1 else written

    def _array(self, schema: dict, at: _At) -> str:
        prefix, items = schema.get("prefixItems", []), schema.get("items", True)
        if isinstance(items, list):  # the tuple form of drafts 4 to 2019-09
            prefix, items = items, schema.get("additionalItems", True)
        if not isinstance(prefix, list):
            raise SchemaError("prefixItems must be a list of schemas", at.keyword("prefixItems"))
        low, high = _bounds(schema, "minItems", "maxItems", at)
        if len(prefix) > MAX_REPEAT and high is None:
            high = MAX_REPEAT  # each prefix element written is a group nested in the one before
        if items is False:
            high = len(prefix) if high is None else min(high, len(prefix))
            if low > high:
                raise SchemaError(f"minItems {low} is more than the {high} items allowed", at.keyword("minItems"))
        prefix_rules = [
            self._named(item, at.inner(f"prefixItems.{index}", f"{at.hint}-{index}", after_text=True))
            for index, item in enumerate(prefix[:high])
        ]
        item_rule = None if items is False else self._named(items, at.inner("items", f"{at.hint}-item", after_text=True))
        return _seq('"["', WS, _elements(prefix_rules, item_rule, low, high), '"]"')

    # -- $ref and allOf --

    def _ref(self, schema: dict, at: _At) -> str:
        ref = schema["$ref"]
        if not isinstance(ref, str):
            raise SchemaError("$ref must be a string", at.keyword("$ref"))
        siblings = {key: value for key, value in schema.items() if key != "$ref"}
        if _FOLLOWED.intersection(siblings):  # keywords beside $ref apply too (JSON Schema 2019-09 on)
            return self._expression({"allOf": [{"$ref": ref}, siblings]}, at.inner(None))
        if at.left_ref is not None:
            self._left_refs.setdefault(at.left_ref, {})[ref] = at.keyword("$ref")
        if ref not in self._ref_rules:
            self._ref_rules[ref] = self._ref_rule(ref, at)
        return self._ref_rules[ref]

    def _ref_rule(self, ref: str, at: _At) -> str:
        """A rule for the target of `ref`, named before its body is compiled so that it can recur."""
        target, target_path = self._resolve(ref, at)
        name = self._reserve(f"{self._root_hint}-{target_path.rsplit('.', 1)[-1] or 'root'}")
        self._ref_rules[ref] = name
        body = self._expression(target, _At(target_path, name, at.depth + 1, ref))
        return self._define(name, body)

    def _resolve(self, ref: str, at: _At) -> tuple[Any, str]:
        """The subschema `ref` points to, and its path; SchemaError for a ref outside the schema."""
        if not ref.startswith("#"):
            raise SchemaError(f"$ref {ref!r} is outside the schema; only #/... is followed", at.keyword("$ref"))
        pointer = urllib.parse.unquote(ref[1:])
        if pointer and not pointer.startswith("/"):
            raise SchemaError(f"$ref {ref!r} is not a JSON pointer", at.keyword("$ref"))
        target, keys = self._root, [key.replace("~1", "/").replace("~0", "~") for key in pointer.split("/")[1:]]
        for key in keys:
            if isinstance(target, dict) and key in target:
                target = target[key]
            elif isinstance(target, list) and key.isdigit() and int(key) < len(target):
                target = target[int(key)]
            else:
                raise SchemaError(f"$ref {ref!r} points to nothing", at.keyword("$ref"))
        return target, ".".join(keys)

    def _merge_all_of(self, schema: dict, at: _At) -> dict:
        merged: dict = {}
        for part in self._flatten(schema, at):
            merged = _merge(merged, part, at.keyword("allOf"))
        return merged

    def _flatten(self, schema: Any, at: _At) -> list[dict]:
        """The schemas that `schema` requires all of, in order, with its $ref and allOf replaced by
        their parts. A stack, not recursion: merged allOf nest as deep as they have members."""
        flat, pending = [], [(schema, frozenset())]
        while pending:
            node, refs_followed = pending.pop()
            parts = self._parts(node, at, refs_followed)
            if parts is None:
                flat.append(node)
            else:
                pending += reversed(parts)
        return flat

    def _parts(self, schema: Any, at: _At, refs_followed: frozenset) -> list[tuple[Any, frozenset]] | None:
        """What `schema` is all of, each with the $refs followed to reach it; None for a plain schema."""
        self._step(at)
        if schema is True:
            return []
        if not isinstance(schema, dict):
            raise SchemaError("allOf must list schemas, and the schema false allows no value", at.keyword("allOf"))
        if "$ref" in schema and isinstance(schema["$ref"], str):
            ref = schema["$ref"]
            if ref in refs_followed:
                raise SchemaError(f"allOf includes $ref {ref!r} within itself", at.keyword("$ref"))
            rest = {key: value for key, value in schema.items() if key != "$ref"}
            return [(self._resolve(ref, at)[0], refs_followed | {ref}), (rest, refs_followed)]
        if "allOf" in schema:
            parts = schema["allOf"]
            if not isinstance(parts, list):
                raise SchemaError("allOf must be a list of schemas", at.keyword("allOf"))
            rest = {key: value for key, value in schema.items() if key != "allOf"}
            return [(part, refs_followed) for part in [*parts, rest]]
        return None

    def _check_left_recursion(self) -> None:
        """SchemaError if some $ref's rule can begin with itself: llama.cpp refuses left recursion."""
        for start, edges in self._left_refs.items():
            seen, pending = set(), [(start, ref) for ref in edges]
            while pending:
                source, ref = pending.pop()
                if ref == start:
                    raise SchemaError(
                        f"$ref {start!r} can refer to itself before writing any character", self._left_refs[source][ref]
                    )
                if ref not in seen:
                    seen.add(ref)
                    pending += [(ref, target) for target in self._left_refs.get(ref, {})]


# -- expression helpers --


def _seq(*parts: str) -> str:
    return " ".join(part for part in parts if part)


def _alternatives(expressions: Iterable[str]) -> str:
    return " | ".join(dict.fromkeys(expressions))


def _pair(key_expression: str, value_rule: str) -> str:
    return f'{key_expression} ws ":" ws {value_rule}'


def _repeat(item: str, low: int, high: int | None) -> str:
    """`item` (one name or group) repeated low..high times (high None: no bound); "" for none."""
    if high == 0:
        return ""
    operator = {(0, None): "*", (1, None): "+", (0, 1): "?", (1, 1): ""}.get((low, high))
    if operator is None:
        operator = f"{{{low},}}" if high is None else f"{{{low}}}" if low == high else f"{{{low},{high}}}"
    return item + operator


def _elements(prefix: list[str], item: str | None, low: int, high: int | None) -> str:
    """Array elements: the prefix rules in order, then `item`, each followed by ws, commas between
    them, between `low` and `high` of them in all. Each prefix element past `low` opens an optional
    group around all that follows; built in one pass, so a long prefix costs no recursion."""
    parts, groups = [], 0
    for index, rule in enumerate(prefix):
        if index >= low:
            parts.append("(")
            groups += 1
        parts.append(f"{rule} ws" if index == 0 else f'"," ws {rule} ws')
    if high is None or len(prefix) < high:
        parts.append(_items_after(item, len(prefix), low, high))
    return _seq(*parts, *[")?"] * groups)


def _items_after(item: str | None, index: int, low: int, high: int | None) -> str:
    """The elements of `item` after the `index` prefix elements (see _elements)."""
    if item is None:
        return ""
    more = _repeat(
        f'( "," ws {item} ws )',
        max(low - index - 1, 0) if index == 0 else max(low - index, 0),
        None if high is None else high - index - (1 if index == 0 else 0),
    )
    if index > 0:
        return more
    written = _seq(f"{item} ws", more)
    return written if low > 0 else f"( {written} )?"


def _primitives_used(bodies: Iterable[str | None]) -> set[str]:
    """The primitives that the bodies refer to, directly or through other primitives."""
    pending = [name for body in bodies if body for name in _NAME.findall(_NOT_REFERENCES.sub(" ", body))]
    used: set[str] = set()
    while pending:
        name = pending.pop()
        if name in PRIMITIVES and name not in used:
            used.add(name)
            pending += _NAME.findall(_NOT_REFERENCES.sub(" ", PRIMITIVES[name]))
    return used


# -- schema helpers --


def _json_literal_at(value: Any, path: str) -> str:
    try:
        return json_literal(value)
    except (TypeError, ValueError):
        raise SchemaError("not a JSON value", path) from None


def _implied_type(schema: dict) -> str | None:
    """The type implied by the keywords when `type` is absent (tools mean an object), else any value."""
    if {"properties", "additionalProperties", "required"}.intersection(schema):
        return "object"
    if {"items", "prefixItems"}.intersection(schema):
        return "array"
    return None


def _bounds(schema: dict, low_key: str, high_key: str, at: _At) -> tuple[int, int | None]:
    """(min, max) of a count; max lowered to MAX_REPEAT, SchemaError for a min above it or above max."""
    low, high = _count(schema, low_key, at), _count(schema, high_key, at)
    if low is not None and low > MAX_REPEAT:
        raise SchemaError(f"{low_key} {low} is more than the {MAX_REPEAT} a grammar allows", at.keyword(low_key))
    low = low or 0
    if high is not None and high < low:
        raise SchemaError(f"{high_key} {high} is less than {low_key} {low}", at.keyword(high_key))
    return low, None if high is None else min(high, MAX_REPEAT)


def _count(schema: dict, key: str, at: _At) -> int | None:
    value = schema.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value % 1 != 0:
        raise SchemaError(f"{key} must be a non-negative integer", at.keyword(key))
    return int(value)


# -- allOf merging: each followed keyword combined so that both schemas hold --


def _merge(merged: dict, part: dict, path: str) -> dict:
    """`merged` and `part` as one schema; keywords the grammar ignores keep their first value."""
    result = dict(merged)
    for key, value in part.items():
        if key not in result or result[key] == value:
            result[key] = value
        elif key in _MERGERS:
            try:
                result[key] = _MERGERS[key](result[key], value, path)
            except (TypeError, AttributeError):
                raise SchemaError(f"allOf: cannot merge the values of {key!r}", path) from None
        elif key in _FOLLOWED:
            raise SchemaError(f"allOf: cannot merge two different {key!r}", path)
    return result


def _merge_types(first: Any, second: Any, path: str) -> list[str]:
    firsts, seconds = _as_list(first), _as_list(second)
    both = [name for name in firsts if name in seconds]
    both += [name for name in ("integer",) if name not in both and "number" in firsts + seconds and "integer" in firsts + seconds]
    if not both:
        raise SchemaError(f"allOf: no type is both {first!r} and {second!r}", path)
    return both


def _merge_enums(first: Any, second: Any, path: str) -> list:
    seconds = {json.dumps(value, sort_keys=True) for value in _as_list(second)}
    both = [value for value in _as_list(first) if json.dumps(value, sort_keys=True) in seconds]
    if not both:
        raise SchemaError("allOf: no value is in both enums", path)
    return both


def _merge_properties(first: dict, second: dict, path: str) -> dict:
    return {**first, **second, **{key: {"allOf": [first[key], second[key]]} for key in first if key in second}}


def _merge_additional(first: Any, second: Any, path: str) -> Any:
    if first is False or second is False:
        return False
    return second if first is True else first if second is True else {"allOf": [first, second]}


def _as_list(value: Any) -> list:
    return value if isinstance(value, list) else [value]


_MERGERS = {
    "type": _merge_types,
    "enum": _merge_enums,
    "properties": _merge_properties,
    "required": lambda first, second, path: list(dict.fromkeys([*first, *second])),
    "additionalProperties": _merge_additional,
    "items": lambda first, second, path: {"allOf": [first, second]},
    "minItems": lambda first, second, path: max(first, second),
    "minLength": lambda first, second, path: max(first, second),
    "maxItems": lambda first, second, path: min(first, second),
    "maxLength": lambda first, second, path: min(first, second),
    "nullable": lambda first, second, path: first is True and second is True,
}
