"""Anthropic's Message Batches (/v1/messages/batches) over the same engine as OpenAI's batches: the
requests become an input file (kept, not listed among the key's files) of lines for /v1/messages, the
batch a batch document with a "msgbatch_" id (OpenAI's routes do not see it, nor Anthropic's routes
OpenAI's), run by the same runner in the background lane. What differs is only the view: Anthropic's
batch object (processing_status, request_counts by outcome, RFC 3339 times, results_url) and its
results, one `{"custom_id", "result": {"type": succeeded | errored | canceled | expired, ...}}` a line,
read from the output and error files and, for a request with neither, the batch's end.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

from ..errors import InvalidRequest, NotFound
from ..services.scope import Scope
from ..store import Store, UnknownCursor
from ..store.base import encode
from . import batches, files, lines
from .models import MessageBatchCreate, MessageBatchListQuery

ENDPOINT = "/v1/messages"
PREFIX = "msgbatch"
WINDOW = "24h"  # Anthropic's: a batch ends within 24 hours
WINDOW_SECONDS = 24 * 3600


def index_key(owner: str) -> str:
    return f"msgbatches-of-{owner}"


def not_found(batch_id: str) -> NotFound:
    return NotFound(f"No message batch with id '{batch_id}'.")


def create(scope: Scope, request: MessageBatchCreate, base_url: str, key_name: str | None = None) -> dict:
    """The batch made and queued; a custom_id given twice is a 400 naming it."""
    store = scope.need()
    seen: set[str] = set()
    for n, each in enumerate(request.requests):
        if each.custom_id in seen:
            raise InvalidRequest(
                f"custom_id {each.custom_id!r} is used more than once", param=f"requests.{n}.custom_id", code="duplicate_item"
            )
        seen.add(each.custom_id)
    content = b"".join(
        encode({"custom_id": each.custom_id, "method": "POST", "url": ENDPOINT, "body": each.params}).lstrip() + b"\n"
        for each in request.requests
    )
    now = int(time.time())
    input_file = files.new_file(f"{PREFIX}_requests.jsonl", "batch", len(content), now, int(now + store.ttl_seconds))
    store.put(input_file["id"], scope.owner, input_file, files.chunks(content))
    batch = batches.new_batch(input_file["id"], ENDPOINT, WINDOW, WINDOW_SECONDS, prefix=PREFIX)
    batch["_requests"], batch["_key"] = len(request.requests), key_name
    return shown(batches.queued(store, scope.owner, batch, index_key(scope.owner)), None, base_url)


def retrieve(scope: Scope, batch_id: str, base_url: str) -> dict:
    store = scope.need()
    batch = batches.stored(store, scope.owner, batch_id, f"{PREFIX}_", not_found)
    return shown(batch, batches.cancel_of(store, scope.owner, batch_id), base_url)


def cancel(scope: Scope, batch_id: str, base_url: str) -> dict:
    store = scope.need()
    batches.ask_cancel(store, scope.owner, batches.stored(store, scope.owner, batch_id, f"{PREFIX}_", not_found))
    return retrieve(scope, batch_id, base_url)


def delete(scope: Scope, batch_id: str) -> dict:
    """An ended batch deleted with its requests and results; one still running is a 400."""
    store = scope.need()
    batch = batches.stored(store, scope.owner, batch_id, f"{PREFIX}_", not_found)
    if batch["status"] not in batches.FINISHED:
        raise InvalidRequest(f"message batch {batch_id} is still processing: cancel it, then delete it once it has ended")
    for file_id in (batch["input_file_id"], batch.get("_output_file"), batch.get("_error_file")):
        if file_id:
            store.delete(file_id, scope.owner)
    store.delete(batch_id, scope.owner)
    store.delete_item(index_key(scope.owner), scope.owner, batch_id)
    return {"id": batch_id, "type": "message_batch_deleted"}


def listing(scope: Scope, query: MessageBatchListQuery, base_url: str) -> dict:
    """A page of the caller's batches, newest first: after `after_id` (older) or before `before_id` (newer)."""
    store = scope.need()
    newer = query.before_id is not None
    try:
        page = store.page(
            index_key(scope.owner),
            scope.owner,
            after=query.before_id if newer else query.after_id,
            limit=query.limit,
            order="asc" if newer else "desc",
        )
    except UnknownCursor:
        raise not_found(query.before_id or query.after_id) from None
    entries = list(reversed(page.items)) if newer and page is not None else (page.items if page is not None else [])
    found = [retrieve(scope, entry["id"], base_url) for entry in entries if store.get(entry["id"], scope.owner) is not None]
    return {
        "data": found,
        "has_more": page is not None and page.has_more,
        "first_id": found[0]["id"] if found else None,
        "last_id": found[-1]["id"] if found else None,
    }


def shown(batch: dict, cancelled: dict | None, base_url: str) -> dict:
    """The batch as Anthropic writes it."""
    status, counts, total = batch["status"], batch["request_counts"], batch.get("_requests", 0)
    ended = status in batches.FINISHED
    done = counts["completed"] + counts["failed"]
    expired = batch.get("_expired", 0)
    left = total - done
    return {
        "id": batch["id"],
        "type": "message_batch",
        "processing_status": "ended" if ended else "canceling" if cancelled else "in_progress",
        "request_counts": {
            "processing": 0 if ended else left,
            "succeeded": counts["completed"],
            "errored": counts["failed"] - expired + (left if status == "failed" else 0),
            "canceled": left if status == "cancelled" else 0,
            "expired": expired,
        },
        "ended_at": _time(batch.get(f"{status}_at")) if ended else None,
        "created_at": _time(batch["created_at"]),
        "expires_at": _time(batch["expires_at"]),
        "archived_at": None,
        "cancel_initiated_at": _time(cancelled["at"]) if cancelled else None,
        "results_url": f"{base_url}/v1/messages/batches/{batch['id']}/results" if ended else None,
    }


def _time(epoch: float | None) -> str | None:
    """RFC 3339, as Anthropic writes times."""
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat().replace("+00:00", "Z")


def results(scope: Scope, batch_id: str) -> bytes:
    """The ended batch's results as JSONL, one line a request: 400 while it is still processing."""
    store = scope.need()
    batch = batches.stored(store, scope.owner, batch_id, f"{PREFIX}_", not_found)
    if batch["status"] not in batches.FINISHED:
        raise InvalidRequest(f"message batch {batch_id} has not ended yet: its results are ready once processing_status is ended")
    written = []
    for file_id in (batch.get("_output_file"), batch.get("_error_file")):
        page = store.page(file_id, scope.owner) if file_id else None
        written += [json.loads(item["text"]) for item in page.items] if page is not None else []
    answered = {row["custom_id"] for row in written}
    unanswered = [] if batch["status"] == "failed" else _unanswered(store, scope.owner, batch, answered)
    rows = [_result(row) for row in written] + unanswered
    return b"".join(encode(row).lstrip() + b"\n" for row in rows)


def _result(row: dict) -> dict:
    """An OpenAI result line as Anthropic's result."""
    response, error = row.get("response"), row.get("error")
    if response is not None and lines.succeeded(response["status_code"]):
        result = {"type": "succeeded", "message": response["body"]}
    elif response is not None:
        result = {"type": "errored", "error": response["body"]}
    elif error["code"] == "batch_expired":
        result = {"type": "expired"}
    else:
        result = {
            "type": "errored",
            "error": {"type": "error", "error": {"type": "invalid_request_error", "message": error["message"]}},
        }
    return {"custom_id": row["custom_id"], "result": result}


def _unanswered(store: Store, owner: str, batch: dict, answered: set[str]) -> list[dict]:
    """The requests without a result: canceled (or expired) when the batch ended."""
    page = store.page(batch["input_file_id"], owner)
    good, _ = lines.checked(files.joined(page.items) if page is not None else b"", ENDPOINT)
    kind = "expired" if batch["status"] == "expired" else "canceled"
    return [{"custom_id": line.custom_id, "result": {"type": kind}} for line in good if line.custom_id not in answered]
