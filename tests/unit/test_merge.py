"""services/merge.py: several generations read as one, each by a thread of its own."""

from __future__ import annotations

import threading

import pytest

from api_like_oai.backends.events import GenerationEvent
from api_like_oai.errors import ProxyError
from api_like_oai.services.merge import merged


def endless(index: int, gate: threading.Event, closed: list):
    """A generation that waits at `gate` for each token after the first, as one waits on its upstream."""
    try:
        while True:
            yield GenerationEvent(text="x", index=index)
            gate.wait()
    finally:
        closed.append(index)


def test_closing_a_merged_answer_ends_every_generation_in_its_own_thread():
    gate, closed = threading.Event(), []
    already_running = set(threading.enumerate())  # other tests' servers: not this answer's threads
    events = merged([lambda index=index: endless(index, gate, closed) for index in range(3)])
    assert sorted(next(events).index for _ in range(3)) == [0, 1, 2]
    events.close()  # the client left or stop-generation: generations are mid-wait in their threads
    gate.set()  # their next token arrives; each then sees it was stopped and closes itself
    for thread in set(threading.enumerate()) - already_running:
        thread.join(timeout=5)
    assert sorted(closed) == [0, 1, 2]


def failing(index: int):
    yield GenerationEvent(text="x", index=index)
    raise RuntimeError("not a ProxyError")


def test_an_unexpected_error_in_one_choice_ends_the_answer_with_an_error():
    with pytest.raises(ProxyError):
        list(merged([lambda: failing(0), lambda: iter([GenerationEvent(finish_reason="stop", index=1)])]))


def test_all_choices_are_started_before_the_first_event_is_given_out():
    arrived = threading.Barrier(3, timeout=5)

    def start(index: int):
        arrived.wait()  # each choice's request waits until all three were sent
        return iter([GenerationEvent(finish_reason="stop", index=index)])

    events = merged([lambda index=index: start(index) for index in range(3)])
    assert sorted(event.index for event in events) == [0, 1, 2]
