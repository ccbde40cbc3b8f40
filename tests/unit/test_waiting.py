"""The waiting step (services/waiting.py), per API: a stream whose model is loading gets its shape's
keep-alive at once and per interval, then the answer made once; a refusal is the shape's own error
event. (tests/e2e/test_models_on_demand.py runs the same against real llama-servers.)"""

from __future__ import annotations

import json

import pytest

from api_like_oai.dialects.anthropic_shape import MessagesShape
from api_like_oai.dialects.ollama_shape import OllamaShape
from api_like_oai.dialects.openai_shape import ChatShape
from api_like_oai.dialects.responses import ResponsesRequest
from api_like_oai.dialects.responses_shape import ResponsesShape
from api_like_oai.errors import UpstreamUnavailable
from api_like_oai.services import waiting
from api_like_oai.services.inflight import Context, InFlight, Waiting

SHAPES = {
    "openai": lambda: ChatShape("m"),
    "anthropic": lambda: MessagesShape("m"),
    "responses": lambda: ResponsesShape("m", ResponsesRequest(input="hi")),
    "ollama": lambda: OllamaShape("m"),
}


def plain(frames: list[bytes]) -> list:
    """The frames with Ollama's time stamps left out (each of its lines carries the time it was made)."""
    return [
        {key: value for key, value in json.loads(frame).items() if key != "created_at"}
        if frame.startswith(b'{"model"')
        else frame
        for frame in frames
    ]


def context_waiting_for(*answers) -> tuple[Context, list]:
    """A request's context whose model load answers wait(timeout) with `answers` in turn (an exception
    is raised); the timeouts asked are recorded."""
    asked, pending = [], list(answers)

    def wait(timeout: float) -> bool:
        asked.append(timeout)
        answer = pending.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    holder = Waiting()
    holder.pending = wait
    return Context(InFlight(), waiting=holder), asked


@pytest.mark.parametrize("api", SHAPES)
def test_a_stream_waiting_for_its_model_gets_its_keep_alives_then_the_answer_made_once(api):
    shape = SHAPES[api]()
    context, asked = context_waiting_for(False, False, True)
    made = []

    def proceed():
        made.append(True)
        return iter([b"the answer"]), {"X-Header": "lost: the answer has started"}

    answer, headers = waiting.after_wait(context, lambda: shape, proceed)
    assert made == [] and headers == {}  # nothing generated before the stream is read
    frames = list(answer)
    assert plain(frames) == plain([shape.keepalive] * 3 + [b"the answer"]) and made == [True]
    assert asked == [waiting.KEEPALIVE_SECONDS] * 3
    assert waiting.after_wait(context, lambda: shape, lambda: ("at once", {})) == ("at once", {})  # the wait is spent


def test_each_api_keeps_alive_its_own_way():
    keepalives = {api: make().keepalive for api, make in SHAPES.items()}
    assert keepalives["openai"] == keepalives["responses"] == b": keep-alive\n\n"
    assert keepalives["anthropic"] == b'event: ping\ndata: {"type": "ping"}\n\n'
    piece = json.loads(keepalives["ollama"])  # a line Ollama's clients read as a piece of the answer
    assert piece["done"] is False and piece["message"] == {"role": "assistant", "content": ""}
    assert json.loads(OllamaShape("m", "generate").keepalive)["response"] == ""


@pytest.mark.parametrize("api", SHAPES)
def test_a_load_that_fails_is_the_apis_own_error_event(api):
    shape = SHAPES[api]()
    context, _ = context_waiting_for(False, UpstreamUnavailable("model m failed to start: exit code 1"))
    answer, _ = waiting.after_wait(context, lambda: shape, lambda: pytest.fail("generated after a failed load"))
    frames = list(answer)
    assert plain(frames[:2]) == plain([shape.keepalive] * 2) and len(frames) == 3
    error = frames[2].decode()
    assert "failed to start" in error
    expected = {
        "openai": 'data: {"error":',
        "anthropic": 'event: error\ndata: {"type":"error","error":{"type":"overloaded_error"',
        "responses": "event: response.failed\n",
        "ollama": '{"error":"model m failed',
    }
    assert error.startswith(expected[api]), error


def test_a_request_whose_model_is_ready_is_answered_directly():
    context = Context(InFlight(), waiting=Waiting())
    assert waiting.after_wait(context, lambda: ChatShape("m"), lambda: ({"answer": 1}, {"H": "v"})) == ({"answer": 1}, {"H": "v"})
    assert waiting.after_wait(
        Context(InFlight()), lambda: pytest.fail("a shape made for no wait"), lambda: ("no waiting", {})
    ) == ("no waiting", {})
