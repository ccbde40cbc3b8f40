"""Tool calling for one chat request: which tools, which format, the grammar sent upstream, and the
event transformation that turns the model's text into tool-call deltas (for streams and folds alike)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from ..backends.events import GenerationEvent
from ..digests import DigestCache, digest
from ..errors import InvalidRequest
from ..offload import off_the_loop
from ..protocol import ChatCompletionRequest
from ..tools import grammar as gbnf
from ..tools.formats import FORMATS, ToolFormat
from ..tools.parser import ToolCallDelta, ToolCallParser


@dataclass(frozen=True)
class ToolPlan:
    """What a request with tools needs: the tools as OpenAI dicts, the choice, the format."""

    tools: tuple[dict, ...]
    choice: str  # "auto", "required", or the name of the one function to call
    parallel: bool
    format: ToolFormat
    legacy_functions: bool  # the request used `functions`: answer with `function_call`
    digest: bytes | None = field(default=None, compare=False)  # of what the grammar follows (digests.py)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(tool["function"]["name"] for tool in self.tools)

    def forces_call(self) -> bool:
        return self.choice != "auto"


def plan(request: ChatCompletionRequest, format_name: str) -> ToolPlan | None:
    """The tool plan of `request`, or None when it has no tools or asks for none to be called."""
    definitions = [function for _, function in request.function_definitions()]
    legacy = bool(request.functions)
    raw_choice = request.function_call if legacy else request.tool_choice
    if not definitions or raw_choice == "none":
        return None
    choice = getattr(getattr(raw_choice, "function", raw_choice), "name", None) or raw_choice or "auto"
    # The fields as they are (iterating a model is a shallow dump: ten times cheaper than model_dump).
    tools = tuple(
        {"type": "function", "function": {name: value for name, value in function if value is not None}}
        for function in definitions
    )
    # A named function is called once, as OpenAI does; the deprecated functions never ran in parallel.
    parallel = choice in ("auto", "required") and not legacy and request.parallel_tool_calls is not False
    # What the grammar follows: the names and parameters (the latter digested when they were checked).
    names = [function.name for function in definitions]
    key = (
        digest(names, request.parameters_digest.hex(), choice, parallel, format_name)
        if request.parameters_digest is not None
        else None
    )
    return ToolPlan(tools, choice, parallel, FORMATS[format_name], legacy, key)


GRAMMARS = DigestCache(max_entries=32)


def constraint(tool_plan: ToolPlan, grammar_allowed: bool) -> dict:
    """The llama.cpp /completion fields that hold the model to the format: special marker tokens
    always sent as text; when `grammar_allowed` (the request brings no constraint of its own, and
    a call is required or the upstream knows lazy grammars), a grammar from the first token when a
    call is required, else one that starts at a call's trigger (lazy)."""
    fields = {"preserved_tokens": list(tool_plan.format.preserved_tokens)} if tool_plan.format.preserved_tokens else {}
    if not grammar_allowed:
        return fields
    # Agents send the same tools every turn: built once per worker, and off the event loop.
    fields["grammar"] = GRAMMARS.get(tool_plan.digest, lambda: off_the_loop(build_grammar, tool_plan))
    if not tool_plan.forces_call():
        fields |= {"grammar_lazy": True, "grammar_triggers": tool_plan.format.lazy_triggers()}
    return fields


def build_grammar(tool_plan: ToolPlan) -> str:
    """GBNF for the format's calls, each a JSON object of a tool's name and its valid arguments."""
    builder = gbnf.GrammarBuilder()
    tool_format = tool_plan.format
    calls = []
    for number, tool in enumerate(tool_plan.tools):
        function = tool["function"]
        if tool_plan.choice not in ("auto", "required") and function["name"] != tool_plan.choice:
            continue
        arguments_rule = _arguments_rule(builder, function, _parameters_field(tool_plan, number))
        calls.append(
            builder.rule(
                f"{function['name']}-call",
                " ".join(
                    (
                        '"{"',
                        gbnf.WS,
                        gbnf.json_literal("name"),
                        gbnf.WS,
                        '":"',
                        gbnf.WS,
                        gbnf.json_literal(function["name"]),
                        gbnf.WS,
                        '","',
                        gbnf.WS,
                        gbnf.json_literal(tool_format.arguments_key),
                        gbnf.WS,
                        '":"',
                        gbnf.WS,
                        arguments_rule,
                        gbnf.WS,
                        '"}"',
                    )
                ),
            )
        )
    call_rule = builder.rule("call", " | ".join(calls))
    return builder.render(tool_format.grammar_root(call_rule, tool_plan.parallel))


def _arguments_rule(builder: gbnf.GrammarBuilder, function: dict, field: str) -> str:
    """The grammar rule of a function's arguments; a 400 naming the field (down to the keyword) when
    its schema cannot be followed or is past a bound."""
    parameters = function.get("parameters") or {"type": "object", "properties": {}}
    try:
        # The parameters passed check_size when the request was validated (protocol.check_parameters).
        return builder.schema(_closed(parameters), f"{function['name']}-arguments", size_checked=True)
    except gbnf.SchemaError as exc:
        raise InvalidRequest(
            f"function {function['name']!r}: {exc.message}", param=f"{field}.{exc.path}" if exc.path else field
        ) from exc
    except RecursionError:  # the builder recurses only to MAX_DEPTH; a deeper stack must still not be a 500
        raise InvalidRequest(f"function {function['name']!r}: the schema nests too deeply to compile", param=field) from None


def _parameters_field(tool_plan: ToolPlan, number: int) -> str:
    """Where the request held the tool's parameters (the deprecated functions had no `function` level)."""
    return f"functions.{number}.parameters" if tool_plan.legacy_functions else f"tools.{number}.function.parameters"


def _closed(parameters: dict) -> dict:
    """A parameters schema without `properties` takes none: `{}` is the only arguments object."""
    if "properties" in parameters or "additionalProperties" in parameters:
        return parameters
    return {**parameters, "properties": {}, "additionalProperties": False}


def parse_tool_calls(tool_plan: ToolPlan, stream_arguments: bool, choice_count: int = 1):
    """The event transformation: each choice's text through its own ToolCallParser. A choice whose
    model starts repeating its calls is finished there; once every choice is finished and one of them
    was cut short so, the events stop (and the upstream generation with them). Choices the upstream
    finished itself are read to the end of its answer, so its connection is kept for the next request."""

    def transform(events: Iterator[GenerationEvent]) -> Iterator[GenerationEvent]:
        return _parsed(events, tool_plan, stream_arguments, choice_count)

    return transform


def _parsed(
    events: Iterator[GenerationEvent], tool_plan: ToolPlan, stream_arguments: bool, choice_count: int
) -> Iterator[GenerationEvent]:
    """parse_tool_calls' transformation of one generation's events."""
    parsers: dict[int, ToolCallParser] = {}
    held_logprobs: dict[int, list] = {}
    finished: set[int] = set()
    cut_short = False
    for event in events:
        if event.index in finished:
            continue
        if not event.text and not event.finish_reason:
            yield event  # reasoning, or counts: nothing to parse
            continue
        parser = parsers.get(event.index)
        if parser is None:
            parser = parsers[event.index] = ToolCallParser(tool_plan.format, tool_plan.names, stream_arguments=stream_arguments)
        pieces = parser.feed(event.text) if event.text else []
        if not pieces and not event.finish_reason and not parser.repeating:
            # Held back (a call until it is whole, a marker's start): only the counts go on (_regrouped's one event).
            yield _held_back(event, held_logprobs)
            continue
        if not event.finish_reason and len(pieces) == 1:
            piece = pieces[0]
            if piece is event.text:
                yield event  # plain text, as it came
                continue
            if piece.__class__ is ToolCallDelta and piece.id is None and not parser.repeating:
                # More of a call's arguments (most tokens of a streamed call): _regrouped's one event.
                held_logprobs.pop(event.index, None)
                yield _arguments_event(event, piece)
                continue
        if parser.repeating:
            event, cut_short = replace(event, finish_reason="stop"), True
        if event.finish_reason:
            pieces += parser.finish()
            finished.add(event.index)
        yield from _regrouped(event, pieces, parser, held_logprobs.setdefault(event.index, []))
        if cut_short and len(finished) == choice_count:
            return


def _held_back(event: GenerationEvent, held_logprobs: dict[int, list]) -> GenerationEvent:
    """The counts of an event whose text is held back; its logprobs wait in `held_logprobs`."""
    if event.logprobs:
        held_logprobs.setdefault(event.index, []).extend(event.logprobs)
    return GenerationEvent(
        index=event.index,
        prompt_tokens=event.prompt_tokens,
        completion_tokens=event.completion_tokens,
        cached_tokens=event.cached_tokens,
    )


def _arguments_event(event: GenerationEvent, piece: ToolCallDelta) -> GenerationEvent:
    """An event carrying one more piece of a call's arguments, with the upstream event's counts."""
    return GenerationEvent(
        index=event.index,
        tool_calls=(piece,),
        prompt_tokens=event.prompt_tokens,
        completion_tokens=event.completion_tokens,
        stop_word=event.stop_word,
        cached_tokens=event.cached_tokens,
    )


def _regrouped(event: GenerationEvent, pieces: list, parser: ToolCallParser, held_logprobs: list) -> Iterator[GenerationEvent]:
    """One upstream event's pieces as events: runs of text, runs of tool-call deltas, the last one
    carrying the counts and the finish. Logprobs of held-back text wait for it; those of text that
    became a call are dropped."""
    held_logprobs.extend(event.logprobs or ())
    runs: list[GenerationEvent] = []
    for piece in pieces:
        if isinstance(piece, str):
            runs.append(GenerationEvent(text=piece, index=event.index, logprobs=tuple(held_logprobs) if held_logprobs else None))
        elif runs and runs[-1].tool_calls:
            runs[-1] = replace(runs[-1], tool_calls=(*runs[-1].tool_calls, piece))
        else:
            runs.append(GenerationEvent(index=event.index, tool_calls=(piece,)))
        held_logprobs.clear()
    finish_reason = event.finish_reason
    if finish_reason == "stop" and parser.calls_made and not parser.call_cut:
        finish_reason = "tool_calls"  # a call the end of the output cut short does not end the turn as one
    counts = {
        "finish_reason": finish_reason,
        "prompt_tokens": event.prompt_tokens,
        "completion_tokens": event.completion_tokens,
        "stop_word": event.stop_word,
        "cached_tokens": event.cached_tokens,
    }
    if finish_reason or not runs:
        # The finish goes in an event of its own, after the last delta, as OpenAI sends it.
        runs.append(GenerationEvent(index=event.index, **counts))
    else:
        last = runs[-1]  # made above with these fields only; built anew (dataclasses.replace costs 3x, per token)
        runs[-1] = GenerationEvent(text=last.text, index=last.index, logprobs=last.logprobs, tool_calls=last.tool_calls, **counts)
    yield from runs
