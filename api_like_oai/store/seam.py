"""The storage seam: the one place the proxy's state meets SQLite or Redis.

The response store, the key book (access/) and the dashboard's history (dashboard/buckets.py) keep
their data in the same storage, which `--store` names. Each reaches it through one of two seams,
whose `kind` ("sqlite" or "redis") is declared, so a subsystem picks its own backend by it:

- `SQLiteFile`: one file in WAL mode, one connection per process, `run(operation, write)` with the
  retries and the transaction; each subsystem `register`s its tables, made before its first use.
- `RedisServer`: one client, `call(command, ...)` and `script(source)`, each subsystem registering
  its Lua scripts.

Either maps its driver's failures to `errors.StoreUnavailable` (a 503), the one error every
subsystem above sees. Under gevent a SQLite call does not yield to the event loop: it runs to its
end while every other stream of the worker waits. So the calls are kept short (one indexed statement
or one small transaction) and SQLite never waits inside a call: the busy timeout is 0, and a write
that finds another process's write in progress is retried after a `time.sleep`, which gevent makes
a switch to the event loop, not a stall of the worker. redis-py talks through the standard socket
module, which the worker patches: a wait for Redis is a switch too. `redis` is imported only here,
and only when a Redis seam is opened (the optional extra).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

from ..errors import StoreUnavailable

Kind = Literal["sqlite", "redis"]
Column = tuple[str, str, str]  # (table, column, definition): a column added to a table since it was first made
T = TypeVar("T")

BUSY_CODES = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
GIVE_UP_SECONDS = 5.0  # on a lock held this long, the storage is taken as failed (503)
REDIS_TIMEOUT_SECONDS = 5.0
PREFIX = "api-like-oai:"  # every subsystem's Redis keys start so (a Redis shared with other programs)


class SQLiteFile:
    """One SQLite file shared by every worker of the instance; each process opens its own connection
    (after the fork, on first use) and lets one greenlet or thread use it at a time."""

    kind: Kind = "sqlite"

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._lock = threading.RLock()
        self._connection: sqlite3.Connection | None = None
        self._pid = 0
        self._schemas: dict[str, tuple[str, tuple[Column, ...]]] = {}
        self._made: set[str] = set()

    def register(self, name: str, schema: str, added_columns: tuple[Column, ...] = ()) -> None:
        """A subsystem's tables (`CREATE ... IF NOT EXISTS`), made on each process's connection before
        the next `run`, and the columns added to them since (table, column, definition), added to a
        file an older proxy made; registering the same name again changes nothing."""
        self._schemas.setdefault(name, (schema, added_columns))

    def run(self, operation: Callable[[sqlite3.Connection], T], write: bool = False) -> T:
        """`operation(connection)`, in one transaction (BEGIN IMMEDIATE) if `write`, retried while
        another process writes; any SQLite failure is StoreUnavailable."""
        deadline = time.monotonic() + GIVE_UP_SECONDS
        pause = 0.001
        with self._lock:
            while True:
                try:
                    connection = self._connect()
                    return _transaction(connection, operation) if write else operation(connection)
                except sqlite3.OperationalError as exc:
                    if _busy(exc) and time.monotonic() < deadline:
                        time.sleep(pause)  # under gevent: the event loop runs other greenlets meanwhile
                        pause = min(pause * 2, 0.05)
                        continue
                    raise StoreUnavailable(f"the store (SQLite) failed: {exc}") from exc
                except sqlite3.Error as exc:
                    raise StoreUnavailable(f"the store (SQLite) failed: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def _connect(self) -> sqlite3.Connection:
        """This process's connection, opened on first use (a forked worker opens its own), with every
        registered subsystem's tables."""
        if self._connection is None or self._pid != os.getpid():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(self.path, timeout=0, isolation_level=None, check_same_thread=False)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")  # durable at checkpoints; never corrupt
            self._connection, self._pid, self._made = connection, os.getpid(), set()
        for name in self._schemas.keys() - self._made:
            schema, added_columns = self._schemas[name]
            self._connection.executescript(schema)
            if added_columns:  # in a write transaction: one process adds each
                _transaction(self._connection, lambda db, added=added_columns: _add_columns(db, added))
            self._made.add(name)
        return self._connection


def _add_columns(connection: sqlite3.Connection, added_columns: tuple[Column, ...]) -> None:
    for table, column, definition in added_columns:
        if column not in {row[1] for row in connection.execute(f"PRAGMA table_info({table})")}:
            connection.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")


def _transaction(connection: sqlite3.Connection, operation: Callable[[sqlite3.Connection], T]) -> T:
    connection.execute("BEGIN IMMEDIATE")
    try:
        result = operation(connection)
        connection.execute("COMMIT")
        return result
    except BaseException:
        connection.execute("ROLLBACK")
        raise


def _busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return (code & 0xFF) in BUSY_CODES if code is not None else "locked" in str(exc)


class RedisServer:
    """One Redis client for every subsystem of the process (several instances share the server)."""

    kind: Kind = "redis"

    def __init__(self, url: str):
        import redis  # the optional extra, imported only when chosen (arguments.py checked it is there)

        self.client = redis.Redis.from_url(
            url, socket_timeout=REDIS_TIMEOUT_SECONDS, socket_connect_timeout=REDIS_TIMEOUT_SECONDS, health_check_interval=30
        )
        self._failure = redis.RedisError
        self._scripts: dict[str, Any] = {}

    def call(self, command: Callable[..., T], *args) -> T:
        """`command(*args)` (a client method, a pipeline's execute, a registered script), any Redis
        failure as StoreUnavailable."""
        try:
            return command(*args)
        except self._failure as exc:
            raise StoreUnavailable(f"the store (Redis) failed: {exc}") from exc

    def script(self, source: str):
        """A subsystem's Lua script, registered once per process (sent by its digest, EVALSHA)."""
        if source not in self._scripts:
            self._scripts[source] = self.client.register_script(source)
        return self._scripts[source]

    def run_script(self, source: str, keys: list[str], args: list):
        """The script `source` run on `keys` with `args`, in one round trip, atomically."""
        script = self.script(source)
        return self.call(lambda: script(keys=keys, args=args))

    def close(self) -> None:
        self.client.close()


Seam = SQLiteFile | RedisServer
