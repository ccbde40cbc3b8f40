"""OpenAI's Batch API over the store: a batch is an object owned by its key, its document OpenAI's batch
object (plus the ids of its result files, private), listed through the key's index of batches and put
on the queue every runner reads (runner.py). Only the runner writes a batch's document after it was
created: a cancel is an item ("cancel") added to the batch, which the runner reads, so two writers
never race over the document.
"""

from __future__ import annotations

import time

from ..errors import InvalidRequest, NotFound
from ..services.scope import Scope
from ..services.stored_items import item_list
from ..store import DuplicateItem, Page, Store, UnknownCursor, new_id
from ..store.settings import duration
from . import files
from .models import BatchCreate, BatchListQuery

QUEUE_KEY = "batch-queue"  # the batches not finished yet, of every key: {"id": batch id, "owner": ...}
RUNNER_OWNER = "batch-runner"  # owns the queue and the claims: no key's digest (64 hex digits) is this
CANCEL_ITEM = "cancel"
RUNNING = ("validating", "in_progress")
FINISHED = ("completed", "failed", "expired", "cancelled")


def index_key(owner: str) -> str:
    """The object listing `owner`'s batches (not a batch id: those start with "batch_")."""
    return f"batches-of-{owner}"


def not_found(batch_id: str) -> NotFound:
    return NotFound(f"No batch found with id '{batch_id}'.")


def create(scope: Scope, request: BatchCreate, key_name: str | None = None) -> dict:
    """The batch made, listed and queued for a runner, `validating` until one checks its lines;
    `key_name` is its key's, for the dashboard."""
    store = scope.need()
    try:
        input_file = files.retrieve(scope, request.input_file_id)
    except NotFound:
        raise files.not_found(request.input_file_id, param="input_file_id") from None
    if input_file["purpose"] != "batch":
        raise InvalidRequest("the input file must be uploaded with the purpose 'batch'", param="input_file_id")
    try:
        window = duration(request.completion_window)
    except ValueError:
        raise InvalidRequest('completion_window: write a duration such as "24h"', param="completion_window") from None
    output_seconds = request.output_expires_after.seconds if request.output_expires_after else None
    batch = new_batch(
        request.input_file_id, request.endpoint, request.completion_window, window, request.metadata, output_seconds
    )
    batch["_key"] = key_name
    return public(queued(store, scope.owner, batch, index_key(scope.owner)))


def queued(store: Store, owner: str, batch: dict, index: str) -> dict:
    """`batch` stored, listed in the owner's `index` and put on the runners' queue."""
    store.put(batch["id"], owner, batch)
    files.add_to_list(store, index, owner, {"id": batch["id"]})
    files.add_to_list(store, QUEUE_KEY, RUNNER_OWNER, {"id": batch["id"], "owner": owner})
    return batch


def new_batch(
    input_file_id: str,
    endpoint: str,
    completion_window: str,
    window: float,
    metadata: dict | None = None,
    output_seconds: int | None = None,
    prefix: str = "batch",
) -> dict:
    """A batch's document as created, expiring `window` seconds from now (`prefix`: its id's, "msgbatch"
    for Anthropic's Message Batches)."""
    now = int(time.time())
    return {
        "id": new_id(prefix),
        "object": "batch",
        "endpoint": endpoint,
        "errors": None,
        "input_file_id": input_file_id,
        "completion_window": completion_window,
        "status": "validating",
        "output_file_id": None,
        "error_file_id": None,
        "created_at": now,
        "in_progress_at": None,
        "expires_at": int(now + window),
        "finalizing_at": None,
        "completed_at": None,
        "failed_at": None,
        "expired_at": None,
        "cancelling_at": None,
        "cancelled_at": None,
        "request_counts": {"total": 0, "completed": 0, "failed": 0},
        "_expired": 0,  # of the failed, the lines the window's end left unrun
        "metadata": dict(metadata or {}),
        "usage": None,  # summed over the answers once the batch is finalized
        "_output_seconds": output_seconds,
    }


def retrieve(scope: Scope, batch_id: str) -> dict:
    return public(stored(scope.need(), scope.owner, batch_id), cancel_of(scope.need(), scope.owner, batch_id))


def stored(store: Store, owner: str, batch_id: str, prefix: str = "batch_", missing=not_found) -> dict:
    """The owner's batch (an id of another kind than `prefix`'s is none); `missing(batch_id)` raised if none."""
    batch = store.get(batch_id, owner) if batch_id.startswith(prefix) else None
    if batch is None:
        raise missing(batch_id)
    return batch


def cancel_of(store: Store, owner: str, batch_id: str) -> dict | None:
    """The cancel asked for the batch ({"id": "cancel", "at": ...}), or None."""
    return store.item(batch_id, owner, CANCEL_ITEM)


def cancel(scope: Scope, batch_id: str) -> dict:
    """The batch as it is, `cancelling` until its runner stops it (a finished batch is left as it is)."""
    ask_cancel(scope.need(), scope.owner, stored(scope.need(), scope.owner, batch_id))
    return retrieve(scope, batch_id)


def ask_cancel(store: Store, owner: str, batch: dict) -> None:
    """The cancel item added to a batch still running (its runner stops it); a finished one is left."""
    if batch["status"] not in FINISHED and cancel_of(store, owner, batch["id"]) is None:
        try:
            store.append(batch["id"], owner, [{"id": CANCEL_ITEM, "at": int(time.time())}])
        except DuplicateItem:
            pass  # cancelled twice at once


def listing(scope: Scope, query: BatchListQuery) -> dict:
    """A page of the caller's batches, newest first."""
    store = scope.need()
    try:
        page = store.page(index_key(scope.owner), scope.owner, after=query.after, limit=query.limit, order="desc")
    except UnknownCursor:
        raise NotFound(f"No batch found with id '{query.after}'.", param="after") from None
    found = []
    for entry in page.items if page is not None else []:
        batch = store.get(entry["id"], scope.owner)
        if batch is None:  # expired with the store's lifetime
            store.delete_item(index_key(scope.owner), scope.owner, entry["id"])
        else:
            found.append(public(batch, cancel_of(store, scope.owner, entry["id"])))
    return item_list(Page(found, page is not None and page.has_more))


def public(batch: dict, cancelled: dict | None = None) -> dict:
    """The batch as OpenAI shows it: without the private fields, `cancelling` once a cancel was asked."""
    shown = {name: value for name, value in batch.items() if not name.startswith("_")}
    if cancelled is not None and shown["status"] in RUNNING:
        shown |= {"status": "cancelling", "cancelling_at": cancelled["at"]}
    return shown


DASHBOARD_ROWS = 50  # the batches the dashboard shows, oldest queued first


def progress(store: Store, now: float) -> list[dict]:
    """The dashboard's rows of the batches not finished yet, every key's (dashboard.live filters them)."""
    queue = store.page(QUEUE_KEY, RUNNER_OWNER, limit=DASHBOARD_ROWS)
    rows = []
    for entry in queue.items if queue is not None else []:
        batch = store.get(entry["id"], entry["owner"])
        if batch is not None:
            rows.append(progress_row(batch, cancel_of(store, entry["owner"], entry["id"]), now))
    return rows


def progress_row(batch: dict, cancelled: dict | None, now: float) -> dict:
    """A batch's progress (pure): lines done of all, the rate since it began, the time left at that rate."""
    counts = batch["request_counts"]
    done, total = counts["completed"] + counts["failed"], counts["total"]
    began = batch.get("in_progress_at")
    per_second = done / (now - began) if began and now > began and done else None
    return {
        "id": batch["id"],
        "key": batch.get("_key"),
        "endpoint": batch["endpoint"],
        "status": public(batch, cancelled)["status"],
        "total": total,
        "completed": counts["completed"],
        "failed": counts["failed"],
        "lines_per_minute": per_second * 60 if per_second else None,
        "eta_seconds": (total - done) / per_second if per_second else None,
    }
