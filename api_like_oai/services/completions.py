"""Text completions: the prompt goes to llama.cpp as it is; with `suffix`, to /infill."""

from __future__ import annotations

import functools

from ..backends import routing
from ..backends.upstream import Upstream, UpstreamRequest
from ..dialects.openai_shape import CompletionShape
from ..errors import ContextLengthExceeded, InvalidRequest
from ..protocol import CompletionRequest
from . import generation, waiting
from .chat import routed
from .models import ServedModel


def prompts_of(request: CompletionRequest) -> list:
    """One upstream prompt per choice: a string, a token-id list, or each of a list of those."""
    prompt = request.prompt
    if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)):
        return [prompt]
    if not prompt:
        return [""]
    return list(prompt)


def check_supported(request: CompletionRequest, prompts: list) -> None:
    if request.best_of not in (None, 1):
        raise InvalidRequest("best_of is not supported", param="best_of")
    if request.suffix is not None and not all(isinstance(p, str) for p in prompts):
        raise InvalidRequest("suffix (fill-in-the-middle) needs a text prompt", param="suffix")


def upstream_request(request: CompletionRequest, prompt) -> tuple[str, dict]:
    """(llama.cpp path, payload) for one prompt: /infill when a suffix is given, else /completion.

    No `return_progress` (the chat path asks for it, for its keep-alives while a long prompt is read):
    tried for issue 54, its events cost the first token more than starting the response on the first
    of them saved (0.2 to 1 ms more through the proxy, side by side on a busy two-core machine)."""
    max_tokens = request.token_limit()
    payload = {
        "stop": request.stop_list(),
        "stream": True,
        "n_predict": -1 if max_tokens is None else max_tokens,
        **request.sampling_payload(),
    }
    if request.logprobs:
        payload["n_probs"] = request.logprobs
    if request.suffix is not None:
        return "/infill", {**payload, "input_prefix": prompt, "input_suffix": request.suffix, "prompt": ""}
    return "/completion", {**payload, "prompt": prompt}


def completion(request: CompletionRequest, model: ServedModel, model_name: str, context: generation.Context):
    """(answer, headers), as chat.chat_completion: the answer is a dict, or an iterator of SSE bytes
    when `request.stream` (after the waiting step, if its model is still loading); no headers."""
    return waiting.after_wait(
        context,
        functools.partial(CompletionShape, model_name),
        functools.partial(_completion, request, model, model_name, context),
    )


def _completion(request: CompletionRequest, model: ServedModel, model_name: str, context: generation.Context):
    request = model.adjust(request)
    upstream = context.door(model)
    prompts = [p for p in prompts_of(request) for _ in range(request.n or 1)]
    check_supported(request, prompts)
    if request.token_limit() is None:  # use the rest of the context, not llama.cpp's endless -1
        request = request.model_copy(update={"max_tokens": room_left(model, prompts, upstream)})
    session = routing.session_key(context.session, request.user)
    events = generation.start(
        routed(upstream, context),
        [typed(*upstream_request(request, p), session) for p in prompts],
        context,
        folded=not request.stream,
    )
    shape = CompletionShape(model_name, request.logprobs, request.include_usage())  # made while the upstream reads the prompt
    prefixes = {index: p for index, p in enumerate(prompts) if isinstance(p, str)} if request.echo else None
    return generation.answer(request, events, shape, len(prompts), context, prefixes), {}


def typed(path: str, payload: dict, session: str | None) -> UpstreamRequest:
    """The upstream request of one prompt, routed by that prompt (for /infill, the text before the cursor:
    llama.cpp builds the prompt around it) and the client's session."""
    prompt = payload["input_prefix"] if path == "/infill" else payload["prompt"]
    return UpstreamRequest.of(path, payload, routing.Affinity(prompt, session))


def room_left(model: ServedModel, prompts: list, upstream: Upstream | None = None) -> int | None:
    context_length = model.context_length()
    if context_length is None:
        return None
    upstream = upstream or model.upstream
    longest = max(len(p) if isinstance(p, list) else len(upstream.tokenize(p, add_special=True)) for p in prompts)
    if longest >= context_length:
        raise ContextLengthExceeded(
            f"this model's context length is {context_length} tokens; the prompt has {longest}", param="prompt"
        )
    return context_length - longest
