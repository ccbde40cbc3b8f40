"""Generation events as the Responses API's `response` object, and as its stream of named events,
each with a `sequence_number`: response.created, response.in_progress; per output item
response.output_item.added, then
- a reasoning item (the model's thought): response.content_part.added (reasoning_text),
  response.reasoning_text.delta ..., response.reasoning_text.done, response.content_part.done, and
  when reasoning.summary is set response.reasoning_summary_part.added,
  response.reasoning_summary_text.delta, response.reasoning_summary_text.done,
  response.reasoning_summary_part.done (the summary is the thought itself);
- a message: response.content_part.added, response.output_text.delta ..., response.output_text.done,
  response.content_part.done;
- a function call: response.function_call_arguments.delta ..., response.function_call_arguments.done;
- a custom tool call: response.custom_tool_call_input.delta ..., response.custom_tool_call_input.done;
- a local shell call, a tool search call: nothing between;
then response.output_item.done; at the end response.completed (or response.incomplete when
max_output_tokens cut it, response.failed when the generation failed after the start).

The shape Protocol (shape.py), so generation.stream and generation.fold drive it. A stored turn's
answer is handed to its `Keeper` (services/stored_responses.TurnWriter, the turn's one writer) as it is
finished, before its last event goes out or the answer is returned; the shape does no I/O itself. One
choice; output items are cut by dialects/blocks.Blocks, as in the fold. Calls are written as the
Responses tool kind their offered function stands for (responses_tools.py).
"""

from __future__ import annotations

import functools
import secrets
import time
from collections.abc import Callable
from typing import Protocol

from .. import sse
from ..backends.events import GenerationEvent
from ..backends.llamacpp import LLAMA_CPP_SAMPLING
from ..errors import ProxyError
from ..sealing import Seal
from .blocks import ITEM, REASONING, START, STOP, TEXT, TOOL_CALL, Block, Blocks, reasoning_tokens
from .common import given
from .responses import REASONING_PURPOSE, ResponsesRequest
from .responses_mcp import CALL, LIST_TOOLS
from .responses_tools import CUSTOM, FUNCTION, LOCAL_SHELL, TOOL_SEARCH, output_item, partial_custom_input

_SEQUENCE = sse.NUMBER_HOLES[0]  # the sequence number's stand-in in a sample frame
_ID_PREFIXES = {TEXT: "msg", REASONING: "rs", FUNCTION: "fc", CUSTOM: "ctc", LOCAL_SHELL: "lsh", TOOL_SEARCH: "tsc"}
# Why a response ended before the model's answer, by the finish reason the events end with.
# steered: stopped by a Responses WebSocket's response.steer (services/responses_socket.py)
INCOMPLETE_REASONS = {"length": "max_output_tokens", "tool_rounds": "max_tool_calls", "steered": "steered"}


class Keeper(Protocol):
    """Where a stored or continued turn's answer goes (services/stored_responses.TurnWriter)."""

    fields: dict  # what the response says of itself over the stateless answer (store, conversation, ...)

    def keep(self, response: dict) -> None:
        """The finished answer, before it goes out; a ProxyError ends a stream with that error instead."""

    def keep_failure(self, response: dict) -> None:
        """A generation that failed after it started, best effort."""


class ResponsesShape:
    end = b""  # the stream ends with response.completed (or .incomplete / .failed), no [DONE]
    keepalive = sse.KEEPALIVE_COMMENT  # OpenAI's SDKs skip comments
    usage_at_start = False  # the usage comes with response.completed

    def __init__(
        self,
        model: str,
        request: ResponsesRequest,
        seal: Seal | None = None,
        sampling: Callable[[], dict[str, float]] | None = None,
        keeper: Keeper | None = None,
    ):
        """`sampling` gives the sampling values the request is generated with (ServedModel.sampling_used),
        asked once, by the first event; without it, llama.cpp's defaults under the request's own values.
        `keeper`: a stored turn's. The id has 128 random bits, kept or not: it names a stored object, here or
        at the fleet front that relayed the request (services/fleet_responses.py)."""
        self.keeper = keeper
        self.hex = secrets.token_hex(16)
        self.id = f"resp_{self.hex}"
        self.created_at = int(time.time())
        self.completed_at: int | None = None
        self.model = model
        self.request = request
        self.blocks = Blocks()
        self.sequence_number = 0
        self.finish_reason: str | None = None
        self.seal = seal if request.includes_encrypted_reasoning() else None  # seals thoughts handed out
        self.summaries = request.reasoning is not None and request.reasoning.wants_summary()
        self.toolbox = request.toolbox()
        self._sampling = sampling or (lambda: LLAMA_CPP_SAMPLING | given(request, ("temperature", "top_p")))
        self._text_patterns: dict[int, sse.FramePattern] = {}  # per output item
        self._inputs_given: dict[int, str] = {}  # per custom tool call: the input streamed so far

    @staticmethod
    def frame(chunk: dict) -> bytes:
        return sse.named_frame(chunk["type"], chunk)

    def openings(self, index: int) -> list[dict]:
        in_progress = self.in_progress()
        return [self._event("response.created", response=in_progress), self._event("response.in_progress", response=in_progress)]

    def content_frame(self, event: GenerationEvent) -> bytes | None:
        """The frame of a text delta to the open message, assembled around pre-encoded parts."""
        if not self.blocks.extend_open_text(event):
            return None
        block = self.blocks.open
        pattern = self._text_patterns.get(block.index)
        if pattern is None:
            sample = self.frame(_envelope("response.output_text.delta", self._text_delta(block, sse.TEXT_HOLE), _SEQUENCE))
            pattern = self._text_patterns[block.index] = sse.FramePattern(sample, sse.TEXT_HOLE, _SEQUENCE)
        return pattern.fill(sse.encode_string(event.text), str(self._next_number()).encode())

    def prepare_text(self) -> None:
        """Nothing: a pattern is per output item, and the first text opens its item by `chunks`."""

    def chunks(self, event: GenerationEvent) -> list[dict]:
        chunks = self._block_events(self.blocks.add(event))  # items it closes ended before the finish
        if event.finish_reason:
            self.finish_reason = event.finish_reason
        return chunks

    def closings(self, usage: dict) -> list[dict]:
        chunks = self._block_events(self.blocks.close())
        response = self._finished(self.blocks.blocks, self.finish_reason, usage)
        kind = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        if self.keeper is not None:
            try:
                self.keeper.keep(response)
            except ProxyError as exc:
                return [*chunks, self.error_chunk(exc)]
        return [*chunks, self._event(kind, response=response)]

    def error_chunk(self, exc: ProxyError) -> dict:
        response = self._response("failed", [], None) | {"error": {"code": "server_error", "message": exc.message}}
        if self.keeper is not None:
            self.keeper.keep_failure(response)
        return self._event("response.failed", response=response)

    def response(self, choices: list[dict], usage: dict) -> dict:
        """The response object from the folded choice."""
        choice = choices[0]
        answer = self._finished(choice["blocks"], choice["finish_reason"], usage)
        if self.keeper is not None:
            self.keeper.keep(answer)
        return answer

    def in_progress(self) -> dict:
        """The response before anything was generated (what a stored stream is first kept as)."""
        return self._response("in_progress", [], None)

    def so_far(self, usage: dict) -> dict:
        """The response of what was generated until now, as incomplete (a stream the client dropped)."""
        self.blocks.close()
        response = self._finished(self.blocks.blocks, None, usage)
        response["status"], response["completed_at"] = "incomplete", None
        for item in response["output"]:
            item["status"] = "incomplete"
        return response

    # --- the response object ---------------------------------------------------------------------

    def _finished(self, blocks: list[Block], finish_reason: str | None, usage: dict) -> dict:
        """The response at its end; when max_output_tokens cut it, its last item is the incomplete one
        (the bound of the proxy's tool rounds ends it as incomplete too, its items whole)."""
        incomplete = finish_reason in INCOMPLETE_REASONS
        statuses = ["completed"] * len(blocks)
        if finish_reason == "length" and blocks:
            statuses[-1] = "incomplete"
        output = [self._item(block, status) for block, status in zip(blocks, statuses, strict=True)]
        response = self._response("incomplete" if incomplete else "completed", output, _usage(usage, blocks))
        if incomplete:
            response["incomplete_details"] = {"reason": INCOMPLETE_REASONS[finish_reason]}
        return response

    def _response(self, status: str, output: list, usage: dict | None) -> dict:
        """The response object: every field of Open Responses' ResponseResource (and of OpenAI's Response)."""
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "completed_at": self._completed_at() if status == "completed" else None,
            "status": status,
            "error": None,
            "incomplete_details": None,
            "model": self.model,
            "output": output,
            "usage": usage,
            **self._settings,
            **(self.keeper.fields if self.keeper is not None else {}),
        }

    def _completed_at(self) -> int:
        """When the answer completed: the first time it was written as completed (a stream's last event)."""
        if self.completed_at is None:
            self.completed_at = int(time.time())
        return self.completed_at

    @functools.cached_property
    def _settings(self) -> dict:
        """What the response says of how it was made, the same in every event: the request's fields as
        sent, or the value used where it left one out (sampling: see __init__)."""
        request = self.request
        return {
            "instructions": request.instructions,
            "max_output_tokens": request.max_output_tokens,
            "max_tool_calls": request.max_tool_calls,
            "parallel_tool_calls": request.parallel_tool_calls is not False,
            "previous_response_id": None,
            "store": False,
            "background": False,
            "text": _text_config(request),
            "tool_choice": _tool_choice(request),
            "tools": [_echoed_tool(tool) for tool in request.tools or ()],
            "truncation": request.truncation or "disabled",
            **{key: float(value) for key, value in self._sampling().items()},
            "top_logprobs": 0,
            "reasoning": _reasoning_config(request),
            "service_tier": "default",
            "user": request.user,
            "safety_identifier": request.safety_identifier,
            "prompt_cache_key": request.prompt_cache_key,
            "metadata": dict(request.metadata or {}),
        }

    def _item(self, block: Block, status: str) -> dict:
        done = status != "in_progress"
        if block.kind == ITEM:
            return dict(block.item)  # the proxy's own item says its own status
        if block.kind == TEXT:
            return {
                "id": self._item_id(block),
                "type": "message",
                "status": status,
                "role": "assistant",
                "content": [_text_part(block.content)] if done else [],
            }
        if block.kind == REASONING:
            return self._reasoning_item(block, status)
        item = output_item(self.toolbox.by_name(block.name), block.name, block.call_id, block.content if done else "")
        return {"id": self._item_id(block), **item, "status": status}

    def _reasoning_item(self, block: Block, status: str) -> dict:
        """The thought as a reasoning item: in `content`, again in `summary` when summaries were asked
        for, and sealed in `encrypted_content` when include asked for it (what the next turn sends back)."""
        item = {"id": self._item_id(block), "type": "reasoning", "status": status, "summary": [], "content": []}
        if status == "in_progress":
            return item
        thought = block.content
        item["content"] = [_reasoning_part(thought)]
        if self.summaries:
            item["summary"] = [_summary_part(thought)]
        if self.seal is not None:
            item["encrypted_content"] = self.seal.wrap(REASONING_PURPOSE, thought)
        return item

    def _item_kind(self, block: Block) -> str:
        if block.kind == ITEM:
            return block.item["type"]
        if block.kind != TOOL_CALL:
            return block.kind
        offered = self.toolbox.by_name(block.name)
        return offered.kind if offered else FUNCTION

    def _item_id(self, block: Block) -> str:
        if block.kind == ITEM:
            return block.item["id"]
        return f"{_ID_PREFIXES[self._item_kind(block)]}_{self.hex}_{block.index}"

    # --- stream events ---------------------------------------------------------------------------

    def _block_events(self, changes: list) -> list[dict]:
        return [event for change in changes for event in self._block_event(*change)]

    def _block_event(self, change: str, block: Block, piece: str) -> list[dict]:
        if change == START:
            return self._started(block)
        if change == STOP:
            return self._stopped(block)
        kind = self._item_kind(block)
        where = {"item_id": self._item_id(block), "output_index": block.index}
        if kind == TEXT:
            return [self._event("response.output_text.delta", **self._text_delta(block, piece))]
        if kind == REASONING:
            return [self._event("response.reasoning_text.delta", **where, content_index=0, delta=piece)]
        if kind == CUSTOM:
            return self._input_delta(block, partial_custom_input(block.content))
        if kind in (LOCAL_SHELL, TOOL_SEARCH):
            return []  # its action (or search) is given whole, with the item
        return [self._event("response.function_call_arguments.delta", **where, delta=piece)]

    def _input_delta(self, block: Block, input_so_far: str) -> list[dict]:
        """A custom call's input delta: what of its decoded input has not been given out yet."""
        given = self._inputs_given.get(block.index, "")
        if len(input_so_far) <= len(given) or not input_so_far.startswith(given):
            return []
        self._inputs_given[block.index] = input_so_far
        return [
            self._event(
                "response.custom_tool_call_input.delta",
                item_id=self._item_id(block),
                output_index=block.index,
                delta=input_so_far[len(given) :],
            )
        ]

    def _text_delta(self, block: Block, piece: str) -> dict:
        return {"item_id": self._item_id(block), "output_index": block.index, "content_index": 0, "delta": piece, "logprobs": []}

    def _started(self, block: Block) -> list[dict]:
        added = self._event("response.output_item.added", output_index=block.index, item=self._item(block, "in_progress"))
        if block.kind == ITEM:
            return [added, *self._item_started(block)]
        part = _text_part("") if block.kind == TEXT else _reasoning_part("") if block.kind == REASONING else None
        if part is None:
            return [added]
        return [
            added,
            self._event(
                "response.content_part.added", item_id=self._item_id(block), output_index=block.index, content_index=0, part=part
            ),
        ]

    def _item_started(self, block: Block) -> list[dict]:
        """An MCP listing or call under way: its in_progress event (a call's arguments first, whole)."""
        where = {"item_id": block.item["id"], "output_index": block.index}
        kind = block.item["type"]
        if kind == "compaction":  # context_management compacted the conversation before the model was asked
            return [self._event("response.compaction.compacting", **where)]
        if kind == LIST_TOOLS:
            return [self._event("response.mcp_list_tools.in_progress", **where)]
        if kind != CALL:
            return []
        arguments = block.item["arguments"]
        return [
            self._event("response.mcp_call_arguments.delta", **where, delta=arguments),
            self._event("response.mcp_call_arguments.done", **where, arguments=arguments),
            self._event("response.mcp_call.in_progress", **where),
        ]

    def _item_stopped(self, block: Block) -> list[dict]:
        """An MCP listing or call done: completed, or failed when it has an error."""
        item = block.item
        if item["type"] not in (LIST_TOOLS, CALL):
            return []
        prefix = "response.mcp_list_tools" if item["type"] == LIST_TOOLS else "response.mcp_call"
        outcome = "failed" if item.get("error") is not None else "completed"
        return [self._event(f"{prefix}.{outcome}", item_id=item["id"], output_index=block.index)]

    def _stopped(self, block: Block) -> list[dict]:
        if block.kind == ITEM:
            return [
                *self._item_stopped(block),
                self._event("response.output_item.done", output_index=block.index, item=self._item(block, "")),
            ]
        status = "incomplete" if self.finish_reason == "length" else "completed"
        item = self._item(block, status)
        where = {"item_id": item["id"], "output_index": block.index}
        kind = self._item_kind(block)
        if kind == TEXT:
            done = [
                self._event("response.output_text.done", **where, content_index=0, text=block.content, logprobs=[]),
                self._event("response.content_part.done", **where, content_index=0, part=_text_part(block.content)),
            ]
        elif kind == REASONING:
            done = self._thought_done(block, where)
        elif kind == CUSTOM:
            done = [
                *self._input_delta(block, item["input"]),
                self._event("response.custom_tool_call_input.done", **where, input=item["input"]),
            ]
        elif kind in (LOCAL_SHELL, TOOL_SEARCH):
            done = []
        else:
            done = [self._event("response.function_call_arguments.done", **where, arguments=block.content)]
        return [*done, self._event("response.output_item.done", output_index=block.index, item=item)]

    def _thought_done(self, block: Block, where: dict) -> list[dict]:
        thought = block.content
        done = [
            self._event("response.reasoning_text.done", **where, content_index=0, text=thought),
            self._event("response.content_part.done", **where, content_index=0, part=_reasoning_part(thought)),
        ]
        if not self.summaries:
            return done
        summary = {**where, "summary_index": 0}
        return [
            *done,
            self._event("response.reasoning_summary_part.added", **summary, part=_summary_part("")),
            self._event("response.reasoning_summary_text.delta", **summary, delta=thought),
            self._event("response.reasoning_summary_text.done", **summary, text=thought),
            self._event("response.reasoning_summary_part.done", **summary, part=_summary_part(thought)),
        ]

    def _event(self, kind: str, **fields) -> dict:
        return _envelope(kind, fields, self._next_number())

    def _next_number(self) -> int:
        number = self.sequence_number
        self.sequence_number += 1
        return number


def _envelope(kind: str, fields: dict, sequence_number: int) -> dict:
    return {"type": kind, **fields, "sequence_number": sequence_number}


def _text_part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _reasoning_part(text: str) -> dict:
    return {"type": "reasoning_text", "text": text}


def _summary_part(text: str) -> dict:
    return {"type": "summary_text", "text": text}


_FUNCTION_ECHO = {"description": None, "parameters": None, "strict": False}


def _echoed_tool(tool) -> dict:
    """A tool as the answer repeats it; a function tool whole (its description and parameters null when
    left out; strict false unless asked for: arguments are held to their schema when llama.cpp's lazy
    grammars allow, whatever strict says)."""
    echoed = tool.model_dump(by_alias=True, exclude_none=True)
    if echoed.get("type") != FUNCTION:
        return echoed
    return echoed | {key: value for key, value in _FUNCTION_ECHO.items() if key not in echoed}


def _text_config(request: ResponsesRequest) -> dict:
    text = request.text
    text_format = text.format if text is not None else None
    config = {"format": _echoed_format(text_format) if text_format else {"type": "text"}}
    if text is not None and text.verbosity is not None:
        config["verbosity"] = text.verbosity
    return config


def _echoed_format(text_format) -> dict:
    """text.format as the answer repeats it; a JSON schema whole: its name as the grammar is built
    ("response" unless named), strict true unless sent false (llama.cpp holds the output to the schema)."""
    echoed = text_format.model_dump(by_alias=True, exclude_none=True)
    if text_format.type != "json_schema":
        return echoed
    return {"name": "response", "description": None, "strict": True} | echoed


def _reasoning_config(request: ResponsesRequest) -> dict:
    reasoning = request.reasoning
    return {
        "effort": reasoning.effort if reasoning else None,
        "summary": (reasoning.summary or reasoning.generate_summary) if reasoning else None,
    }


def _tool_choice(request: ResponsesRequest):
    choice = request.tool_choice
    if choice is None:
        return "auto"
    return choice if isinstance(choice, str) else choice.model_dump(exclude_none=True)


def _usage(usage: dict, blocks: list[Block]) -> dict:
    """OpenAI's usage; reasoning_tokens is the answer's token count when its thought ended (0 without one)."""
    cached_tokens = usage["prompt_tokens_details"]["cached_tokens"]
    return {
        "input_tokens": usage["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": 0},
        "output_tokens": usage["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens(blocks, usage["completion_tokens"])},
        "total_tokens": usage["total_tokens"],
    }
