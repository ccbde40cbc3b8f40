"""OpenAI's Files API over the store: a file is an object whose document is OpenAI's file object and
whose items are its content in chunks (text, or base64 for bytes that are not UTF-8), owned by the key
that uploaded it (or, for a batch's results, the key of the batch); a key's files are listed through
an index object of its own (items: the file ids in upload order).

Content lives where the store keeps everything (SQLite's file on disk, or Redis), not in files of
our own beside it: a fleet's instances share Redis, and a batch's output written on one box must be
read on any. A file is bounded by the request body limit (an upload is one request); a batch's
result files by RESULT_FACTOR times that (store.limited_to). Expiry is the file's own `expires_at`
(OpenAI's `expires_after`, at most the store's lifetime, which bounds every object anyway): an
expired file is deleted when it is next read or listed.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterable

from ..errors import InvalidRequest, NotFound, PayloadTooLarge
from ..services.scope import Scope
from ..services.stored_items import item_list
from ..store import DuplicateItem, Page, Store, TooLarge, UnknownCursor, new_id
from .models import FileListQuery, FileUpload

CHUNK_CHARACTERS = 256 * 1024  # an item of a file's content: a bounded read or write each
MAX_BATCH_LINES = 50_000  # OpenAI's limit on the requests of one batch file
RESULT_FACTOR = 4  # a batch's output file may hold this many request bodies' worth of answers


def index_key(owner: str) -> str:
    """The object listing `owner`'s files (not a file id: those start with "file-")."""
    return f"files-of-{owner}"


def not_found(file_id: str, param: str | None = None) -> NotFound:
    return NotFound(f"No such File object: {file_id}", param=param)


def create(scope: Scope, filename: str, content: bytes, upload: FileUpload) -> dict:
    """The uploaded file stored and listed; a batch file of more than MAX_BATCH_LINES lines is a 400."""
    store = scope.need(param="file")
    if upload.purpose == "batch" and content.count(b"\n") + (not content.endswith(b"\n")) > MAX_BATCH_LINES:
        raise InvalidRequest(f"a batch file holds at most {MAX_BATCH_LINES} lines", param="file")
    now = int(time.time())
    lifetime = min(upload.expires_after.seconds if upload.expires_after else store.ttl_seconds, store.ttl_seconds)
    document = new_file(filename, upload.purpose, len(content), now, int(now + lifetime))
    try:
        store.put(document["id"], scope.owner, document, chunks(content))
    except TooLarge:
        raise PayloadTooLarge("the file is larger than this proxy stores (--max-body-bytes)", param="file") from None
    listed(store, scope.owner, document["id"])
    return document


def new_file(filename: str, purpose: str, size: int, created_at: int, expires_at: int) -> dict:
    """OpenAI's file object of a new file."""
    return {
        "id": new_id("file").replace("_", "-", 1),
        "object": "file",
        "bytes": size,
        "created_at": created_at,
        "expires_at": expires_at,
        "filename": filename,
        "purpose": purpose,
        "status": "processed",
        "status_details": None,
    }


def listed(store: Store, owner: str, file_id: str) -> None:
    """`file_id` added to its owner's index (made by the first of the owner's files)."""
    add_to_list(store, index_key(owner), owner, {"id": file_id})


def add_to_list(store: Store, key: str, owner: str, item: dict) -> None:
    """`item` appended to the list object `key`, which the first caller creates (only_new: of two
    creating it at once, the other one appends); an item already there is left as it is."""
    try:
        while not store.append(key, owner, [item]):
            if store.put(key, owner, {"id": key}, [item], only_new=True):
                return
    except DuplicateItem:
        pass


def retrieve(scope: Scope, file_id: str) -> dict:
    """The caller's file object; 404 for another key's, a deleted or an expired one."""
    store = scope.need()
    document = store.get(file_id, scope.owner) if file_id.startswith("file-") else None
    if document is None or expired(document):
        if document is not None:
            remove(store, scope.owner, file_id)
        raise not_found(file_id)
    return document


def expired(document: dict, now: float | None = None) -> bool:
    expires_at = document.get("expires_at")
    return expires_at is not None and expires_at <= (now or time.time())


def content(scope: Scope, file_id: str) -> tuple[bytes, str]:
    """(the file's bytes, its name)."""
    document = retrieve(scope, file_id)
    page = scope.need().page(file_id, scope.owner)
    return joined(page.items if page is not None else []), document["filename"]


def delete(scope: Scope, file_id: str) -> dict:
    retrieve(scope, file_id)
    remove(scope.need(), scope.owner, file_id)
    return {"id": file_id, "object": "file", "deleted": True}


def remove(store: Store, owner: str, file_id: str) -> None:
    store.delete(file_id, owner)
    store.delete_item(index_key(owner), owner, file_id)


def listing(scope: Scope, query: FileListQuery) -> dict:
    """A page of the caller's live files as OpenAI's list (newest first unless `order` is asc)."""
    store = scope.need()
    try:
        page = store.page(index_key(scope.owner), scope.owner, after=query.after, limit=query.limit, order=query.order)
    except UnknownCursor:
        raise NotFound(f"No such File object: {query.after}", param="after") from None
    files = []
    for entry in page.items if page is not None else []:
        document = store.get(entry["id"], scope.owner)
        if document is None or expired(document):
            remove(store, scope.owner, entry["id"])
        elif query.purpose is None or document["purpose"] == query.purpose:
            files.append(document)
    return item_list(Page(files, page is not None and page.has_more))


def chunks(content: bytes) -> list[dict]:
    """The content as items: text in pieces of CHUNK_CHARACTERS, or bytes that are not UTF-8 as base64."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        step = CHUNK_CHARACTERS // 4 * 3
        return [
            {"id": str(n), "base64": base64.b64encode(content[start : start + step]).decode()}
            for n, start in enumerate(range(0, len(content), step))
        ]
    starts = range(0, len(text), CHUNK_CHARACTERS)
    return [{"id": str(n), "text": text[start : start + CHUNK_CHARACTERS]} for n, start in enumerate(starts)]


def joined(items: Iterable[dict]) -> bytes:
    """The bytes of content items (chunks, or a result file's lines)."""
    return b"".join(item["text"].encode() if "text" in item else base64.b64decode(item["base64"]) for item in items)
