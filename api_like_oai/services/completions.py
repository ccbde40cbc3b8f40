"""Text completions: the prompt goes to llama.cpp as it is."""

from __future__ import annotations

from ..errors import InvalidRequest
from ..prompts import merge_stops
from ..protocol import CompletionRequest
from . import generation
from .models import ServedModel
from .shapes import CompletionShape


def prompts_of(request: CompletionRequest) -> list:
    """One upstream prompt per choice: a string, a token-id list, or each of a list of those."""
    prompt = request.prompt
    if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)):
        return [prompt]
    if not prompt:
        return [""]
    return list(prompt)


def completion(request: CompletionRequest, model: ServedModel, model_name: str, stop: tuple = ()):
    """The answer: a dict, or an iterator of SSE bytes when `request.stream`."""
    if request.stream_options is not None and not request.stream:
        raise InvalidRequest("stream_options is only allowed when stream is true", param="stream_options")
    if request.best_of not in (None, 1):
        raise InvalidRequest("best_of is not supported", param="best_of")
    prompts = [p for p in prompts_of(request) for _ in range(request.n or 1)]
    base_payload = {"stop": merge_stops(stop, request.stop_list()), "stream": bool(request.stream),
                    **request.sampling_payload()}
    if request.logprobs:
        base_payload["n_probs"] = request.logprobs
    shape = CompletionShape(model_name, request.logprobs)
    starters = [_starter(model, {**base_payload, "prompt": p}, index) for index, p in enumerate(prompts)]
    events = generation.merged(starters)
    prefix = prompts[0] if request.echo and isinstance(prompts[0], str) and len(prompts) == 1 else ""
    if request.stream:
        include_usage = bool(request.stream_options and request.stream_options.include_usage)
        return generation.stream(events, shape, len(prompts), include_usage, prefix)
    return generation.fold(events, shape, len(prompts), prefix)


def _starter(model: ServedModel, payload: dict, index: int):
    return lambda: model.client.complete(payload, index=index)
