"""Bad input, tried systematically (issue 6): fuzzing from /openapi.json, then llama.cpp's own hard cases.

The app runs in-process with its upstream on a closed port, so a request that passes validation
ends in 503 `upstream_unavailable` (529 `overloaded_error` on Anthropic's paths): the only 5xx
allowed here. Every other non-2xx answer must be a 4xx whose JSON body is exactly OpenAI's error
object, {"error": {"message", "type", "param", "code"}}, or on Anthropic's paths (/v1/messages...)
exactly Anthropic's, {"type": "error", "error": {"type", "message"}}.

The cases at the end are bugs the fuzzing found (each fixed); they stay as regression tests.
"""

from __future__ import annotations

import functools
import json
import re

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from pydantic import BaseModel, ValidationError
from schemathesis.core.parameters import ParameterLocation
from schemathesis.core.transport import Response
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from api_like_oai.routes.declare import all_declarations
from api_like_oai.routes.docs import openapi_path, resolved

from ..unit.conftest import make_app

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
CHAT_PROMPT = "/v1/internal/chat-prompt"
OK_MESSAGES = [{"role": "user", "content": "hi"}]
# The smallest valid body of each generation endpoint; a test adds or replaces one field.
VALID_BODY = {CHAT: {"messages": OK_MESSAGES}, COMPLETIONS: {"prompt": "hi"}}
GENERATION_ENDPOINTS = [CHAT, COMPLETIONS]
ERROR_KEYS = {"message", "type", "param", "code"}


def build_app():
    """The proxy as its CLI builds it, upstream down; chatml renders prompts without any upstream."""
    return make_app("--chat-prompt-model", "chatml")


APP = build_app()


@pytest.fixture(scope="module")
def client():
    return APP.test_client()


def with_field(endpoint: str, **fields) -> dict:
    return {**VALID_BODY[endpoint], **fields}


# --- assertions -------------------------------------------------------------------------------


def speaks_anthropic(path: str) -> bool:
    return path.startswith("/v1/messages")


def error_of(status: int, body: bytes, content_type: str | None, path: str = "") -> dict:
    """The error object of a non-2xx answer, after checking it is exactly OpenAI's shape (Anthropic's
    on Anthropic's paths)."""
    assert content_type is not None and content_type.split(";")[0].strip() == "application/json", (
        f"{status} answered with {content_type!r}: {body[:300]!r}"
    )
    document = json.loads(body)
    if speaks_anthropic(path):
        return anthropic_error_of(document)
    assert isinstance(document, dict) and set(document) == {"error"}, document
    error = document["error"]
    assert isinstance(error, dict) and set(error) == ERROR_KEYS, error
    assert isinstance(error["message"], str) and error["message"], error
    assert isinstance(error["type"], str) and error["type"], error
    assert error["param"] is None or isinstance(error["param"], str), error
    assert error["code"] is None or isinstance(error["code"], str), error
    return error


def anthropic_error_of(document) -> dict:
    assert isinstance(document, dict) and set(document) == {"type", "error"} and document["type"] == "error", document
    error = document["error"]
    assert isinstance(error, dict) and set(error) == {"type", "message"}, error
    assert error["type"] in ANTHROPIC_ERROR_TYPES, error
    assert isinstance(error["message"], str) and error["message"], error
    return error


ANTHROPIC_ERROR_TYPES = {
    "invalid_request_error",
    "authentication_error",
    "not_found_error",
    "request_too_large",
    "overloaded_error",
    "api_error",
    "timeout_error",
}


def assert_error(response, status: int, param: object = ..., code: object = ...) -> dict:
    """A Flask test response is `status` in OpenAI's error shape, with this `param`/`code` when given.

    `param` may be a tuple of acceptable values.
    """
    body = response.get_data()
    assert response.status_code == status, f"expected {status}, got {response.status_code}: {body[:300]!r}"
    error = error_of(response.status_code, body, response.content_type)
    if param is not ...:
        assert error["param"] in (param if isinstance(param, tuple) else (param,)), error
    if code is not ...:
        assert error["code"] == code, error
    if 400 <= status < 500 and status != 401:
        assert error["type"] == "invalid_request_error", error
    return error


def assert_upstream_down(response) -> None:
    """Accepted by the proxy, which then found llama.cpp down: the one legitimate 5xx here."""
    error = assert_error(response, 503, param=None, code="upstream_unavailable")
    assert error["type"] == "upstream_error", error


def assert_accepted_or_refused(response, param: str) -> None:
    """Either answer is fine for a value at the edge of the sensible: accepted (503 here) or a 400 naming it."""
    if response.status_code == 503:
        assert_upstream_down(response)
    else:
        assert_error(response, 400, param=param)


def post_raw(client, endpoint: str, body: bytes):
    return client.post(endpoint, data=body, content_type="application/json")


# --- 1. fuzzing every operation of /openapi.json ------------------------------------------------

# (method, path, declaration) of each documented route (its first path), as /openapi.json is made from them.
DECLARED = [
    (method, openapi_path(declared.paths[0]), declared)
    for declared in all_declarations()
    if declared.documented
    for method in declared.methods
    if method != "HEAD"
]
# The pydantic model each operation validates its body with (the models /openapi.json is made from).
REQUEST_MODELS = {
    (method, path): model
    for method, path, declared in DECLARED
    if isinstance(model := resolved(declared.request), type) and issubclass(model, BaseModel)
}


@functools.lru_cache(maxsize=1)
def proxy_coerces_types() -> bool:
    """Whether the lax-typing bug of test_wrongly_typed_scalars_are_refused is still there."""
    response = APP.test_client().post(CHAT, json={"messages": OK_MESSAGES, "max_tokens": False})
    return response.status_code != 400


def valid_only_by_coercion(case, body: bytes | None) -> bool:
    """The body breaks the schema only with scalars pydantic's lax mode converts ("5" or false for 5)."""
    model = REQUEST_MODELS.get((case.method.upper(), case.path))
    if model is None or not body:
        return False
    try:
        model.model_validate_json(body)
    except ValidationError:
        return False
    try:
        model.model_validate_json(body, strict=True)
    except ValidationError:
        return True
    return False


def check_answer(case, response: Response) -> None:
    """The fuzzers' invariant: no 5xx but `upstream_unavailable`, every non-2xx an OpenAI error,
    and a schema-breaking body always refused with a 4xx (it never reaches llama.cpp).

    Negative headers, methods or content types (request-shape probes) only have to obey the first two:
    Flask answers OPTIONS itself, and the proxy reads any body as JSON whatever its Content-Type.
    """
    status = response.status_code
    body = response.request.body
    body = body.encode() if isinstance(body, str) else body
    request = f"{response.request.method} {response.request.url} {(body or b'')[:300]!r}"
    bad_body = case.meta is not None and case.meta.is_negative_at(ParameterLocation.BODY)
    down_status, down_marker = (529, b'"overloaded_error"') if speaks_anthropic(case.path) else (503, b'"upstream_unavailable"')
    upstream_down = status == down_status and down_marker in response.content
    if bad_body and (status < 300 or upstream_down) and proxy_coerces_types() and valid_only_by_coercion(case, body):
        return  # the known bug test_wrongly_typed_scalars_are_refused is about; checked there
    if status < 300:
        assert not bad_body, f"a body that breaks the schema was accepted with {status}: {request}"
        return
    content_type = (response.headers.get("content-type") or [None])[0]
    error = error_of(status, response.content, content_type, case.path)
    if status >= 500:
        assert upstream_down, f"{status} {error} for {request}"
        assert not bad_body, f"a body that breaks the schema went upstream: {request}"
    else:
        assert status in (400, 404, 405, 413), f"unexpected {status} {error} for {request}"


def load_schema(mode: str, max_examples: int):
    config = schemathesis.Config.from_dict(
        {
            "seed": 6,  # the same cases every run: a failure here reproduces
            "suppress-health-check": ["too_slow", "filter_too_much", "data_too_large", "large_base_example"],
            "generation": {"mode": mode, "max-examples": max_examples, "database": "none"},
            "phases": {"stateful": {"enabled": False}},  # no links between operations to follow
        }
    )
    return schemathesis.openapi.from_wsgi("/openapi.json", APP, config=config)


# Each runs the examples, coverage (boundaries of every field) and fuzzing phases on every operation
# whose answer is documented by a model: those in OpenAI's or Anthropic's error shapes. The document
# lists every route; Ollama's (its own errors: test_ollama_api.py), llama.cpp's relayed ones, the
# streams that never end and the probes are tested where they are.
# The admin's key routes answer this keyless app 403; test_keys_input.py fuzzes them with an admin key.
KEY_ROUTES = "^/v1/(internal/(keys|usage)|organization/usage)"
FUZZED = (
    "^("
    + "|".join(re.escape(path) for _, path, declared in DECLARED if declared.answer is not None and not path.startswith("/api/"))
    + ")$"
)
valid_data = load_schema("positive", 40).include(path_regex=FUZZED).exclude(path_regex=KEY_ROUTES)
# Only operations with a body can be sent schema-breaking data (the others have nothing to break).
invalid_data = (
    load_schema("negative", 40)
    .include(path_regex=FUZZED, method="POST")
    .exclude(path="/v1/internal/stop-generation")
    .exclude(path_regex=KEY_ROUTES)
)


@valid_data.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_fuzz_schema_valid_requests(case):
    response = case.call()
    check_answer(case, response)
    if response.status_code < 300:
        case.validate_response(response, checks=[response_schema_conformance, content_type_conformance])


@invalid_data.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_fuzz_schema_breaking_requests(case):
    check_answer(case, case.call())


# --- 2. llama.cpp's own hard cases, by hand -------------------------------------------------------


@pytest.mark.parametrize("endpoint", [CHAT, CHAT_PROMPT])
@pytest.mark.parametrize(
    "body, param",
    [
        ({}, "messages"),
        ({"messages": None}, "messages"),
        ({"messages": "hello"}, "messages"),
        ({"messages": {"role": "user", "content": "hi"}}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": [123]}, "messages.0"),
        ({"messages": ["hi"]}, "messages.0"),
        ({"messages": [None]}, "messages.0"),
        ({"messages": [{}]}, "messages.0.role"),
        ({"messages": [{"content": "hi"}]}, "messages.0.role"),
        ({"messages": [{"role": 1, "content": "hi"}]}, "messages.0.role"),
        ({"messages": [{"role": None, "content": "hi"}]}, "messages.0.role"),
        ({"messages": [{"role": ["user"], "content": "hi"}]}, "messages.0.role"),
        ({"messages": [OK_MESSAGES[0], {"role": {}, "content": "hi"}]}, "messages.1.role"),
        ({"messages": [{"role": "user", "content": "hi", "name": 5}]}, "messages.0.name"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
            "messages.0.content.0.image_url.url",
        ),  # not base64 (said before the upstream is asked about images)
    ],
    ids=lambda value: json.dumps(value)[:40] if not isinstance(value, str) else value,
)
def test_malformed_messages(client, endpoint, body, param):
    assert_error(client.post(endpoint, json=body), 400, param=param)


@pytest.mark.parametrize(
    "endpoint, body, param",
    [
        (CHAT, {"messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
        (CHAT, {"messages": [{"role": "user", "content": True}]}, "messages.0.content"),
        (CHAT, {"messages": [{"role": "user", "content": {"text": "hi"}}]}, "messages.0.content"),
        (CHAT, {"messages": [{"role": "user", "content": [1]}]}, ("messages.0.content", "messages.0.content.0")),
        (CHAT, {"messages": OK_MESSAGES, "stop": 5}, "stop"),
        (CHAT, {"messages": OK_MESSAGES, "stop": [1]}, ("stop", "stop.0")),
        (COMPLETIONS, {"prompt": {"a": 1}}, "prompt"),
        (COMPLETIONS, {"prompt": "hi", "stop": 5}, "stop"),
        ("/v1/embeddings", {"input": 5}, "input"),
    ],
)
def test_union_typed_fields_are_named_plainly(client, endpoint, body, param):
    assert_error(client.post(endpoint, json=body), 400, param=param)


@pytest.fixture(scope="module")
def twenty_megabytes() -> str:
    return "x" * (20 * 1024 * 1024)


@pytest.mark.parametrize("endpoint", GENERATION_ENDPOINTS)
def test_huge_body_is_413(client, endpoint, twenty_megabytes):
    field = {CHAT: {"messages": [{"role": "user", "content": twenty_megabytes}]}, COMPLETIONS: {"prompt": twenty_megabytes}}
    response = post_raw(client, endpoint, json.dumps(field[endpoint]).encode())
    assert_error(response, 413, param=None, code="request_too_large")


@pytest.mark.parametrize("endpoint", GENERATION_ENDPOINTS)
@pytest.mark.parametrize(
    "raw",
    [
        b'{"messages": [{"role": "user", "content": "\xff\xfe"}], "prompt": "\xff\xfe"}',  # bytes UTF-8 never uses
        b'{"messages": [{"role": "user", "content": "\xc3"}], "prompt": "\xc3"}',  # a sequence cut short
        b'{"messages": [{"role": "user", "content": "\xc0\xaf"}], "prompt": "\xc0\xaf"}',  # overlong "/"
        b'{"messages": [{"role": "user", "content": "\xed\xa0\x80"}], "prompt": "\xed\xa0\x80"}',  # a surrogate
        b'{"messages": [{"role": "user", "content": "\\ud800"}], "prompt": "\\ud800"}',  # an escaped lone one
        b'{"m\xe9ssages": []}',  # Latin-1 in a key
        b"\xef\xbb\xbf\xff",
    ],
    ids=["ff-fe", "truncated", "overlong", "surrogate", "escaped-surrogate", "latin1-key", "bom-then-ff"],
)
def test_invalid_utf8_is_400(client, endpoint, raw):
    assert_error(post_raw(client, endpoint, raw), 400, param=None)


DEPTH = 100_000


@pytest.mark.parametrize("endpoint", GENERATION_ENDPOINTS)
@pytest.mark.parametrize(
    "raw",
    [
        b"[" * DEPTH,
        b"[" * DEPTH + b"]" * DEPTH,
        b'{"a":' * DEPTH + b"1" + b"}" * DEPTH,
        b'{"messages": ' + b"[" * DEPTH + b"]" * DEPTH + b', "prompt": ' + b"[" * DEPTH + b"]" * DEPTH + b"}",
        b'{"messages": [{"role": "user", "content": "hi"}], "prompt": "hi", "json_schema": '
        + b'{"a":' * DEPTH
        + b"1"
        + b"}" * DEPTH
        + b"}",
    ],
    ids=["open-brackets", "balanced-brackets", "nested-objects", "nested-field", "nested-passthrough"],
)
def test_deeply_nested_json_is_400(client, endpoint, raw):
    assert_error(post_raw(client, endpoint, raw), 400, param=None)


@pytest.mark.parametrize("endpoint", GENERATION_ENDPOINTS)
def test_a_thousand_stop_strings_are_accepted(client, endpoint):
    stops = [f"stop word {index}" for index in range(1000)]
    assert_upstream_down(client.post(endpoint, json=with_field(endpoint, stop=stops)))


@pytest.mark.parametrize("endpoint", GENERATION_ENDPOINTS)
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "field, value",
    [
        ("max_tokens", -1),
        ("max_tokens", -(2**63)),
        ("n", 0),
        ("n", -1),
        ("n", 10_000),
    ],
)
def test_out_of_range_counts_are_400(client, endpoint, stream, field, value):
    """Refused up front as plain JSON, streamed or not."""
    response = client.post(endpoint, json=with_field(endpoint, stream=stream, **{field: value}))
    assert_error(response, 400, param=field)


def test_negative_max_completion_tokens_is_400(client):
    assert_error(client.post(CHAT, json=with_field(CHAT, max_completion_tokens=-1)), 400, param="max_completion_tokens")


@pytest.mark.parametrize("endpoint", GENERATION_ENDPOINTS)
@pytest.mark.parametrize("value", [0, 1, 10**12, 2**63, 2**64, 10**100])
def test_large_max_tokens_accepted_or_refused_never_500(client, endpoint, value):
    assert_accepted_or_refused(client.post(endpoint, json=with_field(endpoint, max_tokens=value)), "max_tokens")


@pytest.mark.parametrize("endpoint", GENERATION_ENDPOINTS)
def test_n_at_its_limit_is_accepted(client, endpoint):
    assert_upstream_down(client.post(endpoint, json=with_field(endpoint, n=16)))


def test_too_many_messages_is_400(client):
    assert_error(client.post(CHAT, json={"messages": OK_MESSAGES * 2049}), 400, param="messages")


# --- found by fuzzing, now fixed -----------------------------------------------------------------------------------


def test_completion_fan_out_is_limited(client):
    response = client.post(COMPLETIONS, json={"prompt": ["hi"] * 1000, "n": 16})
    assert_error(response, 400, param=("prompt", "n"))


@pytest.mark.parametrize(
    "endpoint, field, value",
    [
        (CHAT, "max_tokens", False),
        (CHAT, "max_tokens", "5"),
        (CHAT, "n", "2"),
        (CHAT, "seed", True),
        (CHAT, "stream", "true"),
        (CHAT, "stream", 1),
        (CHAT, "logprobs", "yes"),
        (CHAT, "parallel_tool_calls", 0.0),
        (CHAT, "temperature", "0.5"),
        (COMPLETIONS, "logprobs", False),
        (COMPLETIONS, "mirostat_tau", False),
        (COMPLETIONS, "prompt", [True]),
    ],
)
def test_wrongly_typed_scalars_are_refused(client, endpoint, field, value):
    response = client.post(endpoint, json=with_field(endpoint, **{field: value}))
    assert_error(response, 400, param=(field, f"{field}.0"))


@pytest.mark.parametrize("endpoint", GENERATION_ENDPOINTS)
@pytest.mark.parametrize(
    "fragment, param",
    [
        (b'"min_p": 1e400', "min_p"),
        (b'"typical_p": -1e400', "typical_p"),
        (b'"logit_bias": {"15043": 1e400}', ("logit_bias", "logit_bias.15043")),
        (b'"mirostat_eta": NaN', ("mirostat_eta", None)),
        (b'"dry_base": Infinity', ("dry_base", None)),
    ],
)
def test_non_finite_numbers_are_400(client, endpoint, fragment, param):
    body = json.dumps(VALID_BODY[endpoint]).encode()[:-1] + b", " + fragment + b"}"
    assert_error(post_raw(client, endpoint, body), 400, param=param)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": ["name"]},
        {"type": "object", "properties": "name"},
        {"$defs": "x"},
        {"definitions": [1]},
        {"type": {}},
        {"type": [[]]},
        {"type": ["string", {"type": "null"}]},
    ],
    ids=json.dumps,
)
def test_malformed_response_format_schema_is_400(client, stream, schema):
    response_format = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
    response = client.post(CHAT, json=with_field(CHAT, stream=stream, response_format=response_format))
    error = assert_error(response, 400)
    assert (error["param"] or "").startswith("response_format.json_schema"), error


@pytest.mark.parametrize("endpoint", GENERATION_ENDPOINTS)
def test_huge_logit_bias_token_id_is_400(client, endpoint):
    response = client.post(endpoint, json=with_field(endpoint, logit_bias={"9" * 4301: 1}))
    error = assert_error(response, 400)
    assert (error["param"] or "").startswith("logit_bias"), error
