"""Generation events as the Responses API's `response` object, and as its stream of named events,
each with a `sequence_number`: response.created, response.in_progress; per output item
response.output_item.added, then for a message response.content_part.added, response.output_text.delta
..., response.output_text.done, response.content_part.done, for a function call
response.function_call_arguments.delta ..., response.function_call_arguments.done; then
response.output_item.done; at the end response.completed (or response.incomplete when
max_output_tokens cut it, response.failed when the generation failed after the start).

The same protocol as services/shapes.py, so generation.stream and generation.fold drive it. One
choice; output items are cut by services/blocks.Blocks, as in the fold.
"""

from __future__ import annotations

import time
import uuid

from .. import sse
from ..backends.events import GenerationEvent
from ..errors import ProxyError
from ..services.blocks import START, STOP, TEXT, Block, Blocks
from .responses import ResponsesRequest

_SEQUENCE = sse.NUMBER_HOLES[0]   # the sequence number's stand-in in a sample frame


class ResponsesShape:
    end = b""   # the stream ends with response.completed (or .incomplete / .failed), no [DONE]

    def __init__(self, model: str, request: ResponsesRequest):
        self.hex = uuid.uuid4().hex
        self.id = f"resp_{self.hex}"
        self.created_at = int(time.time())
        self.model = model
        self.request = request
        self.blocks = Blocks()
        self.sequence_number = 0
        self.finish_reason: str | None = None
        self._text_patterns: dict[int, sse.FramePattern] = {}   # per output item

    @staticmethod
    def frame(chunk: dict) -> bytes:
        return sse.named_frame(chunk["type"], chunk)

    def openings(self, index: int) -> list[dict]:
        in_progress = self._response("in_progress", [], None)
        return [self._event("response.created", response=in_progress),
                self._event("response.in_progress", response=in_progress)]

    def content_frame(self, event: GenerationEvent) -> bytes | None:
        """The frame of a text delta to the open message, assembled around pre-encoded parts."""
        if event.finish_reason or event.tool_calls or not event.text or not self.blocks.extend_text(event.text):
            return None
        block = self.blocks.open
        pattern = self._text_patterns.get(block.index)
        if pattern is None:
            sample = self.frame(_envelope("response.output_text.delta", self._text_delta(block, sse.TEXT_HOLE), _SEQUENCE))
            pattern = self._text_patterns[block.index] = sse.FramePattern(sample, sse.TEXT_HOLE, _SEQUENCE)
        return pattern.fill(sse.encode_string(event.text), str(self._next_number()).encode())

    def chunks(self, event: GenerationEvent) -> list[dict]:
        if event.finish_reason:
            self.finish_reason = event.finish_reason
        return self._block_events(self.blocks.add(event))

    def closings(self, usage: dict) -> list[dict]:
        chunks = self._block_events(self.blocks.close())
        response = self._finished(self.blocks.blocks, self.finish_reason, usage)
        kind = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        return [*chunks, self._event(kind, response=response)]

    def error_chunk(self, exc: ProxyError) -> dict:
        response = self._response("failed", [], None) | {"error": {"code": "server_error", "message": exc.message}}
        return self._event("response.failed", response=response)

    def response(self, choices: list[dict], usage: dict) -> dict:
        """The response object from the folded choice."""
        choice = choices[0]
        return self._finished(choice["blocks"], choice["finish_reason"], usage)

    # --- the response object ---------------------------------------------------------------------

    def _finished(self, blocks: list[Block], finish_reason: str | None, usage: dict) -> dict:
        incomplete = finish_reason == "length"
        status = "incomplete" if incomplete else "completed"
        response = self._response(status, [self._item(block, status) for block in blocks], _usage(usage))
        if incomplete:
            response["incomplete_details"] = {"reason": "max_output_tokens"}
        return response

    def _response(self, status: str, output: list, usage: dict | None) -> dict:
        request = self.request
        return {"id": self.id, "object": "response", "created_at": self.created_at, "status": status,
                "error": None, "incomplete_details": None, "instructions": request.instructions,
                "max_output_tokens": request.max_output_tokens, "model": self.model, "output": output,
                "parallel_tool_calls": request.parallel_tool_calls is not False, "previous_response_id": None,
                "store": False, "temperature": request.temperature, "top_p": request.top_p,
                "text": {"format": _text_format(request)}, "tool_choice": _tool_choice(request),
                "tools": [tool.model_dump(by_alias=True) for tool in request.tools or ()],
                "usage": usage, "user": request.user, "metadata": dict(request.metadata or {})}

    def _item(self, block: Block, status: str) -> dict:
        if block.kind == TEXT:
            return {"id": self._item_id(block), "type": "message", "status": status, "role": "assistant",
                    "content": [_text_part(block.content)] if status != "in_progress" else []}
        return {"id": self._item_id(block), "type": "function_call", "status": status, "call_id": block.call_id,
                "name": block.name, "arguments": block.content if status != "in_progress" else ""}

    def _item_id(self, block: Block) -> str:
        return f"{'msg' if block.kind == TEXT else 'fc'}_{self.hex}_{block.index}"

    # --- stream events ---------------------------------------------------------------------------

    def _block_events(self, changes: list) -> list[dict]:
        return [event for change in changes for event in self._block_event(*change)]

    def _block_event(self, change: str, block: Block, piece: str) -> list[dict]:
        if change == START:
            return self._started(block)
        if change == STOP:
            return self._stopped(block)
        if block.kind == TEXT:
            return [self._event("response.output_text.delta", **self._text_delta(block, piece))]
        return [self._event("response.function_call_arguments.delta", item_id=self._item_id(block),
                            output_index=block.index, delta=piece)]

    def _text_delta(self, block: Block, piece: str) -> dict:
        return {"item_id": self._item_id(block), "output_index": block.index, "content_index": 0, "delta": piece,
                "logprobs": []}

    def _started(self, block: Block) -> list[dict]:
        added = self._event("response.output_item.added", output_index=block.index, item=self._item(block, "in_progress"))
        if block.kind != TEXT:
            return [added]
        return [added, self._event("response.content_part.added", item_id=self._item_id(block),
                                   output_index=block.index, content_index=0, part=_text_part(""))]

    def _stopped(self, block: Block) -> list[dict]:
        status = "incomplete" if self.finish_reason == "length" else "completed"
        item = {"item_id": self._item_id(block), "output_index": block.index}
        if block.kind == TEXT:
            done = [self._event("response.output_text.done", **item, content_index=0, text=block.content, logprobs=[]),
                    self._event("response.content_part.done", **item, content_index=0, part=_text_part(block.content))]
        else:
            done = [self._event("response.function_call_arguments.done", **item, arguments=block.content)]
        return [*done, self._event("response.output_item.done", output_index=block.index, item=self._item(block, status))]

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


def _text_format(request: ResponsesRequest) -> dict:
    text_format = request.text.format if request.text is not None else None
    return text_format.model_dump(by_alias=True, exclude_none=True) if text_format else {"type": "text"}


def _tool_choice(request: ResponsesRequest):
    choice = request.tool_choice
    if choice is None:
        return "auto"
    return choice if isinstance(choice, str) else choice.model_dump()


def _usage(usage: dict) -> dict:
    return {"input_tokens": usage["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": usage["prompt_tokens_details"]["cached_tokens"],
                                     "cache_write_tokens": 0},
            "output_tokens": usage["completion_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage["total_tokens"]}
