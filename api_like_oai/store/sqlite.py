"""The embedded store: its tables in the proxy's SQLite file (store/seam.SQLiteFile), shared by
every worker of the proxy.

WAL lets readers go on while one writer commits, and every write here is one short transaction, so
several gunicorn workers share the file; the seam's `run` keeps the calls short and retried without
waiting inside SQLite (a switch to the event loop under gevent).
"""

from __future__ import annotations

import os
import sqlite3
import time

from . import keys
from .base import DuplicateItem, Encoded, Store, TooLarge
from .seam import SQLiteFile

PURGE_INTERVAL = 60.0  # seconds between two removals of expired objects by one process
LAST_SEQ = 2**62

SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    key TEXT PRIMARY KEY, owner TEXT NOT NULL, document BLOB NOT NULL,
    items_size INTEGER NOT NULL, next_seq INTEGER NOT NULL, expires_at REAL NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS objects_by_expiry ON objects (expires_at);
CREATE INDEX IF NOT EXISTS objects_by_owner ON objects (owner);
CREATE TABLE IF NOT EXISTS items (
    list_key TEXT NOT NULL, seq INTEGER NOT NULL, item_id TEXT NOT NULL, item BLOB NOT NULL,
    PRIMARY KEY (list_key, seq)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS items_by_id ON items (list_key, item_id);
"""


class SQLiteStore(Store):
    def __init__(self, path: str | os.PathLike, ttl_seconds: float, max_bytes: int, secret_file: str | None = None):
        self.seam = SQLiteFile(path)
        super().__init__(ttl_seconds, max_bytes, secret_file)
        self.seam.register("store", SCHEMA)
        self._next_purge = 0.0

    @property
    def path(self):
        return self.seam.path

    def _default_secret(self) -> bytes:
        return keys.file_secret(self.path.with_name(self.path.name + ".secret"))

    def close(self) -> None:
        self.seam.close()

    # --- reads, writes ---------------------------------------------------------------------------

    def _run(self, operation, write: bool = False):
        """`operation(connection)` through the seam; a write also drops what expired, once a minute."""
        if not write:
            return self.seam.run(operation)

        def then_purge(connection: sqlite3.Connection):
            result = operation(connection)
            self._purge_if_due(connection)
            return result

        return self.seam.run(then_purge, write=True)

    def _purge_if_due(self, connection: sqlite3.Connection) -> None:
        now = time.time()
        if now < self._next_purge:
            return
        self._next_purge = now + PURGE_INTERVAL
        connection.execute("DELETE FROM items WHERE list_key IN (SELECT key FROM objects WHERE expires_at <= ?)", (now,))
        connection.execute("DELETE FROM objects WHERE expires_at <= ?", (now,))

    def _expires_at(self) -> float:
        return time.time() + self.ttl_seconds

    # --- objects ---------------------------------------------------------------------------------

    def _load(self, key: str) -> tuple[str, bytes] | None:
        return self._run(
            lambda db: db.execute(
                "SELECT owner, document FROM objects WHERE key = ? AND expires_at > ?", (key, time.time())
            ).fetchone()
        )

    def _stored_bytes(self, owner: str) -> int:
        row = self._run(
            lambda db: db.execute(
                "SELECT coalesce(sum(length(document) + items_size), 0) FROM objects WHERE owner = ? AND expires_at > ?",
                (owner, time.time()),
            ).fetchone()
        )
        return row[0]

    def _owner(self, key: str) -> str | None:
        row = self._run(
            lambda db: db.execute("SELECT owner FROM objects WHERE key = ? AND expires_at > ?", (key, time.time())).fetchone()
        )
        return row[0] if row else None

    def _put(self, key: str, owner: str, document: bytes, items: list[Encoded], only_new: bool) -> bool:
        def put(db: sqlite3.Connection) -> bool:
            if only_new and db.execute("SELECT 1 FROM objects WHERE key = ? AND expires_at > ?", (key, time.time())).fetchone():
                return False
            db.execute("DELETE FROM items WHERE list_key = ?", (key,))
            db.execute(
                "INSERT OR REPLACE INTO objects VALUES (?, ?, ?, ?, ?, ?)",
                (key, owner, document, sum(len(item) for _, item in items), len(items), self._expires_at()),
            )
            db.executemany(
                "INSERT INTO items VALUES (?, ?, ?, ?)",
                [(key, seq, item_id, item) for seq, (item_id, item) in enumerate(items, 1)],
            )
            return True

        return self._run(put, write=True)

    def _update(self, key: str, document: bytes) -> bool:
        def update(db: sqlite3.Connection) -> bool:
            row = db.execute("SELECT items_size FROM objects WHERE key = ? AND expires_at > ?", (key, time.time())).fetchone()
            if row is None:
                return False
            if row[0] + len(document) > self.max_bytes:
                raise TooLarge
            db.execute("UPDATE objects SET document = ?, expires_at = ? WHERE key = ?", (document, self._expires_at(), key))
            return True

        return self._run(update, write=True)

    def _delete(self, key: str) -> bool:
        def delete(db: sqlite3.Connection) -> bool:
            db.execute("DELETE FROM items WHERE list_key = ?", (key,))
            return bool(db.execute("DELETE FROM objects WHERE key = ? AND expires_at > ?", (key, time.time())).rowcount)

        return self._run(delete, write=True)

    # --- items -----------------------------------------------------------------------------------

    def _append(self, key: str, items: list[Encoded]) -> bool:
        def append(db: sqlite3.Connection) -> bool:
            row = db.execute(
                "SELECT next_seq, items_size + length(document) FROM objects WHERE key = ? AND expires_at > ?", (key, time.time())
            ).fetchone()
            if row is None:
                return False
            last_seq, size = row
            added = sum(len(item) for _, item in items)
            if size + added > self.max_bytes:
                raise TooLarge
            for item_id, _ in items:
                if db.execute("SELECT 1 FROM items WHERE list_key = ? AND item_id = ?", (key, item_id)).fetchone():
                    raise DuplicateItem(item_id)
            db.executemany(
                "INSERT INTO items VALUES (?, ?, ?, ?)",
                [(key, seq, item_id, item) for seq, (item_id, item) in enumerate(items, last_seq + 1)],
            )
            db.execute(
                "UPDATE objects SET next_seq = ?, items_size = items_size + ?, expires_at = ? WHERE key = ?",
                (last_seq + len(items), added, self._expires_at(), key),
            )
            return True

        return self._run(append, write=True)

    def _page(self, key: str, after: str | None, count: int | None, descending: bool) -> list[bytes] | None:
        def page(db: sqlite3.Connection) -> list[bytes] | None:
            if after is None:
                start = LAST_SEQ if descending else 0
            else:
                row = db.execute("SELECT seq FROM items WHERE list_key = ? AND item_id = ?", (key, after)).fetchone()
                if row is None:
                    return None
                start = row[0]
            query = (
                "SELECT item FROM items WHERE list_key = ? AND seq < ? ORDER BY seq DESC LIMIT ?"
                if descending
                else "SELECT item FROM items WHERE list_key = ? AND seq > ? ORDER BY seq LIMIT ?"
            )
            return [row[0] for row in db.execute(query, (key, start, -1 if count is None else count))]

        return self._run(page)

    def _item(self, key: str, item_id: str) -> bytes | None:
        row = self._run(
            lambda db: db.execute("SELECT item FROM items WHERE list_key = ? AND item_id = ?", (key, item_id)).fetchone()
        )
        return row[0] if row else None

    def _delete_item(self, key: str, item_id: str) -> bool:
        def delete_item(db: sqlite3.Connection) -> bool:
            removed = db.execute(
                "DELETE FROM items WHERE list_key = ? AND item_id = ? RETURNING length(item)", (key, item_id)
            ).fetchall()
            if not removed:
                return False
            db.execute(
                "UPDATE objects SET items_size = items_size - ?, expires_at = ? WHERE key = ?",
                (sum(size for (size,) in removed), self._expires_at(), key),
            )
            return True

        return self._run(delete_item, write=True)
