"""Chat completions: messages -> prompt (through the model's formatter) -> generations."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .. import reasoning
from ..errors import InvalidRequest
from ..prompts import merge_stops, normalise_messages
from ..prompts.render import render_messages
from ..protocol import ChatCompletionRequest
from . import context as context_fit
from . import generation, passthrough, tool_calling
from .models import ServedModel
from .shapes import ChatShape

log = logging.getLogger("api_like_oai")


def render_prompt(request: ChatCompletionRequest, model: ServedModel, messages: list[dict] | None = None,
                  tool_plan: tool_calling.ToolPlan | None = None):
    """The ChatPrompt this request (or these of its messages) becomes; what /v1/internal/chat-prompt shows."""
    if request.add_generation_prompt and request.continue_final_message \
            and "add_generation_prompt" in request.model_fields_set:
        raise InvalidRequest("add_generation_prompt and continue_final_message cannot both be true",
                             param="continue_final_message")
    if messages is None:
        messages = request_messages(request)
    return render_messages(model.formatter(), messages, list(tool_plan.tools) if tool_plan else None,
                           add_generation_prompt=request.add_generation_prompt,
                           continue_final_message=request.continue_final_message,
                           template_variables=request.template_variables())


def plan_tools(request: ChatCompletionRequest, model: ServedModel) -> tool_calling.ToolPlan | None:
    return tool_calling.plan(request, model.tool_call_format())


def tool_constraint(request: ChatCompletionRequest, model: ServedModel, tool_plan) -> dict:
    """The upstream fields that hold the model to its tool-call format; none when the request
    brings its own grammar or JSON constraint (llama.cpp takes one), or asks for no tools."""
    if tool_plan is None:
        return {}
    brings_its_own = request.grammar is not None or request.json_schema is not None \
        or (request.response_format is not None and request.response_format.type != "text")
    grammar_allowed = not brings_its_own and (tool_plan.forces_call() or model.lazy_grammar())
    return tool_calling.constraint(tool_plan, grammar_allowed)


def request_messages(request: ChatCompletionRequest) -> list[dict]:
    """The request's messages as plain dicts with text content, as formatters take them."""
    return normalise_messages([m.model_dump(exclude_none=True) for m in request.messages])


def fit_to_context(request: ChatCompletionRequest, model: ServedModel,
                   tool_plan: tool_calling.ToolPlan | None = None,
                   max_tokens_is_bound: bool = False) -> context_fit.FittedPrompt:
    """The prompt, with the oldest turns dropped if the conversation does not fit the context."""
    return context_fit.fit(request_messages(request), lambda kept: render_prompt(request, model, kept, tool_plan),
                           lambda text: len(model.client.tokenize(text, add_special=True)),
                           model.context_length(), request.token_limit(), model.settings.context_policy,
                           max_tokens_is_bound=max_tokens_is_bound)


def upstream_payload(request: ChatCompletionRequest, prompt) -> dict:
    payload = {"prompt": prompt.text, "stop": merge_stops(prompt.stop, request.stop_list()),
               "stream": True, **request.sampling_payload()}
    if request.response_format is not None:
        payload |= request.response_format.to_llamacpp()
    if request.logprobs:
        payload["n_probs"] = max(request.top_logprobs or 0, 1)
    return payload


@dataclass
class ChatGeneration:
    """A chat request under way: the request as the model adjusted it, its tools, its events (the
    first already received), the tool-call transformation to apply to them, and response headers."""

    request: ChatCompletionRequest
    tool_plan: tool_calling.ToolPlan | None
    choice_count: int
    events: Iterator
    transform: Callable | None
    headers: dict[str, str]


def start_chat(request: ChatCompletionRequest, model: ServedModel, context: generation.Context, *,
               max_tokens_is_bound: bool = False) -> ChatGeneration:
    """Render, fit and send a chat request: what every API that speaks in chat turns (chat completions,
    Anthropic's Messages, the Responses API) generates through. `max_tokens_is_bound`: see context.fit."""
    request = model.adjust(request)
    if model.openai is not None:   # an OpenAI-compatible upstream renders, fits and parses on its own
        events = generation.Primed(passthrough.chat_events(request, model, context.note_upstream))
        return ChatGeneration(request, None, 1, events, None, {})
    tool_plan = plan_tools(request, model)
    fitted = fit_to_context(request, model, tool_plan, max_tokens_is_bound)
    if context.log_prompts:
        log.info("request %s prompt: %r", context.record.request_id if context.record else "-", fitted.prompt.text)
    constraint = tool_constraint(request, model, tool_plan)
    payload = upstream_payload(request, fitted.prompt) | {"n_predict": fitted.n_predict} | constraint
    headers = {"X-Messages-Dropped": str(fitted.dropped_messages)} if fitted.dropped_messages else {}
    if fitted.n_predict >= 0:
        headers["X-Max-Tokens-Effective"] = str(fitted.n_predict)
    choice_count = request.n or 1
    events = generation.start(model.pool.generate, [("/completion", payload)] * choice_count, context)
    transform = event_transform(request, model, fitted.prompt.text, tool_plan, "grammar" in constraint, choice_count)
    return ChatGeneration(request, tool_plan, choice_count, events, transform, headers)


def chat_completion(request: ChatCompletionRequest, model: ServedModel, model_name: str,
                    context: generation.Context):
    """(answer, headers): the answer is a dict, or an iterator of SSE bytes when `request.stream`."""
    chat = start_chat(request, model, context)
    request, tool_plan = chat.request, chat.tool_plan
    role = model.template_choice.response_role
    shape = ChatShape(model_name, role, logprobs=bool(request.logprobs), top_logprobs=request.top_logprobs or 0,
                      legacy_functions=bool(tool_plan and tool_plan.legacy_functions),
                      include_usage=request.include_usage(),
                      service_tier="default" if request.service_tier else None)
    echo_text = _echo_prefix(request, role)
    prefixes = {index: echo_text for index in range(chat.choice_count)} if echo_text else None
    return generation.answer(request, chat.events, shape, chat.choice_count, context, prefixes, chat.transform), \
        chat.headers


def event_transform(request: ChatCompletionRequest, model: ServedModel, prompt_text: str, tool_plan,
                    grammar_in_force: bool, choice_count: int):
    """What turns the model's text into the answer's parts: the thought split out first, then the
    tool calls parsed out of the rest; None when the text is the answer as it is."""
    steps = []
    markers = model.reasoning_markers(request.reasoning_format)
    if markers is not None:
        steps.append(reasoning.split_reasoning(markers, reasoning.prompt_opens_thought(prompt_text, markers)))
    if tool_plan is not None:
        # With a grammar in force the calls cannot go astray, so their arguments may stream as written;
        # a fold has nothing to stream, so a call the end cuts short comes back as text there.
        steps.append(tool_calling.parse_tool_calls(tool_plan, grammar_in_force and bool(request.stream), choice_count))
    if not steps:
        return None
    return functools.reduce(lambda inner, outer: lambda events: outer(inner(events)), steps)


def _echo_prefix(request: ChatCompletionRequest, role: str) -> str:
    last = request.messages[-1]
    if not request.echo or last.role != role:
        return ""
    return normalise_messages([last.model_dump(exclude_none=True)])[0]["content"]
