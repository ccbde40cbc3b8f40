"""The prompt tokens llama.cpp took from its cache, in every API's usage, streamed and folded."""

from __future__ import annotations

import json

import pytest

from api_like_oai.backends.events import GenerationEvent
from api_like_oai.dialects.anthropic_shape import MessagesShape
from api_like_oai.dialects.openai_shape import ChatShape, CompletionShape
from api_like_oai.dialects.responses import ResponsesRequest
from api_like_oai.dialects.responses_shape import ResponsesShape
from api_like_oai.services import generation

# As llama.cpp tells them: with timings_per_token the first token event already knows the cache hit.
EVENTS = [
    GenerationEvent(text="Hel", prompt_tokens=900, completion_tokens=1, cached_tokens=870),
    GenerationEvent(text="lo", prompt_tokens=900, completion_tokens=2),
    GenerationEvent(finish_reason="stop", prompt_tokens=900, completion_tokens=2, cached_tokens=870),
]


def streamed(shape) -> list[dict]:
    frames = b"".join(generation.stream(iter(EVENTS), shape, 1, generation.Context(generation.InFlight())))
    return [json.loads(line[6:]) for line in frames.split(b"\n") if line.startswith(b"data: {")]


def folded(shape) -> dict:
    return generation.fold(iter(EVENTS), shape, 1, generation.Context(generation.InFlight()))


@pytest.mark.parametrize("shape", [lambda: ChatShape("m", include_usage=True), lambda: CompletionShape("m", include_usage=True)])
def test_openai_usage_carries_cached_tokens_streamed_and_folded(shape):
    usage = {"prompt_tokens": 900, "completion_tokens": 2, "total_tokens": 902, "prompt_tokens_details": {"cached_tokens": 870}}
    assert folded(shape())["usage"] == usage
    assert streamed(shape())[-1]["usage"] == usage


def test_anthropic_usage_reads_the_cache_in_message_start_and_message_delta():
    events = streamed(MessagesShape("claude"))
    start, delta = events[0], next(e for e in events if e["type"] == "message_delta")
    usage = {
        "input_tokens": 30,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 870,
        "output_tokens_details": {"thinking_tokens": 0},
        "server_tool_use": None,
    }
    # the message's usage also says how much was written to the cache, by lifetime: nothing
    message_only = {
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "service_tier": "standard",
        "speed": "standard",
        "inference_geo": None,
    }
    assert start["message"]["usage"] == usage | message_only | {"output_tokens": 0}
    assert delta["usage"] == usage | {"output_tokens": 2}
    assert folded(MessagesShape("claude"))["usage"] == usage | message_only | {"output_tokens": 2}


def test_responses_usage_carries_cached_tokens():
    usage = folded(ResponsesShape("gpt", ResponsesRequest(input="hi")))["usage"]
    assert usage["input_tokens"] == 900 and usage["input_tokens_details"]["cached_tokens"] == 870
    completed = streamed(ResponsesShape("gpt", ResponsesRequest(input="hi")))[-1]
    assert completed["response"]["usage"] == usage


def test_choices_add_up_and_an_upstream_that_does_not_tell_counts_zero():
    usage = generation.UsageCounter()
    for event in (
        GenerationEvent(prompt_tokens=10, cached_tokens=8, index=0),
        GenerationEvent(prompt_tokens=10, cached_tokens=9, index=1),
        GenerationEvent(prompt_tokens=10, cached_tokens=10, index=1),
    ):  # the latest per choice
        usage.add(event)
    assert usage.to_dict()["prompt_tokens_details"] == {"cached_tokens": 18}
    silent = generation.UsageCounter()
    silent.add(GenerationEvent(prompt_tokens=10))
    assert silent.to_dict()["prompt_tokens_details"] == {"cached_tokens": 0}
