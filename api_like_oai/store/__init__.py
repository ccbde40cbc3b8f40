"""Stored responses and conversations: one small interface (base.Store), two backends.

`open_store(settings, max_bytes)` gives the backend `--store` names, or None for `--store none`.
SQLite (sqlite.py) is the embedded default; Redis (redis.py, the optional `redis` extra) is for
several proxy instances sharing one store. Each keeps its data through its seam (seam.py), which the
key book and the dashboard's history share. The backends are imported here only when chosen: this
runs in the worker, after gevent patched the socket module Redis talks through.
"""

from __future__ import annotations

from .base import DuplicateItem, Page, Store, TooLarge, UnknownCursor
from .keys import new_id
from .settings import StoreSettings

__all__ = ["DuplicateItem", "Page", "Store", "StoreSettings", "TooLarge", "UnknownCursor", "new_id", "open_store"]


def open_store(settings: StoreSettings, max_bytes: int) -> Store | None:
    """The store `settings` describe (connected on first use); objects at most `max_bytes` each."""
    if settings.kind == "sqlite":
        from .sqlite import SQLiteStore

        return SQLiteStore(settings.location, settings.ttl_seconds, max_bytes, settings.secret_file)
    if settings.kind == "redis":
        from .redis import RedisStore

        return RedisStore(settings.location, settings.ttl_seconds, max_bytes, settings.secret_file)
    return None
