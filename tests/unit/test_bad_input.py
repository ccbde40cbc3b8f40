"""Bad requests get a 400 in OpenAI's error shape naming the field, before anything goes upstream."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import make_app
from .test_tool_grammar import SCHEMAS

CHAT = "/v1/chat/completions"
OK_MESSAGES = [{"role": "user", "content": "hi"}]


def assert_openai_error(response, status: int, param=None):
    assert response.status_code == status, response.get_data(as_text=True)
    body = response.get_json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"]
    if param is not None:
        assert body["error"]["param"] == param
    return body["error"]


@pytest.mark.parametrize("raw_body", [b"{not json", b"", b"\xff\xfe", b"[1, 2]", b'"text"', b"null"])
def test_unparseable_or_non_object_bodies(app_client, raw_body):
    response = app_client.post(CHAT, data=raw_body, content_type="application/json")
    assert_openai_error(response, 400)


@pytest.mark.parametrize(
    "messages, param",
    [
        (None, "messages"),
        ("hello", "messages"),
        ([], "messages"),
        ([123], "messages.0"),
        ([{}], "messages.0.role"),
        ([{"role": 1, "content": "x"}], "messages.0.role"),
        ([{"role": "user", "content": 5}], "messages.0.content"),
    ],
)
def test_malformed_messages(app_client, messages, param):
    body = {"messages": messages} if messages is not None else {}
    error = assert_openai_error(app_client.post(CHAT, json=body), 400)
    assert error["param"] == param or error["param"].startswith(param)
    assert error["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "field, value",
    [
        ("temperature", "hot"),
        ("max_tokens", -1),
        ("n", 0),
        ("stop", 5),
        ("stream", "maybe"),
        ("top_p", 3),
    ],
)
def test_wrong_types_name_the_field(app_client, field, value):
    error = assert_openai_error(app_client.post(CHAT, json={"messages": OK_MESSAGES, field: value}), 400)
    assert error["param"].split(".")[0] == field


def test_unknown_field_is_refused_not_dropped(app_client):
    error = assert_openai_error(app_client.post(CHAT, json={"messages": OK_MESSAGES, "frobnicate": 1}), 400)
    assert error["param"] == "frobnicate" and "cannot honour" in error["message"]


def test_upstream_down_is_503_even_for_streams(app_client):
    for stream in (False, True):
        response = app_client.post(CHAT, json={"messages": OK_MESSAGES, "stream": stream})
        error = assert_openai_error(response, 503)
        assert "unreachable" in error["message"] and error["code"] == "upstream_unavailable"


def test_unknown_route_and_wrong_method(app_client):
    assert_openai_error(app_client.get("/v1/nothing"), 404)
    assert_openai_error(app_client.get(CHAT), 405)


def test_completion_prompt_of_wrong_type(app_client):
    assert_openai_error(app_client.post("/v1/completions", json={"prompt": {"a": 1}}), 400, None)


def test_errors_are_json_never_html(app_client):
    response = app_client.post(CHAT, data=json.dumps({"messages": OK_MESSAGES, "n": "x"}), content_type="text/plain")
    assert response.mimetype == "application/json"


def _tool(parameters: dict) -> dict:
    return {"type": "function", "function": {"name": "f", "parameters": parameters}}


def _array_property(**array: object) -> dict:
    return {"type": "object", "properties": {"a": {"type": "array", **array}}}


def _ref_chain(length: int) -> dict:
    defs = {str(n): {"type": "array", "items": {"$ref": f"#/$defs/{n + 1}"}} for n in range(length)}
    return {"type": "object", "properties": {"a": {"$ref": "#/$defs/0"}}, "$defs": {**defs, str(length): {}}}


@pytest.mark.parametrize(
    "body, param",
    [
        (
            {"tools": [_tool(_array_property(minItems=5000))], "tool_choice": "required"},
            "tools.0.function.parameters.properties.a.minItems",
        ),
        (
            {"functions": [_tool(_array_property(minItems=5000))["function"]], "function_call": {"name": "f"}},
            "functions.0.parameters.properties.a.minItems",
        ),
        ({"tools": [_tool(_ref_chain(40))], "tool_choice": "required"}, "tools.0.function.parameters.$defs.15.items"),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "object", "description": "x" * 70_000}},
                }
            },
            "response_format.json_schema.schema",
        ),
        ({"json_schema": {"type": "object", "description": "x" * 70_000}}, "json_schema"),
        ({"grammar": 'root ::= "' + "x" * 70_000 + '"'}, "grammar"),
        ({"grammar": "root ::= " + "(" * 40 + '"a"' + ")" * 40}, "grammar"),
        ({"grammar": 'root ::= "a"{0,100000}'}, "grammar"),
        ({"grammar": "root ::= [a-z]{5001}"}, "grammar"),
    ],
)
def test_a_grammar_input_past_a_bound_is_a_400_naming_the_field(app_client, body, param):
    response = app_client.post("/v1/internal/chat-prompt", json={"messages": OK_MESSAGES, **body})
    assert assert_openai_error(response, 400)["param"] == param


@pytest.mark.parametrize(
    "grammar",
    [
        'root ::= "((((((((((((((((((((((((((((((((((((((((" [)(]{0,3} # )))))))))\n',  # brackets as characters
        'root ::= ("a") "{99999}" item{1,2000}\nitem ::= [0-9]',
    ],
)
def test_a_grammar_within_the_bounds_is_accepted(app_client, grammar):
    response = app_client.post("/v1/internal/chat-prompt", json={"messages": OK_MESSAGES, "grammar": grammar})
    assert response.status_code == 200, response.get_data(as_text=True)


def test_a_tool_schema_the_grammar_refuses_is_named_as_the_client_sent_it():
    """Refused when its grammar is built, after translation: Anthropic's and the Responses API's own
    fields are named, not the chat request's they were translated into."""
    from ..fake_llamacpp import FakeLlamaCpp

    fake = FakeLlamaCpp().start()
    try:
        _refused_as_sent(make_app("--llama-api", fake.url, "--chat-prompt-model", "chatml").test_client())
    finally:
        fake.stop()


def _refused_as_sent(app_client) -> None:
    messages = app_client.post(
        "/v1/messages",
        json={
            "model": "m",
            "max_tokens": 10,
            "messages": [{"role": "user", "content": "Hi"}],
            "tools": [{"name": "f", "input_schema": _ref_chain(40)}],
            "tool_choice": {"type": "any"},
        },
    )
    assert messages.status_code == 400
    assert messages.get_json()["error"]["message"].startswith("tools.0.input_schema.$defs.15.items: ")
    responses = app_client.post(
        "/v1/responses",
        json={
            "model": "m",
            "input": "Hi",
            "store": False,
            "tool_choice": "required",
            "tools": [{"type": "function", "name": "f", "parameters": _ref_chain(40)}],
        },
    )
    assert assert_openai_error(responses, 400)["param"] == "tools.0.parameters.$defs.15.items"


def test_a_long_prefix_items_is_a_grammar_not_a_500(app_client):
    """A RecursionError in the grammar builder once made this a 500."""
    response = app_client.post(
        "/v1/internal/chat-prompt",
        json={"messages": OK_MESSAGES, "tools": [_tool(_array_property(prefixItems=[{}] * 5000))], "tool_choice": "required"},
    )
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.get_json()["grammar"].startswith("root ::= ")


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
@given(SCHEMAS, st.booleans())
def test_fuzzed_tool_schemas_are_a_grammar_or_a_400(app_client, schema, legacy):
    """Whatever a tool's schema, through the whole chat path: a grammar or a 400 naming the field."""
    parameters = {"type": "object", "properties": {"a": schema}, "$defs": {"a": schema, "b": {}}}
    body = (
        {"functions": [{"name": "f", "parameters": parameters}], "function_call": {"name": "f"}}
        if legacy
        else {"tools": [_tool(parameters)], "tool_choice": "required"}
    )
    response = app_client.post("/v1/internal/chat-prompt", json={"messages": OK_MESSAGES, **body})
    if response.status_code != 200:
        error = assert_openai_error(response, 400)
        assert error["param"].startswith("functions.0.parameters" if legacy else "tools.0.function.parameters")


BIG = 18446744073709551616  # 2**64: past every 64-bit integer


def test_integers_past_64_bits_keep_their_value(app_client):
    """The body's integers are read exactly, however large (as pydantic's own parser reads them): a
    schema's enum reaches the prompt and the grammar as written, and a seed is not refused."""
    tool = {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {"type": "object", "properties": {"n": {"type": "integer", "enum": [BIG, -BIG]}}},
        },
    }
    body = json.dumps({"messages": OK_MESSAGES, "tools": [tool], "tool_choice": "required", "seed": BIG})
    response = app_client.post("/v1/internal/chat-prompt", data=body, content_type="application/json")
    assert response.status_code == 200, response.get_data(as_text=True)
    answer = response.get_data(as_text=True)
    assert str(BIG) in answer and f"-{BIG}" in answer and "e+19" not in answer and "e19" not in answer


@pytest.mark.parametrize("depth", [300, 1000])
def test_a_body_nesting_too_deep_is_a_400_in_each_apis_shape(app_client, depth):
    """A tool call's input nested hundreds deep: refused where the body is parsed, never a 500 later."""
    nested = "[" * depth + "]" * depth
    messages = (
        '[{"role": "user", "content": "hi"}, {"role": "assistant", "content": [{"type": "tool_use", '
        '"id": "t1", "name": "f", "input": {"a": ' + nested + '}}]}, {"role": "user", "content": '
        '[{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}]'
    )
    anthropic = app_client.post(
        "/v1/messages", content_type="application/json", data='{"model": "m", "max_tokens": 10, "messages": ' + messages + "}"
    )
    assert anthropic.status_code == 400, anthropic.get_data(as_text=True)
    assert anthropic.get_json()["type"] == "error" and anthropic.get_json()["error"]["type"] == "invalid_request_error"
    chat = app_client.post(
        CHAT,
        content_type="application/json",
        data='{"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"a": ' + nested + "}}",
    )
    assert_openai_error(chat, 400)


@pytest.mark.parametrize(
    "grammar",
    [
        'root ::= "a" # a comment ended by a CR\rx ::= ' + "(" * 40 + '"b"' + ")" * 40,  # CR ends a comment too
        'root ::= <"> ' + "(" * 40 + '"b"' + ")" * 40,  # a token (<...>) holding a quote
        'root ::= "a"{' + "9" * 5000 + "}",  # more digits than int() reads
        'root ::= "a"{ 1 # a comment\n , 5000 }',  # blanks and comments inside the braces
    ],
)
def test_a_grammar_past_a_bound_is_found_wherever_llama_cpp_reads_it(app_client, grammar):
    response = app_client.post("/v1/internal/chat-prompt", json={"messages": OK_MESSAGES, "grammar": grammar})
    assert assert_openai_error(response, 400)["param"] == "grammar"


@pytest.mark.parametrize(
    "grammar",
    [
        "root ::= " + "[" * 65_000,  # a class that never ends
        'root ::= "a"{' + " " * 65_000,  # a repetition that never ends
        'root ::= "' + "\\\\" * 32_000,  # a literal that never ends
    ],
)
def test_a_grammar_that_never_ends_is_read_once_and_left_to_llama_cpp(app_client, grammar):
    """Each of these took minutes of CPU (on the event loop) when the check searched a regular
    expression from every position; read once, they are within the bounds, and llama.cpp refuses them."""
    response = app_client.post("/v1/internal/chat-prompt", json={"messages": OK_MESSAGES, "grammar": grammar})
    assert response.status_code == 200, response.get_data(as_text=True)
