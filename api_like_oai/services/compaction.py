"""Compaction: a conversation's turns made into one `compaction` item the model wrote itself.

`POST /v1/responses/compact` (`compact`) takes a conversation as `POST /v1/responses` would continue it
(its input, and the stored turns `previous_response_id` names) and answers the user messages, then one
compaction item whose `encrypted_content` is the model's summary of everything, sealed as reasoning
items are (sealing.py, its own purpose): only this installation reads it back, and a later request
carrying it gets the summary as a user turn (dialects/responses_translation.SUMMARY_PREFIX). The summary
is a generation like any other: admitted and counted against the key, fitted to the context (a
conversation too long for it loses its oldest turns first, as a chat does), folded.

`context_management: [{"type": "compaction", "compact_threshold": N}]` on `POST /v1/responses` (`auto`)
compacts the same way when the turn's prompt passes N tokens: the compaction item goes after the
turn's input (so it stands for everything before it but the user messages: the translation reads it
so) and leads the answer's output, announced by `response.compaction.compacting`; the model then
answers the compacted conversation. A later turn continuing that response gets the compacted form.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Iterator

from ..backends.events import GenerationEvent, ItemStep
from ..dialects.responses import COMPACTION_PURPOSE, CompactRequest, ResponsesRequest
from ..observability import stage
from ..protocol import ChatCompletionRequest
from ..sealing import Seal
from ..settings import Limits
from .admission import Admission, DialectRequest, client_request
from .chat import chat_completion, count_prompt_tokens
from .fitting import effective_max_tokens, with_max_tokens
from .inflight import Context
from .scope import Scope
from .stored_items import input_items
from .stored_responses import Turn

# The instruction the model gets after the conversation. Written for small local models too: plain,
# one task, what to keep, no preamble.
SUMMARY_PROMPT = (
    "Stop here and summarize the conversation above, so that it can be continued from your summary alone. "
    "Keep: what the user asked for and why; what has been done and found (files, commands, tool results, "
    "decisions, errors); what is left to do; names, numbers and facts needed to go on. "
    "Write only the summary, as short plain sentences or bullet points."
)
SUMMARY_MAX_TOKENS = 1024


def compact(request: CompactRequest, admission: Admission, scope: Scope, seal: Seal, context: Context) -> dict:
    """The compacted conversation: {"id", "object": "response.compaction", "created_at", "output", "usage"}."""
    conversation = ResponsesRequest.model_construct(
        model=request.model,
        input=request.input if request.input is not None else [],
        instructions=request.instructions,
        previous_response_id=request.previous_response_id,
        prompt_cache_key=request.prompt_cache_key,
        store=False,
    )
    with client_request():
        turn = Turn.load(conversation, scope, seal, context.record)
        chat = summary_request(turn.translation().chat)
    items = turn.history + (turn.input or input_items(conversation.input))
    summary, usage = summarize(chat, request, admission, context)
    return {
        "id": "resp_" + secrets.token_hex(16),
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": [item for item in items if _user_message(item)] + [compaction_item(seal, summary)],
        "usage": usage,
    }


def summary_request(chat: ChatCompletionRequest, max_tokens: int = SUMMARY_MAX_TOKENS) -> ChatCompletionRequest:
    """The conversation's chat request asking for its summary: SUMMARY_PROMPT after it, no tools."""
    fields = chat.model_dump(exclude_none=True, by_alias=True)
    for name in ("tools", "tool_choice", "parallel_tool_calls", "response_format", "stream", "stream_options"):
        fields.pop(name, None)
    fields["messages"] = [*fields["messages"], {"role": "user", "content": SUMMARY_PROMPT}]
    fields |= {"max_tokens": max_tokens, "temperature": 0.0}
    return ChatCompletionRequest.model_validate(fields)


def summarize(chat: ChatCompletionRequest, api_request, admission: Admission, context: Context) -> tuple[str, dict]:
    """(the model's summary, the Responses usage of writing it): generated and folded as a chat is."""
    dialect = admission.dialect(api_request, chat)
    answer, _ = chat_completion(dialect.chat, dialect.model, dialect.model_name, context)
    counted = answer.get("usage") or {}
    prompt, completion = counted.get("prompt_tokens", 0), counted.get("completion_tokens", 0)
    usage = {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": (counted.get("prompt_tokens_details") or {}).get("cached_tokens", 0)},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }
    return (answer["choices"][0]["message"].get("content") or "").strip(), usage


def compaction_item(seal: Seal, summary: str) -> dict:
    return {
        "id": "cmp_" + secrets.token_hex(16),
        "type": "compaction",
        "encrypted_content": seal.wrap(COMPACTION_PURPOSE, summary),
    }


def _user_message(item: dict) -> bool:
    return item.get("type", "message") == "message" and item.get("role") == "user"


def auto(
    request: ResponsesRequest, dialect: DialectRequest, turn: Turn, seal: Seal, context: Context, limits: Limits
) -> Turn | None:
    """The turn compacted first, when its request asks for it and its prompt passes the threshold (the
    compaction item made, as an item of the answer's); None otherwise. The summary's generation goes
    through the request's door, as its answer's does (one admission, each generation's tokens metered),
    its length held to the model's and the proxy's limits (`limits`) as any reply's."""
    threshold = request.compact_threshold(dialect.model.context_length)  # asked only when compaction is
    if threshold is None:
        return None
    with stage(context.record, "admission"):
        if count_prompt_tokens(dialect.chat, dialect.model) <= threshold:
            return None
        chat = summary_request(dialect.chat)
        chat = with_max_tokens(chat, effective_max_tokens(chat, dialect.model.settings, limits, bound=True))
    answer, _ = chat_completion(chat, dialect.model, dialect.model_name, context)
    item = compaction_item(seal, (answer["choices"][0]["message"].get("content") or "").strip())
    return dataclasses.replace(turn, input=turn.input or input_items(request.input), made=[*turn.made, item])


def made_first(made: list[dict]):
    """An event transformation putting the items made before the model was asked first in the answer."""

    def transform(events: Iterator[GenerationEvent]) -> Iterator[GenerationEvent]:
        for item in made:
            yield GenerationEvent(item=ItemStep(item, done=False))
            yield GenerationEvent(item=ItemStep(item, done=True))
        yield from events

    return transform
