"""The key book: managed keys, their limit counters and their usage, kept in the proxy's store.

One interface, two backends on the store the proxy already has (`--store`): sqlite.py in the same
SQLite file (one instance, its workers), redis.py in the same Redis (instances that share it). Keys
are found by their digest on every request, never cached, so a key revoked through any instance or
the CLI is refused by every instance from its next request. Each limit check is one atomic step in
the backend (a SQLite write transaction, a Redis Lua script): no two requests take the same last place.
"""

from __future__ import annotations

import abc

from .keys import KeyRecord
from .limits import Decision
from .usage import UsageEntry

LEASE_SECONDS = 900.0   # a request in flight holds its place this long at most (a worker killed mid-request)


class KeyBook(abc.ABC):
    """Managed keys, limits and usage. Backends raise errors.StoreUnavailable when the store fails."""

    def __init__(self, store):
        self.store = store

    def digest(self, api_key: str) -> str:
        """The keyed hash a key is stored as (the owner digest of its stored objects too)."""
        return self.store.owner(api_key)

    @abc.abstractmethod
    def create(self, record: KeyRecord) -> bool:
        """Add `record`; False if its name is taken."""

    @abc.abstractmethod
    def save(self, record: KeyRecord) -> None:
        """Replace the record of the same name and digest."""

    @abc.abstractmethod
    def by_digest(self, digest: str) -> KeyRecord | None: ...

    @abc.abstractmethod
    def by_name(self, name: str) -> KeyRecord | None: ...

    @abc.abstractmethod
    def records(self) -> list[KeyRecord]:
        """Every managed key, revoked ones included, by name."""

    @abc.abstractmethod
    def admit(self, record: KeyRecord, request_id: str, now: float, max_tokens: int | None,
              audio: int = 0) -> Decision:
        """Whether a request of `record`'s key may run now (limits.decide on the counts, atomically);
        if so it is counted in the minute's requests and holds a place in flight until `finish`, and the
        `audio` milliseconds it carries are counted in the day's (against audio_seconds_per_day)."""

    @abc.abstractmethod
    def reserve(self, record: KeyRecord, request_id: str, now: float, more: int) -> Decision:
        """Whether the admitted request `request_id` may hold `more` tokens (limits.decide_more on the
        counts, atomically); if so they are added to its reservation."""

    @abc.abstractmethod
    def checkpoint(self, record: KeyRecord, request_id: str | None, now: float, entry: UsageEntry) -> None:
        """Tokens llama.cpp reported for a running request: `entry`'s tokens counted in the minute's and
        the day's (its reservation lowered by as many) and `entry` added to the key's usage; one write."""

    @abc.abstractmethod
    def finish(self, record: KeyRecord, request_id: str | None, now: float, entry: UsageEntry) -> None:
        """The request ended: `checkpoint` with its last `entry`, and its place in flight and what is left
        of its reservation (`request_id`, if admitted) freed; in one write."""

    @abc.abstractmethod
    def usage(self, since_day: str, until_day: str | None = None) -> list[UsageEntry]:
        """Every usage row from the UTC day `since_day` (YYYY-MM-DD) on, to `until_day` (inclusive) if given."""


def open_book(store) -> KeyBook | None:
    """The key book in `store` (store.Store), or None without a store (--store none)."""
    if store is None:
        return None
    if getattr(store, "shared_by_instances", False):
        from .redis import RedisKeyBook

        return RedisKeyBook(store)
    from .sqlite import SQLiteKeyBook

    return SQLiteKeyBook(store)
