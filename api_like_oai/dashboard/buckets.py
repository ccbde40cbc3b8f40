"""Where the dashboard's history (history.py) is kept: the proxy's store, so that it survives a
restart and is shared by every worker and instance that shares the store. One small interface,
three backends: memory (--store none: the history lasts as long as the process), the SQLite file
(its own two tables), Redis (one hash per bucket, a list of errors), the last two through the store's
seam (store/seam.py), chosen by its declared kind. Counts are added, never
overwritten, so that several processes add into one bucket."""

from __future__ import annotations

import time

import orjson

from ..store import Store
from ..store.seam import PREFIX
from .history import KEEP_SECONDS, KEPT_ERRORS

Buckets = dict[tuple[int, int], dict[str, float]]  # (resolution, start) -> field -> count


def open_buckets(store: Store | None) -> MemoryBuckets | SQLiteBuckets | RedisBuckets:
    """The history's backend beside `store`, in its seam, or in memory without one."""
    if store is None:
        return MemoryBuckets()
    return RedisBuckets(store) if store.seam.kind == "redis" else SQLiteBuckets(store)


class MemoryBuckets:
    def __init__(self):
        self._buckets: Buckets = {}
        self._errors: list[dict] = []

    def add(self, counts: Buckets, errors: list[dict]) -> None:
        for key, fields in counts.items():
            bucket = self._buckets.setdefault(key, {})
            for field, count in fields.items():
                bucket[field] = bucket.get(field, 0) + count
        self._errors = (list(reversed(errors)) + self._errors)[:KEPT_ERRORS]
        oldest = {resolution: time.time() - keep for resolution, keep in KEEP_SECONDS.items()}
        for key in [key for key in self._buckets if key[1] < oldest[key[0]]]:
            del self._buckets[key]

    def read(self, resolution: int, since: int) -> dict[int, dict[str, float]]:
        return {start: dict(fields) for (kept, start), fields in self._buckets.items() if kept == resolution and start >= since}

    def errors(self, limit: int) -> list[dict]:
        return self._errors[:limit]


SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS dashboard_counts (
    resolution INTEGER NOT NULL, start INTEGER NOT NULL, field TEXT NOT NULL, count REAL NOT NULL,
    PRIMARY KEY (resolution, start, field)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dashboard_errors (seq INTEGER PRIMARY KEY AUTOINCREMENT, entry BLOB NOT NULL);
"""
ADD_COUNT = """
INSERT INTO dashboard_counts VALUES (?, ?, ?, ?)
ON CONFLICT (resolution, start, field) DO UPDATE SET count = count + excluded.count
"""


class SQLiteBuckets:
    """Two tables in the store's SQLite file, through its connection and retries (store/seam.py)."""

    def __init__(self, store: Store):
        self._run = store.seam.run
        store.seam.register("dashboard", SQLITE_SCHEMA)

    def add(self, counts: Buckets, errors: list[dict]) -> None:
        rows = [
            (resolution, start, field, count) for (resolution, start), fields in counts.items() for field, count in fields.items()
        ]
        now = time.time()

        def write(db):
            db.executemany(ADD_COUNT, rows)
            db.executemany("INSERT INTO dashboard_errors (entry) VALUES (?)", [(orjson.dumps(e),) for e in errors])
            for resolution, keep in KEEP_SECONDS.items():
                db.execute("DELETE FROM dashboard_counts WHERE resolution = ? AND start < ?", (resolution, now - keep))
            db.execute("DELETE FROM dashboard_errors WHERE seq <= (SELECT MAX(seq) FROM dashboard_errors) - ?", (KEPT_ERRORS,))

        self._run(write, write=True)

    def read(self, resolution: int, since: int) -> dict[int, dict[str, float]]:
        rows = self._run(
            lambda db: db.execute(
                "SELECT start, field, count FROM dashboard_counts WHERE resolution = ? AND start >= ?", (resolution, since)
            ).fetchall()
        )
        found: dict[int, dict[str, float]] = {}
        for start, field, count in rows:
            found.setdefault(start, {})[field] = count
        return found

    def errors(self, limit: int) -> list[dict]:
        rows = self._run(
            lambda db: db.execute("SELECT entry FROM dashboard_errors ORDER BY seq DESC LIMIT ?", (limit,)).fetchall()
        )
        return [orjson.loads(row[0]) for row in rows]


class RedisBuckets:
    """A hash per bucket (HINCRBYFLOAT: instances add into the same one) and a capped list of errors."""

    def __init__(self, store: Store):
        self.seam, self.prefix = store.seam, PREFIX + "dashboard:"

    def _bucket_key(self, resolution: int, start: int) -> str:
        return f"{self.prefix}{resolution}:{start}"

    def _call(self, operation):
        return self.seam.call(operation, self.seam.client)

    def add(self, counts: Buckets, errors: list[dict]) -> None:
        def write(client):
            pipeline = client.pipeline(transaction=False)
            for (resolution, start), fields in counts.items():
                key = self._bucket_key(resolution, start)
                for field, count in fields.items():
                    pipeline.hincrbyfloat(key, field, count)
                pipeline.expireat(key, int(start + KEEP_SECONDS[resolution]))
            if errors:
                pipeline.lpush(self.prefix + "errors", *[orjson.dumps(entry) for entry in errors])
                pipeline.ltrim(self.prefix + "errors", 0, KEPT_ERRORS - 1)
            pipeline.execute()

        self._call(write)

    def read(self, resolution: int, since: int) -> dict[int, dict[str, float]]:
        starts = list(range(since, int(time.time()) + 1, resolution))

        def read_all(client):
            pipeline = client.pipeline(transaction=False)
            for start in starts:
                pipeline.hgetall(self._bucket_key(resolution, start))
            return pipeline.execute()

        return {
            start: {field.decode(): float(count) for field, count in fields.items()}
            for start, fields in zip(starts, self._call(read_all), strict=True)
            if fields
        }

    def errors(self, limit: int) -> list[dict]:
        return [orjson.loads(entry) for entry in self._call(lambda client: client.lrange(self.prefix + "errors", 0, limit - 1))]
