"""Models served by an OpenAI-compatible upstream (`kind: openai`): the request goes through as it is,
with the alias replaced by the upstream's model name."""

from __future__ import annotations

from ..backends.openai import relay
from .models import ServedModel


def passthrough(api_request, model: ServedModel, model_name: str, path: str):
    """The upstream's answer: a dict (with our model name), or its event stream byte for byte."""
    body = api_request.model_dump(exclude_unset=True) | {"model": model.settings.upstream_model or model.name}
    response = model.openai.forward(path, body)
    if body.get("stream"):
        return relay(response)
    with response:
        answer = response.json()
    answer["model"] = model_name
    return answer
