"""The Responses API's response object, field by field, without a server: every field of Open Responses'
ResponseResource is in every response object (each streamed event's and the folded answer), with the
spec's type, and the values used: sampling after the model's defaults and overrides, tools and
formats echoed whole. Checked also as the spec's own types, OpenAI's SDK and /openapi.json read it."""

from __future__ import annotations

import json

import pytest
from openai.types.responses import Response

from api_like_oai.backends.events import GenerationEvent
from api_like_oai.backends.llamacpp import LLAMA_CPP_SAMPLING, LlamaCppClient, UpstreamProps, _default_sampling
from api_like_oai.backends.openai import OpenAIUpstream
from api_like_oai.backends.pool import UpstreamPool
from api_like_oai.dialects.responses import ResponsesRequest
from api_like_oai.dialects.responses_answers import ResponseObject
from api_like_oai.dialects.responses_shape import ResponsesShape
from api_like_oai.errors import UpstreamError
from api_like_oai.protocol import ChatCompletionRequest
from api_like_oai.services.models import OPENAI_SAMPLING, ServedModel
from api_like_oai.settings import ModelSettings

from ..open_responses import WEATHER_TOOL, resource, spec_event
from .test_dialect_shapes import EVENTS, fold, stream

NULLABLE_STR, NULLABLE_INT = (str, type(None)), (int, type(None))
# Each field of the spec's ResponseResource and the types it may take as Python reads the JSON (the
# sampling values are written as floats, 0.0 and not 0, as OpenAI writes them).
RESOURCE_FIELDS = {
    "id": str,
    "object": str,
    "created_at": int,
    "completed_at": NULLABLE_INT,
    "status": str,
    "incomplete_details": (dict, type(None)),
    "model": str,
    "previous_response_id": NULLABLE_STR,
    "instructions": NULLABLE_STR,
    "output": list,
    "error": (dict, type(None)),
    "tools": list,
    "tool_choice": (str, dict),
    "truncation": str,
    "parallel_tool_calls": bool,
    "text": dict,
    "top_p": float,
    "presence_penalty": float,
    "frequency_penalty": float,
    "top_logprobs": int,
    "temperature": float,
    "reasoning": (dict, type(None)),
    "usage": (dict, type(None)),
    "max_output_tokens": NULLABLE_INT,
    "max_tool_calls": NULLABLE_INT,
    "store": bool,
    "background": bool,
    "service_tier": str,
    "metadata": dict,
    "safety_identifier": NULLABLE_STR,
    "prompt_cache_key": NULLABLE_STR,
}
SAMPLING = {"temperature": 0.7, "top_p": 0.9, "presence_penalty": 0.5, "frequency_penalty": 0.25}


def shape(**request) -> ResponsesShape:
    return ResponsesShape("gpt", ResponsesRequest.model_validate({"input": "hi", **request}), sampling=lambda: dict(SAMPLING))


def response_objects(the_shape: ResponsesShape, events=EVENTS) -> dict[str, dict]:
    """Every response object of a stream by its event's type, and the fold of another shape as "folded"."""
    objects = {event["type"]: event["response"] for event in stream(the_shape, events) if "response" in event}
    return objects | {"folded": fold(shape(), events)}


def assert_every_field_typed(response: dict) -> None:
    missing = sorted(set(RESOURCE_FIELDS) - set(response))
    assert not missing, f"missing: {missing}"
    for name, types in RESOURCE_FIELDS.items():
        assert isinstance(response[name], types), (name, response[name])
        assert not (types is int and isinstance(response[name], bool)), name


@pytest.mark.parametrize("kind", ["response.created", "response.in_progress", "response.completed", "folded"])
def test_every_response_object_has_every_field_of_the_spec_with_its_type(kind):
    response = response_objects(shape())[kind]
    assert_every_field_typed(response)
    resource(response)
    Response.model_validate(response)
    ResponseObject.model_validate(response)
    assert {key: response[key] for key in SAMPLING} == SAMPLING
    assert (response["truncation"], response["top_logprobs"], response["service_tier"]) == ("disabled", 0, "default")
    assert (response["completed_at"] is None) == (kind in ("response.created", "response.in_progress"))


def test_every_streamed_event_is_the_specs_event_type():
    for event in stream(shape(tools=[WEATHER_TOOL | {"name": "get_weather"}])):
        assert spec_event(event) is not None, event["type"]


def test_incomplete_and_failed_responses_have_every_field_too():
    cut = [
        GenerationEvent(text="Hel", prompt_tokens=2, completion_tokens=1),
        GenerationEvent(finish_reason="length", prompt_tokens=2, completion_tokens=1),
    ]
    incomplete = stream(shape(), cut)[-1]
    failed = shape().error_chunk(UpstreamError("the upstream went away"))
    for event, status in ((incomplete, "incomplete"), (failed, "failed")):
        assert event["type"] == f"response.{status}"
        assert_every_field_typed(event["response"])
        resource(event["response"])
        Response.model_validate(event["response"])
        assert (event["response"]["status"], event["response"]["completed_at"]) == (status, None)


def test_completed_at_is_when_the_response_first_completed():
    the_shape = shape()
    streamed = stream(the_shape)[-1]["response"]
    assert streamed["completed_at"] == the_shape.completed_at >= the_shape.created_at
    assert fold(the_shape)["completed_at"] == the_shape.completed_at


def test_settings_the_request_sent_are_echoed():
    sent = {
        "truncation": "auto",
        "safety_identifier": "u-1",
        "prompt_cache_key": "conv-1",
        "user": "me",
        "instructions": "Be brief.",
        "max_output_tokens": 50,
        "max_tool_calls": 2,
        "parallel_tool_calls": False,
        "metadata": {"k": "v"},
        "reasoning": {"effort": "low", "summary": "auto"},
    }
    response = response_objects(shape(**sent))["response.completed"]
    assert {key: response[key] for key in sent} == sent
    resource(response)


def test_a_function_tool_is_echoed_whole_with_a_boolean_strict():
    bare = {"type": "function", "name": "ping"}
    strict = WEATHER_TOOL | {"strict": True}
    custom = {"type": "custom", "name": "apply_patch", "description": "Patch files."}
    response = response_objects(shape(tools=[bare, strict, WEATHER_TOOL, custom]))["response.completed"]
    assert response["tools"] == [
        bare | {"description": None, "parameters": None, "strict": False},
        strict,
        WEATHER_TOOL | {"strict": False},
        custom,
    ]
    ResponseObject.model_validate(response)


@pytest.mark.parametrize(
    "sent, echoed",
    [
        (
            {"type": "json_schema", "schema": {"type": "object"}},
            {"type": "json_schema", "name": "response", "description": None, "schema": {"type": "object"}, "strict": True},
        ),
        (
            {"type": "json_schema", "name": "city", "description": "A city.", "schema": {"type": "object"}, "strict": False},
            {"type": "json_schema", "name": "city", "description": "A city.", "schema": {"type": "object"}, "strict": False},
        ),
        ({"type": "json_object"}, {"type": "json_object"}),
    ],
)
def test_a_text_format_is_echoed_whole(sent, echoed):
    response = response_objects(shape(text={"format": sent}))["response.completed"]
    assert response["text"] == {"format": echoed}


def test_without_a_model_the_sampling_values_are_llama_cpps_defaults_under_the_requests():
    request = ResponsesRequest.model_validate({"input": "hi", "temperature": 0.2})
    response = stream(ResponsesShape("gpt", request))[-1]["response"]
    assert {key: response[key] for key in LLAMA_CPP_SAMPLING} == LLAMA_CPP_SAMPLING | {"temperature": 0.2}
    assert isinstance(response["temperature"], float)


# --- the sampling values used -------------------------------------------------------------------


def served_model(props: UpstreamProps | None = None, kind: str = "llamacpp", **settings) -> ServedModel:
    url = "http://127.0.0.1:9"
    # The model's upstream as app.build_registry makes it for `kind` (ServedModel takes it since issue 41).
    upstream = OpenAIUpstream(url) if kind == "openai" else UpstreamPool([LlamaCppClient(url)])
    model = ServedModel(ModelSettings(name="m", upstreams=(url,), kind=kind, **settings), upstream)
    if model.facts is not None:
        model.facts.known_soon = lambda: props  # what /props said, without a server
    return model


def props_with(sampling: dict) -> UpstreamProps:
    return UpstreamProps(
        chat_template=None, bos_token="", eos_token="", context_length=4096, model_path=None, total_slots=1, sampling=sampling
    )


def chat(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest(messages=[{"role": "user", "content": "hi"}], **fields)


def test_sampling_used_is_override_then_request_then_default_then_upstream():
    model = served_model(
        props_with({"temperature": 0.6, "top_p": 0.8, "presence_penalty": 0.1}),
        defaults={"top_p": 0.7, "frequency_penalty": 0.3},
        overrides={"presence_penalty": 0.4},
    )
    used = model.sampling_used(chat(temperature=0.2, top_p=0.5, presence_penalty=1.0))
    assert used == {"temperature": 0.2, "top_p": 0.5, "presence_penalty": 0.4, "frequency_penalty": 0.3}
    assert model.sampling_used(chat()) == {"temperature": 0.6, "top_p": 0.7, "presence_penalty": 0.4, "frequency_penalty": 0.3}
    adjusted = model.adjust(chat(temperature=0.2, top_p=0.5, presence_penalty=1.0))
    assert {key: getattr(adjusted, key) for key in used} == used  # what reaches llama.cpp


def test_sampling_used_falls_back_to_llama_cpps_or_openais_defaults():
    assert served_model(None).sampling_used(chat()) == LLAMA_CPP_SAMPLING
    assert served_model(props_with({})).sampling_used(chat(temperature=1)) == LLAMA_CPP_SAMPLING | {"temperature": 1.0}
    assert served_model(kind="openai").sampling_used(chat()) == OPENAI_SAMPLING


@pytest.mark.parametrize(
    "settings, sampling",
    [
        (
            {
                "n_ctx": 4096,
                "params": {"temperature": 0.800000011920929, "top_p": 0.949999988079071, "presence_penalty": 0, "top_k": 40},
            },
            {"temperature": 0.8, "top_p": 0.95, "presence_penalty": 0.0},
        ),
        (
            {"n_ctx": 4096, "temperature": 0.7, "frequency_penalty": 0.1, "top_p": True},
            {"temperature": 0.7, "frequency_penalty": 0.1},
        ),
        ({"n_ctx": 4096}, {}),
    ],
)
def test_props_default_sampling_is_read_from_either_generation_of_llama_server(settings, sampling):
    assert _default_sampling(settings) == sampling
    assert all(isinstance(value, float) for value in _default_sampling(settings).values())


def test_openapi_documents_every_field_of_the_resource():
    documented = ResponseObject.model_json_schema()
    assert set(RESOURCE_FIELDS) <= set(documented["properties"])
    assert set(RESOURCE_FIELDS) - {"conversation"} <= set(documented["required"])
    json.dumps(documented)


def test_a_copy_with_other_tools_offers_its_own_tools():
    from api_like_oai.dialects.responses import ResponsesRequest

    def function(name):
        return {"type": "function", "name": name, "parameters": {"type": "object"}}

    request = ResponsesRequest.model_validate({"model": "m", "input": "hi", "tools": [function("a")]})
    assert [offered.name for offered in request.toolbox().offered] == ["a"]
    other_tools = ResponsesRequest.model_validate({"model": "m", "input": "hi", "tools": [function("b")]}).tools
    copied = request.model_copy(update={"tools": other_tools})
    assert [offered.name for offered in copied.toolbox().offered] == ["b"]
    assert [offered.name for offered in request.toolbox().offered] == ["a"]
