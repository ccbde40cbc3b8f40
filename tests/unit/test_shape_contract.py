"""Every shape holds to the contract generation.stream and generation.fold drive it by
(dialects/shape.Shape): each member there, each method taking the Protocol's parameters by name,
the attributes of the right type. A shape added anywhere in the package is found and held too."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import api_like_oai
from api_like_oai.dialects.anthropic_shape import MessagesShape
from api_like_oai.dialects.ollama_shape import OllamaShape
from api_like_oai.dialects.openai_shape import ChatShape, CompletionShape
from api_like_oai.dialects.responses import ResponsesRequest
from api_like_oai.dialects.responses_shape import ResponsesShape
from api_like_oai.dialects.shape import Shape
from api_like_oai.services.scope import Scope
from api_like_oai.services.stored_responses import Turn

PROTOCOL_METHODS = [name for name, member in vars(Shape).items() if inspect.isfunction(member) and not name.startswith("_")]
PROTOCOL_ATTRIBUTES = {"end": bytes, "keepalive": bytes, "usage_at_start": bool}


def stored_shape() -> ResponsesShape:
    """A continued turn's shape: the same class, with the turn's writer as its keeper."""
    shape, writer = Turn(Scope(None, None), ResponsesRequest(input="hi", previous_response_id="resp_1")).shape("gpt")
    assert shape.keeper is writer is not None
    return shape


SHAPES = {
    ChatShape: lambda: ChatShape("m"),
    CompletionShape: lambda: CompletionShape("m"),
    MessagesShape: lambda: MessagesShape("claude"),
    ResponsesShape: lambda: ResponsesShape("gpt", ResponsesRequest(input="hi")),
    OllamaShape: lambda: OllamaShape("llama3.2"),
}
MADE = {"stored ResponsesShape": stored_shape, **{shape.__name__: make for shape, make in SHAPES.items()}}


def test_the_protocol_names_what_generation_uses():
    assert set(PROTOCOL_METHODS) == {
        "frame",
        "openings",
        "content_frame",
        "prepare_text",
        "chunks",
        "closings",
        "error_chunk",
        "response",
    }
    assert set(Shape.__annotations__) == set(PROTOCOL_ATTRIBUTES)


@pytest.mark.parametrize("make", MADE.values(), ids=list(MADE))
def test_every_shape_holds_to_the_protocol(make):
    shape = make()
    assert isinstance(shape, Shape)
    for name in PROTOCOL_METHODS:
        wanted = list(inspect.signature(getattr(Shape, name)).parameters)[1:]  # without self
        assert list(inspect.signature(getattr(shape, name)).parameters) == wanted, name
    for name, kind in PROTOCOL_ATTRIBUTES.items():
        # keepalive may be the shape's own (Ollama's names the model); the others are the class's
        assert isinstance(getattr(shape if name == "keepalive" else type(shape), name), kind), name


def test_every_shape_in_the_package_is_held_to_it():
    """Classes named ...Shape that answer (those with `response`), wherever they are defined."""
    found = set()
    for module in pkgutil.walk_packages(api_like_oai.__path__, "api_like_oai."):
        if not module.name.startswith(("api_like_oai.dialects.", "api_like_oai.services.")):
            continue
        for name, member in vars(importlib.import_module(module.name)).items():
            if (
                inspect.isclass(member)
                and name.endswith("Shape")
                and member.__module__ == module.name
                and member is not Shape
                and "response" in vars(member)
            ):
                found.add(member)
    assert found == set(SHAPES)
