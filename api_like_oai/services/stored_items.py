"""The Responses API's items as they are stored and listed: each with an id and a status, a message's
content as a list of parts, as OpenAI's item lists show them. Pure: no store, no Flask."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel

from ..store import Page, new_id

ID_PREFIXES = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}


def stored_item(item: dict) -> dict:
    """`item` (an input item as the client wrote it, or an output item) with an id, a type and a status."""
    kind = item.get("type") or "message"
    stored = {"id": item.get("id") or new_id(ID_PREFIXES.get(kind, "item")), **item, "type": kind}
    if kind == "message" and isinstance(stored.get("content"), str):
        part = "output_text" if stored.get("role") == "assistant" else "input_text"
        stored["content"] = [{"type": part, "text": stored["content"]} | _output_text_extras(part)]
    if kind in ("message", "function_call", "function_call_output"):
        stored.setdefault("status", "completed")
    return stored


def _output_text_extras(part: str) -> dict:
    return {"annotations": []} if part == "output_text" else {}


def input_items(request_input: str | Iterable[BaseModel]) -> list[dict]:
    """A Responses request's `input` as stored items: a string is one user message."""
    if isinstance(request_input, str):
        return [stored_item({"type": "message", "role": "user", "content": request_input})]
    return [stored_item(item.model_dump(by_alias=True, exclude_none=True)) for item in request_input]


def item_list(page: Page) -> dict:
    """A page of items as OpenAI's list object: data, first_id, last_id, has_more."""
    items = page.items
    return {
        "object": "list",
        "data": items,
        "first_id": items[0]["id"] if items else None,
        "last_id": items[-1]["id"] if items else None,
        "has_more": page.has_more,
    }
