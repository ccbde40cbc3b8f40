"""The store as one caller sees it, and what the services of stored objects (stored_responses.py,
conversations.py) share: the store's refusals as the client's errors, a page of items as OpenAI's list,
and the not-found errors each API words its own way."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from ..errors import InvalidRequest, NotFound, PayloadTooLarge, StorageQuotaExceeded
from ..store import DuplicateItem, Store, TooLarge, UnknownCursor
from .stored_items import item_list


class Scope:
    """The store as one caller sees it; `store` None means --store none. `quota_bytes`: how much the
    caller's live objects may hold (--max-stored-mib, or its key's own); None: no quota."""

    def __init__(self, store: Store | None, api_key: str | None, quota_bytes: int | None = None, owner: str | None = None):
        self.store = store
        self.api_key = api_key
        self.quota_bytes = quota_bytes
        self._owner: str | None = owner  # given: a batch's line, which runs for its key without the key

    def check_room(self, writing_bytes: int = 0) -> None:
        """Before a write of about `writing_bytes`: a 413 if that alone is over the quota, a 429 once the
        caller's stored objects have reached it. Checked before, not in the write: two writes at once may
        both pass, each within the body limit."""
        if self.quota_bytes is None or self.store is None:
            return
        if writing_bytes > self.quota_bytes:
            raise PayloadTooLarge(
                f"the request ({writing_bytes} bytes) is larger than this key's storage quota ({self.quota_bytes} bytes)",
                code="storage_quota_exceeded",
            )
        stored = self.store.stored_bytes(self.owner)
        if stored >= self.quota_bytes:
            raise StorageQuotaExceeded(
                f"this key's stored responses and conversations reached its storage quota "
                f"({stored} of {self.quota_bytes} bytes); delete some, or wait for them to expire"
            )

    @property
    def owner(self) -> str:
        if self._owner is None:
            self._owner = self.need().owner(self.api_key)
        return self._owner

    def need(self, param: str | None = None) -> Store:
        """The store, or a 400 (naming `param`, the field that needs it) when storage is off."""
        if self.store is None:
            raise InvalidRequest("stored responses and conversations are off on this proxy (--store none)", param=param)
        return self.store


def response_not_found(response_id: str, param: str | None = None) -> NotFound:
    code = "previous_response_not_found" if param == "previous_response_id" else None
    prefix = "Previous response" if param else "Response"
    return NotFound(f"{prefix} with id '{response_id}' not found.", param=param, code=code)


def conversation_not_found(conversation_id: str, param: str | None = None) -> NotFound:
    return NotFound(f"Conversation with id '{conversation_id}' not found.", param=param)


@contextlib.contextmanager
def refusals(param: str):
    """Store refusals as the client's errors (400): too large (naming where the size came from,
    `param`) or a duplicate item id in the input."""
    try:
        yield
    except TooLarge:
        raise InvalidRequest(
            f"the stored {param} would be larger than the body limit (--max-body-bytes); start a new conversation", param=param
        ) from None
    except DuplicateItem as exc:
        raise InvalidRequest(
            f"Duplicate item found with id {exc.item_id!r}; remove duplicate items from your input and try again",
            param="input",
            code="duplicate_item",
        ) from None


def fetched(scope: Scope, key: str, not_found: Callable[[], NotFound]) -> dict:
    """The stored object `key` (a response, a conversation); `not_found()` is raised when there is none."""
    stored = scope.need().get(key, scope.owner)
    if stored is None:
        raise not_found()
    return stored


def removed(scope: Scope, key: str, not_found: Callable[[], NotFound]) -> None:
    """The stored object `key` deleted; `not_found()` is raised when there is none."""
    if not scope.need().delete(key, scope.owner):
        raise not_found()


def listed(scope: Scope, key: str, after: str | None, limit: int, order: str, not_found: Callable[[], NotFound]) -> dict:
    """A page of the items of the object `key` as OpenAI's list; `not_found()` is raised when there is none."""
    try:
        page = scope.need().page(key, scope.owner, after=after, limit=limit, order=order)
    except UnknownCursor:
        raise NotFound(f"No item with id '{after}' in '{key}'.", param="after") from None
    if page is None:
        raise not_found()
    return item_list(page)
