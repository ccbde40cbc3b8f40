"""The incremental tool-call parser: every native format, fed whole and split at every position."""

from __future__ import annotations

import itertools
import json

import pytest

from api_like_oai.tools.formats import FORMATS
from api_like_oai.tools.parser import ToolCallDelta, ToolCallParser, new_call_id
from api_like_oai.tools.scan import ObjectScan

TOOLS = {"get_weather", "get_time"}


def run(format_name: str, pieces, *, stream_arguments: bool = False, tools=TOOLS) -> list:
    counter = itertools.count()
    parser = ToolCallParser(FORMATS[format_name], tools, stream_arguments=stream_arguments, new_id=lambda: f"id{next(counter)}")
    out = []
    for piece in pieces:
        out += parser.feed(piece)
    return out + parser.finish()


def folded(out: list) -> tuple[str, list[dict]]:
    """(content, calls) as a non-streamed answer would hold them."""
    content = "".join(piece for piece in out if isinstance(piece, str))
    calls: dict[int, dict] = {}
    for delta in (piece for piece in out if isinstance(piece, ToolCallDelta)):
        if delta.index not in calls:
            assert delta.id and delta.name, "a call's first delta carries its id and name"
            calls[delta.index] = {"id": delta.id, "name": delta.name, "arguments": ""}
        else:
            assert delta.id is None and delta.name is None, "id and name come exactly once"
        calls[delta.index]["arguments"] += delta.arguments
    return content, list(calls.values())


WEATHER = '{"name": "get_weather", "arguments": {"city": "Zürich", "note": "a \\"quoted\\" } brace"}}'
WEATHER_ARGUMENTS = '{"city": "Zürich", "note": "a \\"quoted\\" } brace"}'

# Escapes whose second character is a letter: a token may end on the backslash and the next begin
# with plain letters (which the streamed call's fast path must not take for more of the string).
ESCAPED_ARGUMENTS = '{"city": "Z\\u00fcrich\\nCH", "path": "C:\\\\tmp\\\\", "tab": "a\\tb"}'

CASES = {
    "hermes call after text": (
        "hermes",
        f"Let me check. <tool_call>\n{WEATHER}\n</tool_call>",
        "Let me check. ",
        [("get_weather", WEATHER_ARGUMENTS)],
    ),
    "hermes escapes in arguments": (
        "hermes",
        f'<tool_call>{{"name": "get_weather", "arguments": {ESCAPED_ARGUMENTS}}}</tool_call>',
        "",
        [("get_weather", ESCAPED_ARGUMENTS)],
    ),
    "hermes parallel calls": (
        "hermes",
        f'<tool_call>\n{WEATHER}\n</tool_call>\n<tool_call>\n{{"name": "get_time"}}\n</tool_call>\n',
        "",
        [("get_weather", WEATHER_ARGUMENTS), ("get_time", "{}")],
    ),
    "hermes arguments as a JSON string": (
        "hermes",
        '<tool_call>{"name": "get_time", "arguments": "{\\"zone\\": \\"UTC\\"}"}</tool_call>',
        "",
        [("get_time", '{"zone": "UTC"}')],
    ),
    "hermes unknown tool is text": (
        "hermes",
        'A <tool_call>{"name": "rm_rf", "arguments": {}}</tool_call> B',
        'A <tool_call>{"name": "rm_rf", "arguments": {}}</tool_call> B',
        [],
    ),
    "hermes broken JSON is text": (
        "hermes",
        'A <tool_call>{"name": "get_time", "arguments": {]}</tool_call>',
        'A <tool_call>{"name": "get_time", "arguments": {]}</tool_call>',
        [],
    ),
    "hermes marker-like text stays": ("hermes", "a <b> and <tool and 1 < 2", "a <b> and <tool and 1 < 2", []),
    "hermes missing closing tag": ("hermes", f"<tool_call>{WEATHER}", "", [("get_weather", WEATHER_ARGUMENTS)]),
    "hermes text after calls": (
        "hermes",
        f"<tool_call>{WEATHER}</tool_call>\n\nDone.",
        "\n\nDone.",
        [("get_weather", WEATHER_ARGUMENTS)],
    ),
    "generic is hermes's syntax": ("generic", f"<tool_call>{WEATHER}</tool_call>", "", [("get_weather", WEATHER_ARGUMENTS)]),
    "mistral list": (
        "mistral",
        f'[TOOL_CALLS] [{WEATHER}, {{"name": "get_time", "arguments": {{}}}}]',
        "",
        [("get_weather", WEATHER_ARGUMENTS), ("get_time", "{}")],
    ),
    "mistral text before": ("mistral", f"Sure.[TOOL_CALLS][{WEATHER}]", "Sure.", [("get_weather", WEATHER_ARGUMENTS)]),
    "mistral second call broken": (
        "mistral",
        f'[TOOL_CALLS][{WEATHER}, {{"name": "nope"}}]',
        ', {"name": "nope"}]',
        [("get_weather", WEATHER_ARGUMENTS)],
    ),
    "llama3 bare JSON": (
        "llama3",
        '  {"name": "get_weather", "parameters": {"city": "Paris"}}',
        "",
        [("get_weather", '{"city": "Paris"}')],
    ),
    "llama3 python tag and semicolons": (
        "llama3",
        '<|python_tag|>{"name": "get_time", "parameters": {}}; {"name": "get_weather", "parameters": {"city": "Oslo"}}',
        "",
        [("get_time", "{}"), ("get_weather", '{"city": "Oslo"}')],
    ),
    "llama3 JSON that is no call is text": ("llama3", '{"answer": 42}', '{"answer": 42}', []),
    "llama3 braces later are text": ("llama3", 'Use {"name": "get_time"} like this', 'Use {"name": "get_time"} like this', []),
    "llama3 plain text": ("llama3", "Hello there", "Hello there", []),
}


# What a grammar lets the model write: calls of known tools in well-formed JSON.
GRAMMATICAL = [name for name in CASES if "unknown" not in name and "broken" not in name]


@pytest.mark.parametrize(
    "stream_arguments, case",
    [(False, case) for case in CASES.values()] + [(True, CASES[name]) for name in GRAMMATICAL],
    ids=[f"held-{name}" for name in CASES] + [f"streamed-{name}" for name in GRAMMATICAL],
)
def test_whole_and_split_at_every_position_agree(case, stream_arguments):
    format_name, text, content, calls = case
    whole = folded(run(format_name, [text], stream_arguments=stream_arguments))
    assert whole == (
        content,
        [{"id": f"id{n}", "name": name, "arguments": arguments} for n, (name, arguments) in enumerate(calls)],
    )
    for cut in range(1, len(text)):
        split = run(format_name, [text[:cut], text[cut:]], stream_arguments=stream_arguments)
        assert folded(split) == whole, f"split at {cut}: {text[:cut]!r} | {text[cut:]!r}"
    characters = run(format_name, list(text), stream_arguments=stream_arguments)
    assert folded(characters) == whole


@pytest.mark.parametrize(
    "format_name, markers",
    [
        ("hermes", ("<tool_call>", "</tool_call>", "<tool_", "</tool")),
        ("mistral", ("[TOOL_CALLS]", "[TOOL")),
        ("llama3", ("<|python_tag|>", "<|python")),
    ],
)
def test_no_markup_reaches_content_however_the_text_is_split(format_name, markers):
    text = {
        "hermes": f"Checking.<tool_call>\n{WEATHER}\n</tool_call>",
        "mistral": f"Checking.[TOOL_CALLS][{WEATHER}]",
        "llama3": '<|python_tag|>{"name": "get_time", "parameters": {}}',
    }[format_name]
    for cut in range(1, len(text)):
        for piece in run(format_name, [text[:cut], text[cut:]]):
            if isinstance(piece, str):
                assert not any(marker in piece for marker in markers)


def test_streamed_arguments_arrive_as_written_and_form_the_final_arguments():
    text = f"<tool_call>{WEATHER}</tool_call>"
    out = run("hermes", list(text), stream_arguments=True)
    argument_pieces = [piece.arguments for piece in out if isinstance(piece, ToolCallDelta) and piece.arguments]
    assert len(argument_pieces) > 10  # streamed as written, not in one piece at the end
    assert "".join(argument_pieces) == WEATHER_ARGUMENTS
    first = out[0]
    assert (first.id, first.name, first.arguments) == ("id0", "get_weather", "")


def test_held_arguments_arrive_once_the_call_is_complete():
    text = f"<tool_call>{WEATHER}"
    parser = ToolCallParser(FORMATS["hermes"], TOOLS)
    assert parser.feed(text[:-1]) == []
    assert [p.arguments for p in parser.feed(text[-1])] == ["", WEATHER_ARGUMENTS]


def cut_runs(format_name: str, text: str, stream_arguments: bool):
    """(cut text, folded answer, parser) for the output ending at every position of `text`, each fed
    whole and a character at a time."""
    for cut in range(1, len(text) + 1):
        for pieces in ([text[:cut]], list(text[:cut])):
            parser = ToolCallParser(FORMATS[format_name], TOOLS, stream_arguments=stream_arguments)
            out = [piece for chunk in pieces for piece in parser.feed(chunk)] + parser.finish()
            yield text[:cut], folded(out), parser


@pytest.mark.parametrize("case", [CASES[name] for name in GRAMMATICAL], ids=GRAMMATICAL)
def test_a_call_cut_anywhere_held_back_is_text_never_a_call(case):
    """Without streamed arguments a call is given out whole or not at all: cut anywhere, the calls
    given are the whole ones before the cut, and a call the cut falls in comes back as text."""
    format_name, text, _, calls = case
    for cut_text, (content, given), _ in cut_runs(format_name, text, stream_arguments=False):
        assert [(call["name"], call["arguments"]) for call in given] == calls[: len(given)], cut_text
        if not given:
            assert content == cut_text


@pytest.mark.parametrize("case", [CASES[name] for name in GRAMMATICAL], ids=GRAMMATICAL)
def test_a_streamed_call_cut_anywhere_is_closed_into_a_json_object(case):
    """Streamed arguments cannot be taken back: a call the cut falls in keeps what was streamed, a
    prefix of what the model wrote, closed into a JSON object, and is marked cut."""
    format_name, text, _, calls = case
    for cut_text, (_, given), parser in cut_runs(format_name, text, stream_arguments=True):
        for number, call in enumerate(given):
            name, arguments = calls[number]
            assert call["name"] == name, cut_text
            assert isinstance(json.loads(call["arguments"]), dict), (cut_text, call["arguments"])
            cut_here = parser.call_cut and number == len(given) - 1
            assert call["arguments"] == arguments or cut_here, cut_text


@pytest.mark.parametrize(
    "written, closed",
    [
        ('{"city": "Pa', '{"city": "Pa"}'),
        ('{"city": "Pa\\', '{"city": "Pa"}'),  # an escape is given out whole, never cut
        ('{"city": "Paris", "un', '{"city": "Paris"}'),  # a member waits until its value begins
        ('{"city": "Paris", "unit": ', '{"city": "Paris"}'),
        ('{"days": [1, 2', '{"days": [1, 2]}'),
        ('{"days": [1, 2,', '{"days": [1, 2]}'),
        ('{"n": -', '{"n": -0}'),
        ('{"x": 1.5e', '{"x": 1.5e0}'),
        ('{"on": tr', '{"on": true}'),
        ('{"a": {"b": [{"c": nu', '{"a": {"b": [{"c": null}]}}'),
        ('{"na', "{}"),
    ],
)
def test_a_cut_streamed_call_keeps_what_was_written_closed(written, closed):
    text = '<tool_call>{"name": "get_weather", "arguments": ' + written
    out = run("hermes", list(text), stream_arguments=True)
    assert folded(out) == ("", [{"id": "id0", "name": "get_weather", "arguments": closed}])


def test_a_started_call_that_breaks_is_closed_and_its_text_comes_back():
    """Only an upstream that ignores the grammar can write this: the call given out stays valid JSON."""
    text = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo", ]}</tool_call>'
    content, given = folded(run("hermes", list(text), stream_arguments=True))
    assert given == [{"id": "id0", "name": "get_weather", "arguments": '{"city": "Oslo"}'}]
    assert content == text


def test_plain_text_passes_straight_through():
    parser = ToolCallParser(FORMATS["hermes"], TOOLS)
    assert parser.feed("Hello") == ["Hello"]
    assert parser.feed(" world") == [" world"]
    assert parser.finish() == []
    assert parser.calls_made == 0


def test_call_ids_are_openai_style_and_unique():
    ids = {new_call_id() for _ in range(100)}
    assert len(ids) == 100
    assert all(len(i) == 29 and i.startswith("call_") and i[5:].isalnum() for i in ids)


@pytest.mark.parametrize(
    "text, key, value",
    [
        ('{"name": "x", "arguments": {"a": [1, {"b": "}"}]}}', "arguments", '{"a": [1, {"b": "}"}]}'),
        ('{"n": 12.5e3 , "m": null}', "n", "12.5e3"),
        ('{"s": "\\u00e9\\"", "t": true}', "s", '"\\u00e9\\""'),
    ],
)
def test_object_scan_finds_top_level_values(text, key, value):
    scan = ObjectScan()
    for char in text:
        scan.feed(char)
    assert scan.end == len(text)
    assert scan.value_text(key) == value
    assert scan.parsed() == json.loads(text)


@pytest.mark.parametrize("text", ["x", "{1: 2}", '{"a" <', "[1]"])
def test_object_scan_notices_what_cannot_be_an_object(text):
    scan = ObjectScan()
    scan.feed(text)
    assert scan.broken


@pytest.mark.parametrize("stream_arguments", [False, True])
def test_a_call_written_again_word_for_word_is_dropped_and_flagged(stream_arguments):
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    same_reordered = '<tool_call>{"name": "get_weather", "arguments": {"city":"Oslo"}}</tool_call>'
    parser = ToolCallParser(FORMATS["hermes"], TOOLS, stream_arguments=stream_arguments)
    out = []
    for piece in (call, "\n", same_reordered, "\n<tool_call>"):
        out += parser.feed(piece)
    assert parser.repeating
    assert folded(out + parser.finish())[1] == [{"id": out[0].id, "name": "get_weather", "arguments": '{"city": "Oslo"}'}]


def test_only_the_first_call_streams_its_arguments_later_ones_wait_until_complete():
    text = (
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>'
    )
    out = run("hermes", list(text), stream_arguments=True)
    second = [piece.arguments for piece in out if isinstance(piece, ToolCallDelta) and piece.index == 1]
    assert second == ["", '{"city": "Rome"}']


def test_a_held_calls_string_tokens_are_taken_in_whole_and_give_out_nothing_until_the_end():
    """The held call's common token (more of a string, no quote or backslash) skips the scan's steps:
    nothing comes out for it, and the call is the same as when the text comes whole."""
    words = [f" word{n}" for n in range(20)]
    tokens = ["<tool_call>", '\n{"name": "get_weather", "arguments": {"city": "', *words, '"}}', "\n</tool_call>"]
    parser = ToolCallParser(FORMATS["hermes"], TOOLS, new_id=lambda: "id0")
    out = []
    for token in tokens[:2]:
        out += parser.feed(token)
    assert parser.in_held_string  # inside the city's string, the call held until it is whole
    for word in words:
        assert parser.feed(word) == [] and parser.in_held_string
    for token in tokens[-2:]:
        out += parser.feed(token)
    out += parser.finish()
    expected = '{"city": "' + "".join(words) + '"}'
    assert folded(out) == ("", [{"id": "id0", "name": "get_weather", "arguments": expected}])
    assert folded(out) == folded(run("hermes", ["".join(tokens)]))


@pytest.mark.parametrize(
    "written, cut",
    [
        ('{"city": "Pa', True),  # the arguments cut: their closing is marked, so MCP never runs the call
        ('{"city": "Paris"}', True),  # the arguments' last brace may be the call's: held back, then closed
        ('{"city": "Paris"}}\n</tool', False),  # the call's object whole, only its end marker cut: runnable
    ],
)
def test_only_the_closing_of_cut_arguments_is_marked_cut(written, cut):
    text = '<tool_call>{"name": "get_weather", "arguments": ' + written
    deltas = [piece for piece in run("hermes", list(text), stream_arguments=True) if not isinstance(piece, str)]
    assert [delta.cut for delta in deltas] == [False] * (len(deltas) - 1) + [cut]
