"""The store's interface: objects and the lists of items under them, each owned by one caller.

An object is a JSON document under an id (a response, a conversation) with an owner and a lifetime;
it may have an ordered list of items (a response's input items, a conversation's items), each with
an "id" unique in its list. Every write renews the object's lifetime (`ttl_seconds`); an object
with its document and items is never larger than `max_bytes` (the request body limit: what a
client could have sent in one request). Every public method takes the caller's owner digest
(keys.owner_digest) and treats an object owned by another caller as one that does not exist.

Backends (sqlite.py, redis.py) implement the underscored methods on encoded JSON; they raise
errors.StoreUnavailable when their storage fails, and make each write atomic.
"""

from __future__ import annotations

import abc
import copy
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from . import keys

if TYPE_CHECKING:
    from .seam import Seam


class DuplicateItem(Exception):
    """An item id already in the list (or twice in what is added)."""

    def __init__(self, item_id: str):
        super().__init__(f"duplicate item id {item_id!r}")
        self.item_id = item_id


class TooLarge(Exception):
    """The object would be larger than `max_bytes` with what is written."""


class UnknownCursor(Exception):
    """`after` names no item of the list."""


@dataclass(frozen=True)
class Page:
    items: list[dict]
    has_more: bool


Encoded = tuple[str, bytes]  # an item's id and its JSON


class Store(abc.ABC):
    # Where the store keeps its data (seam.py): the key book and the dashboard's history keep theirs in
    # the same place, choosing their backend by its declared `kind`.
    seam: Seam

    def __init__(self, ttl_seconds: float, max_bytes: int, secret_file: str | None = None):
        self.ttl_seconds = ttl_seconds
        self.max_bytes = max_bytes
        self.secret_file = secret_file
        self._secret: bytes | None = None

    def owner(self, api_key: str | None) -> str:
        """The owner digest of a caller with `api_key` (None: the proxy asks for no key)."""
        if api_key is None:
            return keys.SHARED_OWNER
        return keys.owner_digest(self.secret(), api_key)

    def secret(self) -> bytes:
        """The store's secret (--store-secret-file, else the backend's own), loaded on first use."""
        if self._secret is None:
            self._secret = keys.file_secret(self.secret_file) if self.secret_file else self._default_secret()
        return self._secret

    # --- objects ---------------------------------------------------------------------------------

    def get(self, key: str, owner: str) -> dict | None:
        loaded = self._load(key)
        if loaded is None or not keys.same_owner(loaded[0], owner):
            return None
        return decode(loaded[1])

    def put(self, key: str, owner: str, document: dict, items: Sequence[dict] = (), *, only_new: bool = False) -> bool:
        """Create (or replace) the object with these items; with `only_new`, only if there is no live
        object under `key` (atomically: of two callers, one creates it). Whether it was written;
        TooLarge, DuplicateItem."""
        encoded_document, encoded_items = encode(document), _encoded(items)
        if len(encoded_document) + sum(len(item) for _, item in encoded_items) > self.max_bytes:
            raise TooLarge
        if not self._put(key, owner, encoded_document, encoded_items, only_new):
            return False
        return self._note_owner(key, owner)

    def limited_to(self, max_bytes: int) -> Store:
        """This store (the same connections) holding objects of at most `max_bytes` each: a batch's
        output files may be larger than one request body."""
        clone = copy.copy(self)
        clone.max_bytes = max_bytes
        return clone

    def update(self, key: str, owner: str, document: dict) -> bool:
        """Replace the document, keeping the items; False if there is no such object; TooLarge."""
        return self._owns(key, owner) and self._update(key, encode(document)) and self._note_owner(key, owner)

    def delete(self, key: str, owner: str) -> bool:
        return self._owns(key, owner) and self._delete(key)

    # --- the object's items ----------------------------------------------------------------------

    def append(self, key: str, owner: str, items: Sequence[dict]) -> bool:
        """Add items at the end, atomically; False if there is no such object; TooLarge, DuplicateItem."""
        return self._owns(key, owner) and self._append(key, _encoded(items)) and self._note_owner(key, owner)

    def page(
        self, key: str, owner: str, *, after: str | None = None, limit: int | None = None, order: str = "asc"
    ) -> Page | None:
        """Up to `limit` items (all if None) after the item `after`, in `order` ("asc" or "desc");
        None if there is no such object; UnknownCursor."""
        if not self._owns(key, owner):
            return None
        found = self._page(key, after, limit + 1 if limit is not None else None, order == "desc")
        if found is None:
            raise UnknownCursor(after)
        has_more = limit is not None and len(found) > limit
        return Page([decode(item) for item in found[:limit]], has_more)

    def item(self, key: str, owner: str, item_id: str) -> dict | None:
        found = self._item(key, item_id) if self._owns(key, owner) else None
        return decode(found) if found is not None else None

    def delete_item(self, key: str, owner: str, item_id: str) -> bool:
        return self._owns(key, owner) and self._delete_item(key, item_id)

    def stored_bytes(self, owner: str) -> int:
        """The size of the owner's live objects, documents and items (a storage quota's measure)."""
        return self._stored_bytes(owner)

    def close(self) -> None:  # noqa: B027 - a backend without connections has nothing to release
        """Release connections (tests, shutdown)."""

    def _note_owner(self, key: str, owner: str) -> bool:
        """After a write: a backend without an index of owners' objects (Redis) renews it here; True."""
        return True

    def _owns(self, key: str, owner: str) -> bool:
        stored = self._owner(key)
        return stored is not None and keys.same_owner(stored, owner)

    # --- what a backend implements: unscoped, on encoded JSON; expired objects do not exist -----

    @abc.abstractmethod
    def _default_secret(self) -> bytes: ...

    @abc.abstractmethod
    def _stored_bytes(self, owner: str) -> int: ...

    @abc.abstractmethod
    def _load(self, key: str) -> tuple[str, bytes] | None:
        """(owner, document)."""

    @abc.abstractmethod
    def _owner(self, key: str) -> str | None: ...

    @abc.abstractmethod
    def _put(self, key: str, owner: str, document: bytes, items: list[Encoded], only_new: bool) -> bool:
        """Whether it was written (with `only_new`, not over a live object)."""

    @abc.abstractmethod
    def _update(self, key: str, document: bytes) -> bool: ...

    @abc.abstractmethod
    def _delete(self, key: str) -> bool: ...

    @abc.abstractmethod
    def _append(self, key: str, items: list[Encoded]) -> bool: ...

    @abc.abstractmethod
    def _page(self, key: str, after: str | None, count: int | None, descending: bool) -> list[bytes] | None:
        """Up to `count` items (all if None); None if `after` is not in the list."""

    @abc.abstractmethod
    def _item(self, key: str, item_id: str) -> bytes | None: ...

    @abc.abstractmethod
    def _delete_item(self, key: str, item_id: str) -> bool: ...


def _encoded(items: Iterable[dict]) -> list[Encoded]:
    """Each item's id and JSON; DuplicateItem if an id comes twice."""
    encoded, seen = [], set()
    for item in items:
        item_id = item["id"]
        if item_id in seen:
            raise DuplicateItem(item_id)
        seen.add(item_id)
        encoded.append((item_id, encode(item)))
    return encoded


def encode(document) -> bytes:
    """JSON bytes; orjson's, or for integers beyond 64 bits (which it refuses) the standard library's
    after one space, so that `decode` knows to read them back exactly (orjson would read floats)."""
    try:
        return orjson.dumps(document)
    except TypeError:
        return b" " + json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()


def decode(encoded: bytes):
    return json.loads(encoded) if encoded[:1] == b" " else orjson.loads(encoded)
