"""How long a reply may be, and a chat fitted into the model's context: keep the conversation, size
the reply to what is left.

`effective_max_tokens` is the one step that decides a request's max_tokens before its prompt exists
(the client's, --max-tokens-limit, the model's default, override and cap); `fit` then sizes the reply
within the context from it (n_predict, the one value sent upstream).

`max_tokens` is an upper bound, as users of local models expect (clients made for hosted models
ask for 32,000 tokens from a model with a few thousand of context): the oldest turns are dropped
only when the prompt leaves less than a reply reserve (the smaller of max_tokens and a share of the
context), and the reply may use what the context leaves. `overflow="error"` is OpenAI's strict
behaviour instead: prompt + max_tokens must fit as asked.

What may be dropped (`droppable_turns`): the turns before the last user message, and the tool rounds
after it but the latest, so that an agent's session of one task and hundreds of tool rounds keeps
running; never a system message, the last user message, or half of a round. They are dropped in steps
(`drop_points`): each step drops about `Policy.drop_step` of the context more, so that the turns after
a drop extend the same prompt, and llama.cpp reuses its cache, until the next step.

Counting tokens needs a round trip to llama.cpp's /tokenize, so it is skipped when the prompt's
byte length already proves it fits (a token is never shorter than one byte), and the cut in a long
history is found by bisection over the steps: a few counts, not one per dropped message.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ContextLengthExceeded, InvalidRequest
from ..prompts import ChatPrompt
from ..settings import ERROR, TRUNCATE, Limits, ModelSettings, Policy

__all__ = ["ERROR", "TRUNCATE", "FittedPrompt", "Policy", "droppable_turns", "effective_max_tokens", "fit", "with_max_tokens"]

DEFAULT_POLICY = Policy()


CHARACTERS_PER_TOKEN = 4  # to size drop steps without counting: about right for English and code


TOKEN_FIELDS = ("max_tokens", "max_completion_tokens")  # a request's bounds on its reply (the latter wins)


def effective_max_tokens(request, model: ModelSettings, limits: Limits, *, bound: bool = False) -> int | None:
    """The most tokens the request's reply may have, before the context has its say (`fit`); None for
    no bound. In order: the client's own (max_completion_tokens, else max_tokens), held to
    --max-tokens-limit: over it, an API whose max_tokens is an upper bound (`bound`: Anthropic's and
    the Responses API's, whose clients ask for 32000 whatever the model) is lowered to it, any other
    refused (400); then the model's override, or its default when the client sent none; then the
    model's cap (its max_tokens)."""
    own = request.token_limit()
    if limits.max_tokens is not None and own is not None and own > limits.max_tokens:
        if not bound:
            raise InvalidRequest(f"max_tokens is {own}; the limit is {limits.max_tokens}", param="max_tokens", code="over_limit")
        request = request.model_copy(update={"max_tokens": limits.max_tokens})
    fields = schema_fields(request)
    values = {key: _configured(model, key, getattr(request, key)) for key in TOKEN_FIELDS if key in fields}
    cap = model.max_tokens
    if cap is not None:  # the model's max_tokens bounds both; a reply with neither gets the cap
        values = {
            key: cap if value is None and key == "max_tokens" or value is not None and value > cap else value
            for key, value in values.items()
        }
    completion = values.get("max_completion_tokens")
    return completion if completion is not None else values.get("max_tokens")


def _configured(model: ModelSettings, key: str, value: int | None) -> int | None:
    """The model's override of `key`, else the request's value, else the model's default."""
    if key in model.overrides:
        return model.overrides[key]
    return model.defaults.get(key) if value is None else value


def with_max_tokens(request, max_tokens: int | None):
    """The request bounded by `max_tokens` (effective_max_tokens'): its max_tokens, and its
    max_completion_tokens if it has one (an OpenAI-compatible upstream reads either)."""
    fields = schema_fields(request)
    update = {
        key: max_tokens for key in TOKEN_FIELDS if key in fields and (key == "max_tokens" or getattr(request, key) is not None)
    }
    if all(getattr(request, key) == value for key, value in update.items()):
        return request
    return request.model_copy(update=update)


@dataclass(frozen=True)
class FittedPrompt:
    prompt: ChatPrompt
    n_predict: int  # tokens to generate; -1 only when the context length is unknown
    dropped_messages: int
    dropped_tool_rounds: int = 0  # of the dropped turns, those that were an assistant's tool calls and their results


def fit(
    messages: list,
    render,
    count_tokens,
    context_length: int | None,
    max_tokens: int | None,
    policy: Policy = DEFAULT_POLICY,
    *,
    max_tokens_is_bound: bool = False,
    media_tokens=None,
) -> FittedPrompt:
    """`render(messages) -> ChatPrompt` with the oldest droppable turns removed as the policy says,
    and the tokens to generate; ContextLengthExceeded if even the shortest prompt does not fit.
    `max_tokens_is_bound` (Anthropic's max_tokens, which is required) keeps it a bound even under
    the strict policy. `media_tokens(text)`, if given, is what the images in a prompt's text take beyond
    their placeholders (count_tokens counts them already; the byte bound must too)."""
    prompt = render(messages)
    if context_length is None:
        return FittedPrompt(prompt, -1 if max_tokens is None else max_tokens, 0)
    prompt_bytes = len(prompt.text.encode()) + (media_tokens(prompt.text) if media_tokens else 0)
    if _fits_by_bytes(prompt_bytes, context_length, max_tokens, policy):
        # Without max_tokens, the room the bytes prove (at least the reply reserve): more would need
        # the count, and llama.cpp does not know a context length the configuration set lower.
        return FittedPrompt(prompt, context_length - prompt_bytes if max_tokens is None else max_tokens, 0)
    if policy.overflow == ERROR and not max_tokens_is_bound:
        return _fit_exactly(prompt, count_tokens, context_length, max_tokens)
    reserve = max(1, int(context_length * policy.reply_share))
    if max_tokens is not None:
        reserve = min(reserve, max(max_tokens, 1))
    step_size = int(context_length * policy.drop_step * CHARACTERS_PER_TOKEN)
    cut = _drop_oldest_turns(messages, render, count_tokens, context_length - reserve, step_size)
    room = context_length - cut.prompt_tokens
    if room < 1:
        raise ContextLengthExceeded(
            f"this model's context length is {context_length} tokens and the prompt needs {cut.prompt_tokens} "
            "after dropping every message that may be dropped",
            param="messages",
        )
    n_predict = room if max_tokens is None else min(max_tokens, room)
    return FittedPrompt(cut.prompt, n_predict, len(messages) - len(cut.kept), cut.tool_rounds(messages))


def _fits_by_bytes(prompt_bytes: int, context_length: int, max_tokens: int | None, policy: Policy) -> bool:
    """Whether the byte length proves the prompt fits as asked (a token is at least one byte): with
    max_tokens, prompt and reply; without, the prompt and the reply reserve (or one token, if strict)."""
    if max_tokens is not None:
        return prompt_bytes + max_tokens <= context_length
    if policy.overflow == ERROR:
        return prompt_bytes + 1 <= context_length
    return prompt_bytes + max(1, int(context_length * policy.reply_share)) <= context_length


def _fit_exactly(prompt: ChatPrompt, count_tokens, context_length: int, max_tokens: int | None) -> FittedPrompt:
    prompt_tokens = count_tokens(prompt.text)
    wanted = max_tokens if max_tokens is not None else 1
    if prompt_tokens + wanted > context_length:
        raise ContextLengthExceeded(
            f"this model's context length is {context_length} tokens; the prompt needs {prompt_tokens} "
            f"and max_tokens asks for {wanted}",
            param="messages",
        )
    return FittedPrompt(prompt, max_tokens if max_tokens is not None else context_length - prompt_tokens, 0)


@dataclass(frozen=True)
class _Cut:
    kept: list
    prompt: ChatPrompt
    prompt_tokens: int
    dropped: list[range]  # the groups of droppable_turns left out

    def tool_rounds(self, messages: list) -> int:
        return sum(1 for group in self.dropped if _calls_tools(messages[group.start]))


def _drop_oldest_turns(messages: list, render, count_tokens, token_budget: int, step_size: int) -> _Cut:
    """The prompt after dropping the fewest steps of oldest turns that bring it within `token_budget`
    (or every droppable turn), found by bisection over the steps."""
    groups = droppable_turns(messages)
    points = drop_points(messages, groups, step_size)
    measured: dict[int, _Cut] = {}

    def measure(point: int) -> _Cut:
        if point not in measured:
            dropped = groups[: points[point]]
            removed = {index for group in dropped for index in group}
            kept = [message for index, message in enumerate(messages) if index not in removed]
            prompt = render(kept)
            measured[point] = _Cut(kept, prompt, count_tokens(prompt.text), dropped)
        return measured[point]

    if len(points) == 1 or measure(0).prompt_tokens <= token_budget:
        return measure(0)
    low, high = 1, len(points) - 1
    while low < high:
        middle = (low + high) // 2
        if measure(middle).prompt_tokens <= token_budget:
            high = middle
        else:
            low = middle + 1
    return measure(low)


def drop_points(messages: list, groups: list[range], step_size: int) -> list[int]:
    """How many of the oldest `groups` a fit may drop: 0, then each count at which the groups dropped
    since the previous count reach `step_size` characters (every count when it is 0), and all of them.
    The points depend only on the oldest turns, which the next turns of a conversation share, so the
    next turn drops the same ones unless it needs another step."""
    points, since_last = [0], 0
    for count, group in enumerate(groups, 1):
        since_last += sum(_size(messages[index]) for index in group)
        if since_last >= step_size or count == len(groups):
            points.append(count)
            since_last = 0
    return points


def droppable_turns(messages: list) -> list[range]:
    """The turns that may be dropped, oldest first: the messages before the last user message, and the
    tool rounds after it but the latest (what the model acts on next); never a system message. An
    assistant's message goes together with the tool results that answer it: a template raises on an
    orphan call or result, and the model would be confused."""
    last_user = max((n for n, m in enumerate(messages) if _role(m) == "user"), default=None)
    if last_user is None:
        return _turns(messages, 0, len(messages))
    return _turns(messages, 0, last_user) + _turns(messages, last_user + 1, len(messages))[:-1]


def _turns(messages: list, start: int, end: int) -> list[range]:
    """messages[start:end] as turns: each message alone, but an assistant's with the results after it."""
    turns, position = [], start
    while position < end:
        if _role(messages[position]) in ("system", "developer"):
            position += 1
            continue
        following = position + 1
        if _role(messages[position]) in ("assistant", "tool", "function"):
            while following < end and _role(messages[following]) in ("tool", "function"):
                following += 1
        turns.append(range(position, following))
        position = following
    return turns


def _size(message: dict) -> int:
    """A message's length in characters (content, called names and arguments), which sizes the drop steps."""
    functions = [call.get("function") or {} for call in message.get("tool_calls") or ()]
    return len(message.get("content") or "") + sum(
        len(str(f.get("name", ""))) + len(str(f.get("arguments", ""))) for f in functions
    )


def _calls_tools(message: dict) -> bool:
    return _role(message) == "assistant" and bool(message.get("tool_calls") or message.get("function_call"))


def _role(message: dict) -> str:
    return message.get("role", "")


def schema_fields(request) -> dict:
    """The fields of the request's schema: pydantic's class attribute `__pydantic_fields__`, which its
    `model_fields` returns through a property and a class method, two calls each time it is read (several
    times on a request's way to its first token: issue 54)."""
    return type(request).__pydantic_fields__
