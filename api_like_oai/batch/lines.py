"""A batch's lines (pure): each input line checked up front, each result written in OpenAI's line format.

An input line is `{"custom_id", "method": "POST", "url": <the batch's endpoint>, "body": {...}}`. A line
that is not that (not JSON, a custom_id missing or seen before, another URL) is reported in the error
file and counted as failed, rather than failing the batch: the others still run. The body itself is
checked by the route that runs it, as any request's is: its 400 is the line's answer.

A result line is `{"id", "custom_id", "response": {"status_code", "request_id", "body"} | null,
"error": {"code", "message"} | null}`; a result item's id is the line's number, so the store refuses
a second result of one line (DuplicateItem): a line is never answered twice into a batch's files.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass

from ..store.base import encode


@dataclass(frozen=True)
class Line:
    """An input line that can run: its number (from 1), custom_id and body."""

    number: int
    custom_id: str
    body: dict


@dataclass(frozen=True)
class BadLine:
    """An input line that cannot run, and why (its custom_id when it has one)."""

    number: int
    custom_id: str | None
    code: str
    message: str


def checked(content: bytes, endpoint: str) -> tuple[list[Line], list[BadLine]]:
    """The file's lines that run and those that cannot; blank lines are skipped."""
    good: list[Line] = []
    bad: list[BadLine] = []
    seen: set[str] = set()
    for number, raw in enumerate(content.split(b"\n"), 1):
        if not raw.strip():
            continue
        found = _checked_line(number, raw, endpoint, seen)
        (good if isinstance(found, Line) else bad).append(found)
    return good, bad


def _checked_line(number: int, raw: bytes, endpoint: str, seen: set[str]) -> Line | BadLine:
    try:
        parsed = json.loads(raw)  # the standard parser: integers of any size stay exact
    except ValueError:
        return BadLine(number, None, "invalid_json_line", f"line {number} is not valid JSON")
    if not isinstance(parsed, dict):
        return BadLine(number, None, "invalid_request", f"line {number} is not a JSON object")
    custom_id = parsed.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return BadLine(number, None, "missing_required_parameter", f"line {number} has no custom_id (a string)")
    if custom_id in seen:
        return BadLine(number, custom_id, "duplicate_custom_id", f"line {number}: the custom_id {custom_id!r} came before")
    seen.add(custom_id)
    if parsed.get("method", "POST") != "POST":
        return BadLine(number, custom_id, "invalid_method", f"line {number}: the method must be POST")
    if parsed.get("url") != endpoint:
        return BadLine(number, custom_id, "mismatched_endpoint", f"line {number}: the url must be {endpoint}")
    if not isinstance(parsed.get("body"), dict):
        return BadLine(number, custom_id, "invalid_request", f"line {number}: the body must be a JSON object")
    return Line(number, custom_id, parsed["body"])


def answered(line: Line, status: int, body, request_id: str | None = None) -> dict:
    """A result item: the line's answer (its HTTP status and body as the route wrote them)."""
    return _item(
        line.number,
        {
            "id": new_request_id(),
            "custom_id": line.custom_id,
            "response": {"status_code": status, "request_id": request_id or new_request_id("req"), "body": body},
            "error": None,
        },
    )


def refused(line: BadLine | Line, code: str | None = None, message: str | None = None) -> dict:
    """A result item: a line that did not run (a bad line, or one the batch's end left: expired, cancelled)."""
    return _item(
        line.number,
        {
            "id": new_request_id(),
            "custom_id": line.custom_id,
            "response": None,
            "error": {"code": code or line.code, "message": message or line.message},
        },
    )


def new_request_id(prefix: str = "batch_req") -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


def _item(number: int, result: dict) -> dict:
    """The store item of a result: the line's number as its id, the JSON line as its text."""
    return {"id": str(number), "text": encode(result).decode().lstrip() + "\n"}  # integers past 64 bits too


def succeeded(status: int) -> bool:
    return 200 <= status < 300


ENVIRON_KEY = "api_like_oai.batch_line"  # a WSGI environ key: no HTTP header becomes one (those are HTTP_*)


@dataclass(frozen=True)
class OnBehalf:
    """Who a batch line runs for, in its request's environ (runner.py): the batch's key as a caller (at
    the background priority) and the owner of its stored objects (a line of /v1/responses stores its
    response as the key's). The app takes it instead of a key from the headers (app._batch_line)."""

    caller: object  # access.keys.Caller
    owner: str


def usage_of(results: list[dict]) -> dict:
    """A batch's usage (OpenAI's Batch.usage) summed over its answers' (result items): chat and text
    completions' and embeddings' prompt and completion tokens, the Responses API's and Anthropic's input
    and output tokens."""
    totals = {"input": 0, "cached": 0, "output": 0, "reasoning": 0}
    for item in results:
        body = (json.loads(item["text"]).get("response") or {}).get("body")
        usage = body.get("usage") if isinstance(body, dict) else None
        if not isinstance(usage, dict):
            continue
        totals["input"] += usage.get("prompt_tokens", usage.get("input_tokens", 0)) or 0
        totals["output"] += usage.get("completion_tokens", usage.get("output_tokens", 0)) or 0
        details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
        totals["cached"] += details.get("cached_tokens", usage.get("cache_read_input_tokens", 0)) or 0
        generated = usage.get("completion_tokens_details") or usage.get("output_tokens_details") or {}
        totals["reasoning"] += generated.get("reasoning_tokens") or 0
    return {
        "input_tokens": totals["input"],
        "input_tokens_details": {"cached_tokens": totals["cached"]},
        "output_tokens": totals["output"],
        "output_tokens_details": {"reasoning_tokens": totals["reasoning"]},
        "total_tokens": totals["input"] + totals["output"],
    }
