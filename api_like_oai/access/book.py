"""The key book: managed keys, their limit counters and their usage, kept in the proxy's store.

One interface, two backends on the storage the proxy already has (`--store`, store/seam.py): sqlite.py
in the same SQLite file (one instance, its workers), redis.py in the same Redis (instances that share
it), chosen by the seam's declared kind. The backends do not import this module:
KeyBook is a protocol. Keys
are found by their digest on every request, never cached, so a key revoked through any instance or
the CLI is refused by every instance from its next request. Each limit check is one atomic step in
the backend (a SQLite write transaction, a Redis Lua script): no two requests take the same last place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from .keys import KeyRecord
from .limits import LEASE_SECONDS, Decision
from .usage import UsageEntry

if TYPE_CHECKING:
    from ..store import Store

__all__ = ["LEASE_SECONDS", "KeyBook", "open_book"]


class KeyBook(Protocol):
    """Managed keys, limits and usage. Backends raise errors.StoreUnavailable when the store fails."""

    def digest(self, api_key: str) -> str:
        """The keyed hash a key is stored as (the owner digest of its stored objects too)."""

    def create(self, record: KeyRecord) -> bool:
        """Add `record`; False if its name is taken."""

    def save(self, record: KeyRecord) -> None:
        """Replace the record of the same name and digest."""

    def by_digest(self, digest: str) -> KeyRecord | None: ...

    def by_name(self, name: str) -> KeyRecord | None: ...

    def records(self) -> list[KeyRecord]:
        """Every managed key, revoked ones included, by name."""

    def admit(self, record: KeyRecord, request_id: str, now: float, max_tokens: int | None, audio: int = 0) -> Decision:
        """Whether a request of `record`'s key may run now (limits.decide on the counts, atomically);
        if so it is counted in the minute's requests and holds a place in flight until `finish`, and the
        `audio` milliseconds it carries are counted in the day's (against audio_seconds_per_day)."""

    def reserve(self, record: KeyRecord, request_id: str, now: float, more: int) -> Decision:
        """Whether the admitted request `request_id` may hold `more` tokens (limits.decide_more on the
        counts, atomically); if so they are added to its reservation."""

    def checkpoint(self, record: KeyRecord, request_id: str | None, now: float, entry: UsageEntry) -> None:
        """Tokens llama.cpp reported for a running request: `entry`'s tokens counted in the minute's and
        the day's (its reservation lowered by as many) and `entry` added to the key's usage; one write."""

    def finish(self, record: KeyRecord, request_id: str | None, now: float, entry: UsageEntry) -> None:
        """The request ended: `checkpoint` with its last `entry`, and its place in flight and what is left
        of its reservation (`request_id`, if admitted) freed; in one write."""

    def usage(self, since_day: str, until_day: str | None = None) -> list[UsageEntry]:
        """Every usage row from the UTC day `since_day` (YYYY-MM-DD) on, to `until_day` (inclusive) if given."""


def open_book(store: Store | None) -> KeyBook | None:
    """The key book beside `store`, in its seam, or None without a store (--store none)."""
    if store is None:
        return None
    if store.seam.kind == "redis":
        from .redis import RedisKeyBook  # imports redis: only when chosen

        return RedisKeyBook(store)
    from .sqlite import SQLiteKeyBook

    return SQLiteKeyBook(store)
