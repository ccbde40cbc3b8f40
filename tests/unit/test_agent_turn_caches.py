"""What an agent resends every turn costs as little as it can: what is derived from its tools is
derived once (the caches give what deriving afresh gives, a changed tool list misses them, what must
be refused is refused every time), long work runs off the event loop, and the upstream's connection
is kept after a parsed answer."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from api_like_oai.backends.events import GenerationEvent
from api_like_oai.digests import DigestCache, digest, json_text
from api_like_oai.errors import InvalidRequest
from api_like_oai.offload import off_the_loop
from api_like_oai.prompts import tools as tool_prompts
from api_like_oai.prompts.jinja import compile_template
from api_like_oai.protocol import ChatCompletionRequest, check_parameters
from api_like_oai.services import tool_calling

FIXTURES = Path(__file__).resolve().parents[2] / "benchmarks" / "fixtures"
QWEN = (Path(__file__).resolve().parents[2] / "conversation_templates" / "qwen2.5.jinja").read_text()


def claude_code_tools() -> list[dict]:
    """The tools Claude Code sent, as chat tools."""
    body = json.loads((FIXTURES / "claude_code_turn.json").read_text())["body"]
    return [
        {
            "type": "function",
            "function": {"name": tool["name"], "description": tool["description"], "parameters": tool["input_schema"]},
        }
        for tool in body["tools"]
    ]


def changed(tools: list[dict]) -> list[dict]:
    """The same tools but for one property of the first one."""
    first = json.loads(json.dumps(tools[0]))
    first["function"]["parameters"]["properties"]["added_by_the_test"] = {"type": "integer"}
    return [first, *tools[1:]]


def tool_plan(tools: list[dict], choice="auto") -> tool_calling.ToolPlan:
    request = ChatCompletionRequest.model_validate(
        {"messages": [{"role": "user", "content": "hi"}], "tools": tools, "tool_choice": choice}
    )
    return tool_calling.plan(request, "hermes")


# --- digests --------------------------------------------------------------------------------


def test_equal_values_share_a_digest_and_different_ones_do_not():
    tools = claude_code_tools()
    assert digest(tools) == digest(json.loads(json.dumps(tools)))
    assert digest(tools) != digest(changed(tools))
    assert digest({"a": 1}) != digest({"a": 1.0}) != digest({"a": True})


@pytest.mark.parametrize(
    "value", [{"maximum": math.nan}, {"enum": [math.inf]}, [None], None, {"default": None}, {"big": 2**70}, "\ud800"]
)
def test_values_orjson_cannot_tell_apart_or_write_get_no_digest(value):
    assert json_text(value) is None and digest(value) is None


def test_a_digest_cache_keeps_the_latest_entries_and_nothing_that_failed():
    cache = DigestCache(max_entries=2)
    assert [cache.get(key, lambda key=key: key * 2) for key in (1, 2, 3)] == [2, 4, 6]
    assert len(cache) == 2
    assert cache.get(1, lambda: "derived again") == "derived again"  # the oldest went
    with pytest.raises(ValueError):
        cache.get(4, lambda: int("x"))
    assert cache.get(4, lambda: "now") == "now"
    assert cache.get(None, lambda: "never kept") == "never kept" and len(cache) == 2


# --- the caches, against deriving afresh ----------------------------------------------------


def test_the_cached_grammar_is_the_one_built_afresh_and_a_changed_tool_list_gets_its_own():
    tools = claude_code_tools()
    plan = tool_plan(tools)
    grammar = tool_calling.constraint(plan, grammar_allowed=True)["grammar"]
    assert grammar == tool_calling.build_grammar(plan)
    assert tool_calling.constraint(tool_plan(tools), grammar_allowed=True)["grammar"] is grammar  # found again
    other = tool_plan(changed(tools))
    assert tool_calling.constraint(other, grammar_allowed=True)["grammar"] == tool_calling.build_grammar(other) != grammar
    named = tool_plan(tools, {"type": "function", "function": {"name": "Bash"}})
    assert tool_calling.constraint(named, grammar_allowed=True)["grammar"] == tool_calling.build_grammar(named) != grammar


def test_a_renamed_tool_gets_its_own_grammar_and_a_new_description_the_same():
    tools = claude_code_tools()
    grammar = tool_calling.constraint(tool_plan(tools), grammar_allowed=True)["grammar"]
    renamed = json.loads(json.dumps(tools))
    renamed[0]["function"]["name"] = "Renamed"
    plan = tool_plan(renamed)
    assert tool_calling.constraint(plan, grammar_allowed=True)["grammar"] == tool_calling.build_grammar(plan) != grammar
    described = json.loads(json.dumps(tools))
    described[0]["function"]["description"] = "Another description."
    assert tool_calling.constraint(tool_plan(described), grammar_allowed=True)["grammar"] is grammar


def test_the_cached_tool_prompt_is_the_one_written_afresh():
    tools = [tool for tool in claude_code_tools()]
    text = tool_prompts.tools_prompt(tools)
    assert text == tool_prompts.TOOLS_PROMPT.format(
        tools="\n".join(json.dumps(tool["function"], ensure_ascii=False) for tool in tools)
    )
    assert tool_prompts.tools_prompt(json.loads(json.dumps(tools))) is text
    assert '"added_by_the_test"' in tool_prompts.tools_prompt(changed(tools))


def test_a_template_writes_the_tools_as_json_dumps_does_cached_or_not():
    tools = claude_code_tools()
    template = compile_template(
        "{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}{{ tools[0] | tojson(indent=2) }}|{{ 'text' | tojson }}"
    )
    expected = (
        "".join(json.dumps(tool, ensure_ascii=False) + "\n" for tool in tools)
        + json.dumps(tools[0], indent=2, ensure_ascii=False)
        + '|"text"'
    )
    assert template.render(tools=tools) == template.render(tools=tools) == expected
    assert '"added_by_the_test"' in template.render(tools=changed(tools))
    nan_tool = {"x": math.nan}  # no digest: written as json.dumps writes it
    assert compile_template("{{ t | tojson }}").render(t=nan_tool) == '{"x": NaN}'


def test_schemas_that_passed_pass_again_and_a_refused_one_is_refused_every_time():
    schemas = [(f"tools.{n}.function.parameters", tool["function"]["parameters"]) for n, tool in enumerate(claude_code_tools())]
    check_parameters(schemas)
    check_parameters(json.loads(json.dumps(schemas)))
    bad = {"type": "object", "properties": {"x": {"type": "array", "items": "not a schema"}}}
    for _ in range(2):
        with pytest.raises(InvalidRequest, match="a schema must be an object") as refused:
            check_parameters([*schemas, ("tools.12.function.parameters", bad)])
        assert refused.value.param == "tools.12.function.parameters.properties.x.items"


def test_nan_is_refused_after_the_same_schema_with_null_passed():
    check_parameters([("tools.0.function.parameters", {"type": "object", "properties": {"x": {"enum": [None]}}})])
    with pytest.raises(InvalidRequest, match="not JSON"):
        check_parameters([("tools.0.function.parameters", {"type": "object", "properties": {"x": {"enum": [math.nan]}}})])


# --- the upstream's connection after a parsed answer ----------------------------------------


def upstream_answer(pieces: list[str], read_to_end: list[bool]):
    """Events of one answer; `read_to_end` holds True once the caller read past the last event, as
    backends/llamacpp.py does to put the connection back in the pool."""
    for piece in pieces:
        yield GenerationEvent(text=piece)
    yield GenerationEvent(finish_reason="stop", completion_tokens=len(pieces))
    read_to_end.append(True)


def test_an_answer_the_upstream_finished_is_read_to_its_end_so_its_connection_is_kept():
    read_to_end: list[bool] = []
    transform = tool_calling.parse_tool_calls(tool_plan(claude_code_tools()), stream_arguments=True)
    call = '<tool_call>\n{"name": "Bash", "arguments": {"command": "ls"}}\n</tool_call>'
    events = list(transform(upstream_answer(["Let me look.", call], read_to_end)))
    assert read_to_end == [True]
    assert events[-1].finish_reason == "tool_calls"


def test_an_answer_cut_short_for_repeating_its_call_ends_the_upstream_generation():
    read_to_end: list[bool] = []
    transform = tool_calling.parse_tool_calls(tool_plan(claude_code_tools()), stream_arguments=True)
    call = '<tool_call>\n{"name": "Bash", "arguments": {"command": "ls"}}\n</tool_call>'
    events = list(transform(upstream_answer([call, "\n", call, "\n", call], read_to_end)))
    assert read_to_end == []
    assert events[-1].finish_reason == "tool_calls"


# --- off the event loop ---------------------------------------------------------------------


def test_off_the_loop_without_an_event_loop_runs_here_and_raises_what_the_work_raises():
    assert off_the_loop(threading.get_ident) == threading.get_ident()
    with pytest.raises(InvalidRequest):
        off_the_loop(
            tool_calling.build_grammar,
            tool_plan(
                [
                    {
                        "type": "function",
                        "function": {
                            "name": "f",
                            "parameters": {"type": "object", "properties": {"x": {"type": "no-such-type"}}},
                        },
                    }
                ]
            ),
        )


def test_off_the_loop_under_gevent_runs_in_a_pool_thread_while_the_loop_goes_on():
    # The work waits for an event that only the event loop sets: it returns True only if the loop
    # ran while the work ran (in the loop's own thread it would wait out its timeout).
    script = """
from gevent import monkey; monkey.patch_all()
import gevent
from gevent.monkey import get_original
from api_like_oai.offload import off_the_loop
set_by_the_loop = get_original("threading", "Event")()
gevent.spawn(set_by_the_loop.set)
assert off_the_loop(set_by_the_loop.wait, 30) is True
try:
    off_the_loop(int, "x")
except ValueError:
    print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[2]
    )
    assert done.stdout.strip() == "ok", done.stderr
    assert "Traceback" not in done.stderr  # the pool does not print what the work raised


def test_a_large_raw_grammar_is_checked_off_the_loop_and_a_small_one_on_it_both_refused_alike():
    # Under gevent, the check of a 64 KiB grammar (tens of ms of Python) runs in a pool thread: the
    # thread that checked each grammar is recorded; a grammar past the bounds is the same 400 either way.
    script = """
from gevent import monkey; monkey.patch_all()
from gevent.monkey import get_original
from api_like_oai import protocol
from api_like_oai.errors import InvalidRequest
get_ident, checked_in = get_original("threading", "get_ident"), []
def recording(text, check=protocol.check_grammar):
    checked_in.append(get_ident())
    return check(text)
protocol.check_grammar = recording
def request(grammar):
    return protocol.ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "grammar": grammar})
large, small = "root ::= " + '("a" | "b") ' * 5000, 'root ::= "a"'
request(large), request(small)
assert checked_in[0] != get_ident() and checked_in[1] == get_ident(), checked_in
for deep in ("root ::= " + "(" * 40 + '"a"' + ")" * 40 + " " * 2000, "root ::= " + "(" * 40):
    try:
        request(deep)
    except InvalidRequest as exc:
        assert exc.param == "grammar" and "nests groups deeper" in exc.message
        print("refused")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[2]
    )
    assert done.stdout.split() == ["refused", "refused"], done.stderr
