"""Progress events through the one event path: read off the front into the record, keep-alives in a
stream (and none in a fold), a stop during the prefill, and nothing of them in the answer."""

from __future__ import annotations

import json

import pytest

from api_like_oai import sse
from api_like_oai.backends.events import GenerationEvent, PromptProgress
from api_like_oai.dialects.openai_shape import ChatShape, CompletionShape
from api_like_oai.observability import Metrics, RequestRecord
from api_like_oai.services import generation
from api_like_oai.services.inflight import Context, InFlight

PROGRESS = [PromptProgress(total=10, cached=0, processed=n, elapsed_ms=n * 100) for n in (0, 5, 10)]
TOKENS = [
    GenerationEvent(text=" Hi", prompt_tokens=10, completion_tokens=1),
    GenerationEvent(text="!", prompt_tokens=10, completion_tokens=2),
    GenerationEvent(finish_reason="stop", prompt_tokens=10, completion_tokens=2),
]


def context() -> Context:
    return Context(InFlight(), RequestRecord("/v1/chat/completions", Metrics(), model="m"))


def test_a_fold_reads_the_progress_into_the_record_and_not_into_the_answer():
    ctx = context()
    answer = generation.fold(iter(PROGRESS + TOKENS), ChatShape("m"), 1, ctx)
    assert answer["choices"][0]["message"]["content"] == " Hi!"
    assert (ctx.record.prefill, ctx.record.phase) == (PROGRESS[-1], "generating")
    registry = ctx.record.metrics.registry
    assert registry.get_sample_value("api_like_oai_prefill_seconds_sum", {"model": "m"}) == 1.0  # llama.cpp's 1000 ms


def test_a_stream_sends_a_keepalive_per_progress_event_after_a_silence(monkeypatch):
    monkeypatch.setattr(sse, "KEEPALIVE_SECONDS", 0.0)
    frames = list(generation.stream(iter(PROGRESS + TOKENS), ChatShape("m"), 1, context()))
    assert frames[1:4] == [sse.KEEPALIVE_COMMENT] * 3  # after the role chunk, before the first token
    texts = [json.loads(f[6:])["choices"][0]["delta"].get("content") for f in frames if f.startswith(b"data: {")]
    assert [text for text in texts if text] == [" Hi", "!"]


@pytest.mark.parametrize("events", [PROGRESS + TOKENS, TOKENS])
def test_a_quick_prompt_gets_no_keepalive(events):
    assert sse.KEEPALIVE_COMMENT not in list(generation.stream(iter(events), ChatShape("m"), 1, context()))


def test_a_stop_during_the_prefill_ends_the_answer_before_any_token():
    ctx = context()

    def upstream():
        yield PROGRESS[0]
        ctx.record.stop()  # /v1/internal/requests' view of it: the stop button
        yield PROGRESS[1]
        yield from TOKENS  # not reached

    answer = generation.fold(upstream(), ChatShape("m"), 1, ctx)
    assert (answer["choices"][0]["message"]["content"], answer["choices"][0]["finish_reason"]) == ("", "stop")


@pytest.mark.parametrize("make", [lambda: ChatShape("m"), lambda: CompletionShape("m")])
def test_a_streams_first_text_frame_is_made_while_the_prompt_is_read_not_on_the_tokens_way(make):
    """Issue 54: the frame pattern of the text deltas is built before the upstream's first event is
    asked for (llama.cpp reads the prompt meanwhile), so the first token only fills it in."""
    shape, made_before_first_event = make(), []

    def upstream():
        made_before_first_event.append(shape._text_pattern is not None)
        yield from TOKENS

    frames = list(generation.stream(upstream(), shape, 1, context()))
    assert made_before_first_event == [True]
    assert any(b'" Hi"' in frame for frame in frames)
