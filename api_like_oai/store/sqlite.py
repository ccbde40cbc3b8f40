"""The embedded store: one SQLite file in WAL mode, shared by every worker of the proxy.

WAL lets readers go on while one writer commits, and every write here is one short transaction,
so several gunicorn workers share the file. Each process opens its own connection (after the fork,
on first use) and lets one greenlet or thread use it at a time.

Under gevent a SQLite call does not yield to the event loop: it runs to its end while every other
stream of the worker waits. So the calls are kept short (one indexed statement or one small
transaction) and SQLite never waits inside a call: the busy timeout is 0, and a write that finds
another process's write in progress is retried after a `time.sleep`, which gevent makes a switch
to the event loop, not a stall of the worker.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

from ..errors import StoreUnavailable
from . import keys
from .base import DuplicateItem, Encoded, Store, TooLarge

BUSY_CODES = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
GIVE_UP_SECONDS = 5.0     # on a lock held this long, the store is taken as failed (503)
PURGE_INTERVAL = 60.0     # seconds between two removals of expired objects by one process
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
        super().__init__(ttl_seconds, max_bytes, secret_file)
        self.path = Path(path)
        self._lock = threading.RLock()
        self._connection: sqlite3.Connection | None = None
        self._pid = 0
        self._next_purge = 0.0

    def _default_secret(self) -> bytes:
        return keys.file_secret(self.path.with_name(self.path.name + ".secret"))

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    # --- connection, retries, transactions -------------------------------------------------------

    def run(self, operation, write: bool = False):
        """`operation(connection)` on this process's connection, in one transaction if `write`, with the
        store's retries and errors: for the other tables kept in the same file (access/sqlite.py)."""
        return self._run(operation, write)

    def _connect(self) -> sqlite3.Connection:
        """This process's connection, opened on first use (a forked worker opens its own)."""
        if self._connection is None or self._pid != os.getpid():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(self.path, timeout=0, isolation_level=None, check_same_thread=False)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")   # durable at checkpoints; never corrupt
            connection.executescript(SCHEMA)
            self._connection, self._pid = connection, os.getpid()
        return self._connection

    def _run(self, operation, write: bool = False):
        """`operation(connection)`, in a transaction if `write`, retried while another process writes."""
        deadline = time.monotonic() + GIVE_UP_SECONDS
        pause = 0.001
        with self._lock:
            while True:
                try:
                    connection = self._connect()
                    return self._transaction(connection, operation) if write else operation(connection)
                except sqlite3.OperationalError as exc:
                    if _busy(exc) and time.monotonic() < deadline:
                        time.sleep(pause)   # under gevent: the event loop runs other greenlets meanwhile
                        pause = min(pause * 2, 0.05)
                        continue
                    raise StoreUnavailable(f"the response store failed: {exc}") from exc
                except sqlite3.Error as exc:
                    raise StoreUnavailable(f"the response store failed: {exc}") from exc

    def _transaction(self, connection: sqlite3.Connection, operation):
        connection.execute("BEGIN IMMEDIATE")
        try:
            result = operation(connection)
            self._purge_if_due(connection)
            connection.execute("COMMIT")
            return result
        except BaseException:
            connection.execute("ROLLBACK")
            raise

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
        return self._run(lambda db: db.execute("SELECT owner, document FROM objects WHERE key = ? AND expires_at > ?",
                                               (key, time.time())).fetchone())

    def _stored_bytes(self, owner: str) -> int:
        row = self._run(lambda db: db.execute("SELECT coalesce(sum(length(document) + items_size), 0) FROM objects "
                                              "WHERE owner = ? AND expires_at > ?", (owner, time.time())).fetchone())
        return row[0]

    def _owner(self, key: str) -> str | None:
        row = self._run(lambda db: db.execute("SELECT owner FROM objects WHERE key = ? AND expires_at > ?",
                                              (key, time.time())).fetchone())
        return row[0] if row else None

    def _put(self, key: str, owner: str, document: bytes, items: list[Encoded]) -> None:
        def put(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM items WHERE list_key = ?", (key,))
            db.execute("INSERT OR REPLACE INTO objects VALUES (?, ?, ?, ?, ?, ?)",
                       (key, owner, document, sum(len(item) for _, item in items), len(items), self._expires_at()))
            db.executemany("INSERT INTO items VALUES (?, ?, ?, ?)",
                           [(key, seq, item_id, item) for seq, (item_id, item) in enumerate(items, 1)])

        self._run(put, write=True)

    def _update(self, key: str, document: bytes) -> bool:
        def update(db: sqlite3.Connection) -> bool:
            row = db.execute("SELECT items_size FROM objects WHERE key = ? AND expires_at > ?",
                             (key, time.time())).fetchone()
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
            row = db.execute("SELECT next_seq, items_size + length(document) FROM objects WHERE key = ? AND expires_at > ?",
                             (key, time.time())).fetchone()
            if row is None:
                return False
            last_seq, size = row
            added = sum(len(item) for _, item in items)
            if size + added > self.max_bytes:
                raise TooLarge
            for item_id, _ in items:
                if db.execute("SELECT 1 FROM items WHERE list_key = ? AND item_id = ?", (key, item_id)).fetchone():
                    raise DuplicateItem(item_id)
            db.executemany("INSERT INTO items VALUES (?, ?, ?, ?)",
                           [(key, seq, item_id, item) for seq, (item_id, item) in enumerate(items, last_seq + 1)])
            db.execute("UPDATE objects SET next_seq = ?, items_size = items_size + ?, expires_at = ? WHERE key = ?",
                       (last_seq + len(items), added, self._expires_at(), key))
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
            query = "SELECT item FROM items WHERE list_key = ? AND seq < ? ORDER BY seq DESC LIMIT ?" if descending \
                else "SELECT item FROM items WHERE list_key = ? AND seq > ? ORDER BY seq LIMIT ?"
            return [row[0] for row in db.execute(query, (key, start, -1 if count is None else count))]

        return self._run(page)

    def _item(self, key: str, item_id: str) -> bytes | None:
        row = self._run(lambda db: db.execute("SELECT item FROM items WHERE list_key = ? AND item_id = ?",
                                              (key, item_id)).fetchone())
        return row[0] if row else None

    def _delete_item(self, key: str, item_id: str) -> bool:
        def delete_item(db: sqlite3.Connection) -> bool:
            removed = db.execute("DELETE FROM items WHERE list_key = ? AND item_id = ? RETURNING length(item)",
                                 (key, item_id)).fetchall()
            if not removed:
                return False
            db.execute("UPDATE objects SET items_size = items_size - ?, expires_at = ? WHERE key = ?",
                       (sum(size for (size,) in removed), self._expires_at(), key))
            return True

        return self._run(delete_item, write=True)


def _busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return (code & 0xFF) in BUSY_CODES if code is not None else "locked" in str(exc)
