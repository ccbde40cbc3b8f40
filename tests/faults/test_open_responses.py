"""The Open Responses compliance suite's cases against the proxy in front of a scripted Hermes-format
model (tests/open_responses.py): every answer, streamed and not, is the spec's ResponseResource and
every event its event type, and each means what the suite checks, the image case too (the scripted
server says it has a vision projector). Stored responses read back, failed and
incomplete ones, and the sampling values the answer reports are checked the same way."""

from __future__ import annotations

import pytest
import requests

from ..open_responses import (
    CASES,
    IMAGE_CASE,
    WEATHER_ARGUMENTS,
    WEATHER_TOOL,
    request_of,
    resource,
    scripted_weather,
    spec_event,
)
from .test_responses_stream import events_of

# What the scripted llama-server says its defaults are (/props default_generation_settings.params).
UPSTREAM_SAMPLING = {"temperature": 0.6, "top_p": 0.9, "presence_penalty": 0.25, "frequency_penalty": 0.5}


@pytest.fixture(scope="module")
def fake(start_fake):
    """The scripted model, which the conftest's `proxy` stands in front of."""
    return start_fake(
        **scripted_weather(
            default_generation_settings={"n_ctx": 8192, "params": UPSTREAM_SAMPLING},
            modalities={"vision": True},
            media_marker="<__media_scripted__>",
        )
    )


@pytest.fixture
def weather(fake):
    """The upstream, set back to its script after a test that changed how it answers."""
    yield fake
    fake.behaviour, fake.stop_type = "ok", "eos"


def post(proxy, body: dict) -> requests.Response:
    return requests.post(proxy.url + "/v1/responses", json=body, headers={"Authorization": "Bearer test"}, timeout=30)


def answer_of(proxy, body: dict) -> tuple[dict, list[dict]]:
    """(the response object, the stream's events): of the last event when streamed, as the suite reads it."""
    reply = post(proxy, body)
    if not body.get("stream"):
        assert reply.status_code == 200, reply.text
        return reply.json(), []
    events = events_of(reply)
    return events[-1]["response"], events


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_each_case_of_the_suite_passes(proxy, case_id):
    case, streamed, item_type = CASES[case_id]
    response, events = answer_of(proxy, request_of(case, streamed))
    resource(response)
    assert response["status"] == "completed" and response["output"]
    assert item_type in [item["type"] for item in response["output"]]
    for event in events:
        assert spec_event(event) is not None, event["type"]  # every event a type of the spec's, valid
    if streamed and item_type == "function_call":
        types = [event["type"] for event in events]
        assert {"response.function_call_arguments.delta", "response.function_call_arguments.done"} <= set(types)
        for kind in ("response.output_item.added", "response.output_item.done"):
            assert any(e["type"] == kind and e["item"]["type"] == "function_call" for e in events)


@pytest.mark.parametrize("streamed", [False, True])
def test_a_function_call_is_the_one_the_model_wrote_with_its_tool_echoed_whole(proxy, streamed):
    response, _ = answer_of(proxy, request_of(CASES["tool-calling"][0], streamed))
    [call] = [item for item in response["output"] if item["type"] == "function_call"]
    assert (call["name"], call["status"]) == ("get_weather", "completed")
    assert call["arguments"].replace(" ", "") == '{"location":"SanFrancisco,CA"}'
    assert response["tools"] == [WEATHER_TOOL | {"strict": False}]
    assert WEATHER_ARGUMENTS["location"] in call["arguments"]


@pytest.mark.parametrize("streamed", [False, True])
def test_the_image_case_is_answered_with_the_image_sent_upstream(proxy, fake, streamed):
    response, events = answer_of(proxy, request_of(IMAGE_CASE, streamed))
    resource(response)
    assert response["status"] == "completed" and "message" in [item["type"] for item in response["output"]]
    assert all(spec_event(event) is not None for event in events)
    sent = fake.requests[-1]["prompt"]
    assert sent["prompt_string"].count("<__media_scripted__>") == len(sent["multimodal_data"]) == 1


def test_every_response_object_of_a_stream_is_a_resource(proxy):
    _, events = answer_of(proxy, request_of(CASES["streaming-response"][0], True))
    objects = [event["response"] for event in events if "response" in event]
    assert [event["type"] for event in events if "response" in event] == [
        "response.created",
        "response.in_progress",
        "response.completed",
    ]
    for response in objects:
        resource(response)
    assert [response["completed_at"] is None for response in objects] == [True, True, False]
    assert objects[-1]["completed_at"] >= objects[-1]["created_at"]


@pytest.mark.parametrize(
    "sent, reported",
    [
        ({}, UPSTREAM_SAMPLING),
        ({"temperature": 0.1, "top_p": 0.5}, UPSTREAM_SAMPLING | {"temperature": 0.1, "top_p": 0.5}),
    ],
)
def test_sampling_values_are_those_used(proxy, fake, sent, reported):
    """Left out, the upstream's own defaults (its /props); sent, the request's, which reach llama.cpp."""
    response, _ = answer_of(proxy, request_of(CASES["basic-response"][0], False) | sent)
    assert {key: response[key] for key in reported} == reported
    assert {key: fake.requests[-1][key] for key in sent} == sent


def test_request_settings_are_echoed(proxy):
    sent = {
        "truncation": "auto",
        "safety_identifier": "user-42",
        "prompt_cache_key": "conv-7",
        "service_tier": "flex",
        "metadata": {"k": "v"},
    }
    response, _ = answer_of(proxy, request_of(CASES["basic-response"][0], True) | sent)
    resource(response)
    assert {key: response[key] for key in sent} == sent | {"service_tier": "default"}  # the tier it ran on
    default = answer_of(proxy, request_of(CASES["basic-response"][0], False))[0]
    assert (default["truncation"], default["safety_identifier"], default["prompt_cache_key"]) == ("disabled", None, None)
    assert default["top_logprobs"] == 0


def test_a_stored_response_reads_back_as_a_resource(proxy):
    for streamed in (False, True):
        answered, _ = answer_of(proxy, request_of(CASES["tool-calling"][0], streamed))
        assert answered["store"] is True
        kept = requests.get(f"{proxy.url}/v1/responses/{answered['id']}", timeout=10).json()
        resource(kept)
        assert kept == answered


def test_a_response_cut_by_max_output_tokens_is_an_incomplete_resource(proxy, weather):
    weather.stop_type = "limit"
    response, events = answer_of(proxy, request_of(CASES["basic-response"][0], True) | {"max_output_tokens": 3})
    assert events[-1]["type"] == "response.incomplete" and spec_event(events[-1])
    assert (response["status"], response["completed_at"]) == ("incomplete", None)
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}


def test_a_generation_failing_after_the_start_is_a_failed_resource(proxy, weather):
    weather.behaviour = "die_mid_stream"
    response, events = answer_of(proxy, request_of(CASES["basic-response"][0], True))
    assert events[-1]["type"] == "response.failed" and spec_event(events[-1])
    assert (response["status"], response["completed_at"], response["error"]["code"]) == ("failed", None, "server_error")
