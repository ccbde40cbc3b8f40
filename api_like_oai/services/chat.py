"""Chat completions: messages -> prompt (through the model's formatter) -> generations."""

from __future__ import annotations

import logging

from ..errors import InvalidRequest
from ..prompts import merge_stops, normalise_messages
from ..protocol import ChatCompletionRequest
from . import context as context_fit
from . import generation
from .models import ServedModel
from .shapes import ChatShape

log = logging.getLogger("api_like_oai")


def render_prompt(request: ChatCompletionRequest, model: ServedModel, messages: list[dict] | None = None):
    """The ChatPrompt this request (or these of its messages) becomes; what /v1/internal/chat-prompt shows."""
    if request.add_generation_prompt and request.continue_final_message \
            and "add_generation_prompt" in request.model_fields_set:
        raise InvalidRequest("add_generation_prompt and continue_final_message cannot both be true",
                             param="continue_final_message")
    if messages is None:
        messages = request_messages(request)
    return model.formatter().render(
        messages, add_generation_prompt=request.add_generation_prompt,
        continue_final_message=request.continue_final_message, tools=request.tools)


def request_messages(request: ChatCompletionRequest) -> list[dict]:
    """The request's messages as plain dicts with text content, as formatters take them."""
    return normalise_messages([m.model_dump(exclude_none=True) for m in request.messages])


def fit_to_context(request: ChatCompletionRequest, model: ServedModel) -> context_fit.FittedPrompt:
    """The prompt, with the oldest turns dropped if the conversation does not fit the context."""
    return context_fit.fit(request_messages(request), lambda kept: render_prompt(request, model, kept),
                           lambda text: len(model.client.tokenize(text, add_special=True)),
                           model.context_length(), request.token_limit())


def check_supported(request: ChatCompletionRequest) -> None:
    if request.tools:
        raise InvalidRequest("tools are not supported by this proxy yet", param="tools")
    if request.tool_choice not in (None, "none"):
        raise InvalidRequest("tool_choice is not supported by this proxy yet", param="tool_choice")


def upstream_payload(request: ChatCompletionRequest, prompt) -> dict:
    payload = {"prompt": prompt.text, "stop": merge_stops(prompt.stop, request.stop_list()),
               "stream": True, **request.sampling_payload()}
    if request.response_format is not None:
        payload |= request.response_format.to_llamacpp()
    if request.logprobs:
        payload["n_probs"] = max(request.top_logprobs or 0, 1)
    return payload


def chat_completion(request: ChatCompletionRequest, model: ServedModel, model_name: str,
                    context: generation.Context):
    """(answer, headers): the answer is a dict, or an iterator of SSE bytes when `request.stream`."""
    request = model.adjust(request)
    check_supported(request)
    fitted = fit_to_context(request, model)
    if context.log_prompts:
        log.info("request %s prompt: %r", context.record.request_id if context.record else "-", fitted.prompt.text)
    payload = upstream_payload(request, fitted.prompt) | {"n_predict": fitted.n_predict}
    headers = {"X-Messages-Dropped": str(fitted.dropped_messages)} if fitted.dropped_messages else {}
    role = model.template_choice.response_role
    shape = ChatShape(model_name, role, logprobs=bool(request.logprobs), top_logprobs=request.top_logprobs or 0)
    choice_count = request.n or 1
    events = generation.start(model.pool.generate, [("/completion", payload)] * choice_count, context)
    echo_text = _echo_prefix(request, role)
    prefixes = {index: echo_text for index in range(choice_count)} if echo_text else None
    return generation.answer(request, events, shape, choice_count, context, prefixes), headers


def _echo_prefix(request: ChatCompletionRequest, role: str) -> str:
    last = request.messages[-1]
    if not request.echo or last.role != role:
        return ""
    return normalise_messages([last.model_dump(exclude_none=True)])[0]["content"]
