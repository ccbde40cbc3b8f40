"""The key book in the proxy's SQLite file (store/seam.SQLiteFile): its own tables, registered with
the seam, the same connection and the same retries. Each admission is one write transaction (BEGIN
IMMEDIATE): every worker of the instance sees the counts the others wrote, and no two take the same
last place."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from .keys import KeyRecord
from .limits import LEASE_SECONDS, WINDOW_SECONDS, Counts, Decision, day_of, decide, decide_more
from .usage import UsageEntry

if TYPE_CHECKING:
    from ..store import Store

SCHEMA = """
CREATE TABLE IF NOT EXISTS access_keys (
    digest TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, record BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS access_seconds (
    key_name TEXT NOT NULL, kind TEXT NOT NULL, second INTEGER NOT NULL, amount INTEGER NOT NULL,
    PRIMARY KEY (key_name, kind, second)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS access_days (
    key_name TEXT NOT NULL, day TEXT NOT NULL, tokens INTEGER NOT NULL, audio_ms INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (key_name, day)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS access_leases (
    request_id TEXT PRIMARY KEY, key_name TEXT NOT NULL, expires_at REAL NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS access_leases_by_key ON access_leases (key_name, expires_at);
CREATE TABLE IF NOT EXISTS access_reserved (
    request_id TEXT PRIMARY KEY, key_name TEXT NOT NULL, tokens INTEGER NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS access_reserved_by_key ON access_reserved (key_name);
CREATE TABLE IF NOT EXISTS access_usage (
    day TEXT NOT NULL, key_name TEXT NOT NULL, model TEXT NOT NULL, api TEXT NOT NULL,
    requests INTEGER NOT NULL, prompt_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL, errors INTEGER NOT NULL, seconds REAL NOT NULL,
    audio_seconds REAL NOT NULL DEFAULT 0, PRIMARY KEY (day, key_name, model, api)) WITHOUT ROWID;
"""
# Columns added since the tables were first made: (table, column, its definition), added by the seam to
# a file an older proxy made (SQLite appends them, so the columns keep UsageEntry's order).
ADDED_COLUMNS = (
    ("access_days", "audio_ms", "INTEGER NOT NULL DEFAULT 0"),
    ("access_usage", "audio_seconds", "REAL NOT NULL DEFAULT 0"),
)
ADD_TO_SECOND = """
INSERT INTO access_seconds VALUES (?, ?, ?, ?)
ON CONFLICT (key_name, kind, second) DO UPDATE SET amount = amount + excluded.amount
"""
ADD_USAGE = """
INSERT INTO access_usage VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (day, key_name, model, api) DO UPDATE SET
requests = requests + excluded.requests, prompt_tokens = prompt_tokens + excluded.prompt_tokens,
cached_tokens = cached_tokens + excluded.cached_tokens, completion_tokens = completion_tokens + excluded.completion_tokens,
errors = errors + excluded.errors, seconds = seconds + excluded.seconds,
audio_seconds = audio_seconds + excluded.audio_seconds
"""
ADD_TO_DAY = """
INSERT INTO access_days (key_name, day, tokens, audio_ms) VALUES (?, ?, ?, ?)
ON CONFLICT (key_name, day) DO UPDATE SET tokens = tokens + excluded.tokens, audio_ms = audio_ms + excluded.audio_ms
"""


class SQLiteKeyBook:
    """access.book.KeyBook in the store's SQLite file."""

    def __init__(self, store: Store):
        self.store = store
        self._run = store.seam.run
        store.seam.register("access", SCHEMA, ADDED_COLUMNS)

    def digest(self, api_key: str) -> str:
        return self.store.owner(api_key)

    # --- keys ------------------------------------------------------------------------------------

    def create(self, record: KeyRecord) -> bool:
        def create(db: sqlite3.Connection) -> bool:
            if db.execute("SELECT 1 FROM access_keys WHERE name = ?", (record.name,)).fetchone():
                return False
            db.execute("INSERT INTO access_keys VALUES (?, ?, ?)", (record.digest, record.name, record.encode()))
            return True

        return self._run(create, write=True)

    def save(self, record: KeyRecord) -> None:
        self._run(
            lambda db: db.execute(
                "UPDATE access_keys SET record = ? WHERE name = ? AND digest = ?", (record.encode(), record.name, record.digest)
            ),
            write=True,
        )

    def by_digest(self, digest: str) -> KeyRecord | None:
        row = self._run(lambda db: db.execute("SELECT record FROM access_keys WHERE digest = ?", (digest,)).fetchone())
        return KeyRecord.decode(row[0]) if row else None

    def by_name(self, name: str) -> KeyRecord | None:
        row = self._run(lambda db: db.execute("SELECT record FROM access_keys WHERE name = ?", (name,)).fetchone())
        return KeyRecord.decode(row[0]) if row else None

    def records(self) -> list[KeyRecord]:
        rows = self._run(lambda db: db.execute("SELECT record FROM access_keys ORDER BY name").fetchall())
        return [KeyRecord.decode(row[0]) for row in rows]

    # --- limits and usage ------------------------------------------------------------------------

    def admit(self, record: KeyRecord, request_id: str, now: float, max_tokens: int | None, audio: int = 0) -> Decision:
        def admit(db: sqlite3.Connection) -> Decision:
            decision = decide(record, _counts(db, record.name, now), now, max_tokens, audio)
            if decision.allowed:
                db.execute(ADD_TO_SECOND, (record.name, "r", int(now), 1))
                if audio > 0 and record.audio_seconds_per_day is not None:
                    db.execute(ADD_TO_DAY, (record.name, day_of(now), 0, audio))
                db.execute(
                    "INSERT OR REPLACE INTO access_leases VALUES (?, ?, ?)", (request_id, record.name, now + LEASE_SECONDS)
                )
                _reserve(db, record, request_id, decision.reserved_tokens)
            return decision

        return self._run(admit, write=True)

    def reserve(self, record: KeyRecord, request_id: str, now: float, more: int) -> Decision:
        def reserve(db: sqlite3.Connection) -> Decision:
            decision = decide_more(record, _counts(db, record.name, now), now, more)
            if decision.allowed:
                _reserve(db, record, request_id, more)
            return decision

        return self._run(reserve, write=True)

    def checkpoint(self, record: KeyRecord, request_id: str | None, now: float, entry: UsageEntry) -> None:
        self._run(lambda db: _count_usage(db, record, request_id, now, entry), write=True)

    def finish(self, record: KeyRecord, request_id: str | None, now: float, entry: UsageEntry) -> None:
        def finish(db: sqlite3.Connection) -> None:
            _count_usage(db, record, request_id, now, entry)
            if request_id is not None:
                db.execute("DELETE FROM access_leases WHERE request_id = ?", (request_id,))
                db.execute("DELETE FROM access_reserved WHERE request_id = ?", (request_id,))

        self._run(finish, write=True)

    def usage(self, since_day: str, until_day: str | None = None) -> list[UsageEntry]:
        rows = self._run(
            lambda db: db.execute(
                "SELECT * FROM access_usage WHERE day >= ? AND day <= ? ORDER BY day, key_name, model, api",
                (since_day, until_day or "9999-12-31"),
            ).fetchall()
        )
        return [UsageEntry(*row) for row in rows]


def _reserve(db: sqlite3.Connection, record: KeyRecord, request_id: str, tokens: int) -> None:
    if tokens > 0 and record.has_token_limits:
        db.execute(
            "INSERT INTO access_reserved VALUES (?, ?, ?) ON CONFLICT (request_id) "
            "DO UPDATE SET tokens = tokens + excluded.tokens",
            (request_id, record.name, tokens),
        )


def _count_usage(db: sqlite3.Connection, record: KeyRecord, request_id: str | None, now: float, entry: UsageEntry) -> None:
    """`entry`'s tokens counted in the minute's and the day's (in place of as many reserved), and
    added to the key's usage."""
    if entry.tokens and record.has_token_limits:
        db.execute(ADD_TO_SECOND, (record.name, "t", int(now), entry.tokens))
        db.execute(ADD_TO_DAY, (record.name, day_of(now), entry.tokens, 0))
        if request_id is not None:
            db.execute("UPDATE access_reserved SET tokens = max(tokens - ?, 0) WHERE request_id = ?", (entry.tokens, request_id))
    if any(entry.counters()):  # an action's end (Ticket.admit_action) frees its place and writes no row
        db.execute(ADD_USAGE, (entry.day, entry.key, entry.model, entry.api, *entry.counters()))


def _counts(db: sqlite3.Connection, name: str, now: float) -> Counts:
    """The key's counts now, after dropping the events that left the window and the leases (and their
    reservations) that ran out."""
    db.execute("DELETE FROM access_seconds WHERE key_name = ? AND second <= ?", (name, int(now - WINDOW_SECONDS)))
    db.execute("DELETE FROM access_leases WHERE key_name = ? AND expires_at <= ?", (name, now))
    db.execute(
        "DELETE FROM access_reserved WHERE key_name = ? AND request_id NOT IN "
        "(SELECT request_id FROM access_leases WHERE key_name = ?)",
        (name, name),
    )
    requests, oldest_request = _window(db, name, "r")
    tokens, oldest_tokens = _window(db, name, "t")
    today = db.execute(
        "SELECT tokens, audio_ms FROM access_days WHERE key_name = ? AND day = ?", (name, day_of(now))
    ).fetchone() or (0, 0)
    in_flight = db.execute("SELECT count(*) FROM access_leases WHERE key_name = ?", (name,)).fetchone()[0]
    reserved = db.execute("SELECT coalesce(sum(tokens), 0) FROM access_reserved WHERE key_name = ?", (name,)).fetchone()[0]
    return Counts(requests, tokens, today[0], in_flight, oldest_request, oldest_tokens, reserved, today[1])


def _window(db: sqlite3.Connection, name: str, kind: str) -> tuple[int, float | None]:
    """(the sum of the window's seconds of one kind, the oldest second that has any)."""
    return db.execute(
        "SELECT coalesce(sum(amount), 0), min(second) FROM access_seconds WHERE key_name = ? AND kind = ?", (name, kind)
    ).fetchone()
