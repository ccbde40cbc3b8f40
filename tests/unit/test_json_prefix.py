"""JsonPrefix: what may be given out of a JSON text being written, and what closes it there."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api_like_oai.tools.json_prefix import JsonPrefix

SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=12
)
OBJECTS = st.dictionaries(st.text(max_size=5), VALUES, max_size=5)


@settings(max_examples=150, deadline=None)
@given(OBJECTS, st.booleans(), st.booleans())
def test_every_prefix_of_valid_json_closes_into_json(value, ensure_ascii, indented):
    text = json.dumps(value, ensure_ascii=ensure_ascii, indent=2 if indented else None)
    check, given_out = JsonPrefix(), 0
    for char in text:
        check.feed(char)
        assert not check.broken and check.safe_end >= given_out  # what was given out is never taken back
        given_out = check.safe_end
        json.loads(text[: check.safe_end] + check.closing())
    assert (check.complete, check.safe_end, check.closing()) == (True, len(text), "")


@pytest.mark.parametrize(
    "text",
    [
        '{"a" 1}',
        '{"a": 01}',
        "{,}",
        '{"a": tru e}',
        '{"a": [1 2]}',
        '{"a": "\x01"}',
        '{"a": "\\x"}',
        '{"a": "\\u12g4"}',
        '{"a": 1,}',
        "[1,]",
        '{"a": -}',
        '{"a": 1.}',
        "{} x",
        '{"a": 1]',
    ],
)
def test_what_cannot_be_json_is_broken_and_what_was_safe_still_closes(text):
    check = JsonPrefix()
    check.feed(text)
    assert check.broken
    if check.safe_end:
        json.loads(text[: check.safe_end] + check.closing())


def test_nothing_after_a_break_is_safe():
    """A raw newline in a string (an upstream ignoring the grammar) breaks the JSON: the plain text
    after it must not move safe_end past the break, or a streamed call would give the newline out."""
    check = JsonPrefix()
    check.feed('{"city": "Os\nlo')
    safe = check.safe_end
    check.feed(" more words")
    assert check.broken and check.safe_end == safe == len('{"city": "Os')


@pytest.mark.parametrize(
    "text, safe, closing",
    [
        ('{"city": "Pa', '{"city": "Pa', '"}'),
        ('{"city": "P\\u00', '{"city": "P', '"}'),
        ('{"city": "Paris", "unit', '{"city": "Paris"', "}"),
        ('{"n": [1, 2.', '{"n": [1, 2.', "0]}"),
        ('{"n": [1, 2,', '{"n": [1, 2', "]}"),
        ('{"on": f', '{"on": f', "alse}"),
    ],
)
def test_a_member_waits_for_its_value_and_the_rest_closes(text, safe, closing):
    check = JsonPrefix()
    check.feed(text)
    assert (text[: check.safe_end], check.closing()) == (safe, closing)
