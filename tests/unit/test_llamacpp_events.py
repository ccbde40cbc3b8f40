"""Both generations of llama-server's JSON become the same GenerationEvents."""

from __future__ import annotations

import math

import pytest

from api_like_oai.backends.events import PromptProgress
from api_like_oai.backends.llamacpp import completion_event
from api_like_oai.errors import UpstreamError

TODAY_FINAL = {
    "content": "",
    "id_slot": 3,
    "stop": True,
    "stop_type": "limit",
    "stopping_word": "",
    "tokens_predicted": 3,
    "tokens_evaluated": 5,
}
LEGACY_FINAL = {
    "content": "",
    "slot_id": 0,
    "stop": True,
    "stopped_eos": False,
    "stopped_word": False,
    "stopped_limit": True,
    "tokens_predicted": 3,
    "tokens_evaluated": 5,
}


@pytest.mark.parametrize("final", [TODAY_FINAL, LEGACY_FINAL])
def test_final_event_of_either_generation(final):
    event = completion_event(final)
    assert (event.finish_reason, event.prompt_tokens, event.completion_tokens) == ("length", 5, 3)


@pytest.mark.parametrize(
    "fields",
    [
        {"stop_type": "eos"},
        {"stop_type": "word", "stopping_word": "\n"},
        {"stopped_eos": True},
        {"stopped_word": True, "stopping_word": "x"},
    ],
)
def test_eos_and_stop_words_finish_with_stop(fields):
    assert completion_event({"content": "", "stop": True, **fields}).finish_reason == "stop"


def test_token_events_carry_text_and_the_counts_so_far():
    """So that a generation the proxy ends early (stop-generation, a model repeating its tool
    calls) still reports its usage."""
    event = completion_event({"content": " Paris", "stop": False, "id_slot": -1, "tokens_predicted": 1, "tokens_evaluated": 5})
    assert (event.text, event.finish_reason, event.prompt_tokens, event.completion_tokens) == (" Paris", None, 5, 1)
    assert completion_event({"content": " Paris", "stop": False}).completion_tokens is None  # 2023 server


def test_probabilities_old_and_new_format():
    new = completion_event(
        {
            "content": " a",
            "stop": False,
            "completion_probabilities": [
                {
                    "token": " a",
                    "logprob": -0.5,
                    "top_logprobs": [{"token": " a", "logprob": -0.5}, {"token": " b", "logprob": -1.5}],
                }
            ],
        }
    )
    old = completion_event(
        {
            "content": " a",
            "stop": False,
            "completion_probabilities": [
                {"content": " a", "probs": [{"tok_str": " a", "prob": math.exp(-0.5)}, {"tok_str": " b", "prob": math.exp(-1.5)}]}
            ],
        }
    )
    for event in (new, old):
        (token,) = event.logprobs
        assert token.token == " a" and token.logprob == pytest.approx(-0.5)
        assert [t for t, _, _ in token.top] == [" a", " b"]


def test_an_error_object_raises():
    with pytest.raises(UpstreamError, match="boom"):
        completion_event({"error": {"code": 500, "message": "boom"}})


@pytest.mark.parametrize(
    ("fields", "cached"),
    [
        ({"timings": {"cache_n": 4000, "prompt_n": 96}, "tokens_cached": 4120}, 4000),  # 2025 on: cache_n
        ({"timings": {"prompt_n": 96}}, 4000),  # before cache_n: the prompt less what was evaluated
        ({"tokens_cached": 4120}, None),  # the slot's whole cache, generated tokens included: not it
        ({}, None),
    ],
)
def test_the_prompt_tokens_taken_from_the_cache(fields, cached):
    final = {"content": "", "stop": True, "stop_type": "eos", "tokens_predicted": 24, "tokens_evaluated": 4096}
    assert completion_event({**final, **fields}).cached_tokens == cached


def test_a_token_event_tells_the_cached_tokens_when_timings_come_with_every_token():
    """Asked for with timings_per_token: Anthropic's message_start needs the number before the end."""
    event = completion_event(
        {"content": " a", "stop": False, "tokens_predicted": 1, "tokens_evaluated": 50, "timings": {"cache_n": 42, "prompt_n": 8}}
    )
    assert (event.text, event.cached_tokens) == (" a", 42)
    assert completion_event({"content": " a", "stop": False, "tokens_evaluated": 50}).cached_tokens is None


# What the pinned llama-server (0.3.36) streams while it reads a prompt, asked with return_progress.
PROGRESS_LINE = {
    "index": 0,
    "content": "",
    "tokens": [0],
    "stop": False,
    "id_slot": -1,
    "tokens_predicted": 0,
    "tokens_evaluated": 1090,
    "prompt_progress": {"total": 1090, "cache": 90, "processed": 590, "time_ms": 6665},
}


def test_prompt_progress_becomes_a_progress_event_not_text():
    event = completion_event(PROGRESS_LINE)
    assert event == PromptProgress(total=1090, cached=90, processed=590, elapsed_ms=6665.0)
    assert (event.fraction, event.done, event.finish_reason) == (0.5, False, None)  # the cached part is no work
    assert (
        completion_event({**PROGRESS_LINE, "prompt_progress": {"total": 8, "cache": 8, "processed": 8, "time_ms": 1}}).fraction
        == 1.0
    )


def test_a_token_next_to_progress_is_a_token():
    assert completion_event({**PROGRESS_LINE, "content": " word"}).text == " word"


def test_malformed_progress_is_the_upstreams_error():
    with pytest.raises(UpstreamError):
        completion_event({**PROGRESS_LINE, "prompt_progress": [1, 2]})
