"""The storage seam (store/seam.py): the store, the key book and the dashboard's history in one SQLite
file or one Redis, each subsystem's tables or scripts registered with it, every driver failure one
StoreUnavailable, and each subsystem's backend chosen by the seam's declared kind."""

from __future__ import annotations

import sqlite3

import pytest

from api_like_oai.access.book import open_book
from api_like_oai.access.redis import RedisKeyBook
from api_like_oai.access.sqlite import SQLiteKeyBook
from api_like_oai.dashboard.buckets import MemoryBuckets, RedisBuckets, SQLiteBuckets, open_buckets
from api_like_oai.errors import StoreUnavailable
from api_like_oai.store.seam import RedisServer, SQLiteFile

from .test_store import make_store


def tables(seam: SQLiteFile) -> set[str]:
    return {row[0] for row in seam.run(lambda db: db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))}


def test_each_subsystem_registers_its_tables_even_after_the_connection_opened(tmp_path):
    seam = SQLiteFile(tmp_path / "shared.sqlite3")
    seam.register("one", "CREATE TABLE IF NOT EXISTS one (x INTEGER)")
    assert tables(seam) == {"one"}
    seam.register("two", "CREATE TABLE IF NOT EXISTS two (y INTEGER)")
    seam.register("two", "CREATE TABLE IF NOT EXISTS other (z INTEGER)")  # a name is registered once
    assert tables(seam) == {"one", "two"}


def test_columns_added_since_are_added_to_an_older_file(tmp_path):
    older = SQLiteFile(tmp_path / "shared.sqlite3")
    older.register("one", "CREATE TABLE IF NOT EXISTS one (x INTEGER)")
    older.run(lambda db: db.execute("INSERT INTO one VALUES (1)"), write=True)
    older.close()
    newer = SQLiteFile(tmp_path / "shared.sqlite3")
    newer.register(
        "one", "CREATE TABLE IF NOT EXISTS one (x INTEGER, y REAL NOT NULL DEFAULT 0)", (("one", "y", "REAL NOT NULL DEFAULT 0"),)
    )
    assert newer.run(lambda db: db.execute("SELECT x, y FROM one").fetchall()) == [(1, 0.0)]
    again = SQLiteFile(tmp_path / "shared.sqlite3")  # another process: the column is there already
    again.register(
        "one", "CREATE TABLE IF NOT EXISTS one (x INTEGER, y REAL NOT NULL DEFAULT 0)", (("one", "y", "REAL NOT NULL DEFAULT 0"),)
    )
    assert again.run(lambda db: db.execute("SELECT x, y FROM one").fetchall()) == [(1, 0.0)]


def test_a_failed_write_is_rolled_back_whole(tmp_path):
    seam = SQLiteFile(tmp_path / "shared.sqlite3")
    seam.register("one", "CREATE TABLE IF NOT EXISTS one (x INTEGER)")

    def half_then_fail(db: sqlite3.Connection) -> None:
        db.execute("INSERT INTO one VALUES (1)")
        raise KeyError("the subsystem's own error")

    with pytest.raises(KeyError):
        seam.run(half_then_fail, write=True)
    assert seam.run(lambda db: db.execute("SELECT count(*) FROM one").fetchone()) == (0,)


def test_sqlite_failures_are_store_unavailable(tmp_path):
    seam = SQLiteFile(tmp_path / "shared.sqlite3")
    with pytest.raises(StoreUnavailable, match=r"the store \(SQLite\) failed: no such table"):
        seam.run(lambda db: db.execute("SELECT * FROM missing"))


def test_redis_failures_are_store_unavailable():
    seam = RedisServer("redis://127.0.0.1:1/0")  # nothing listens on port 1
    with pytest.raises(StoreUnavailable, match=r"the store \(Redis\) failed"):
        seam.call(seam.client.get, "anything")
    with pytest.raises(StoreUnavailable, match=r"the store \(Redis\) failed"):
        seam.run_script("return 1", [], [])


def test_a_script_is_registered_once_per_seam():
    seam = RedisServer("redis://127.0.0.1:1/0")
    assert seam.script("return 1") is seam.script("return 1")


def test_each_subsystem_picks_its_backend_by_the_seams_kind(tmp_path, redis_server):
    local = make_store("sqlite", str(tmp_path / "store.sqlite3"))
    shared = make_store("redis", redis_server.url.rsplit("/", 1)[0] + "/1")
    assert (local.seam.kind, shared.seam.kind) == ("sqlite", "redis")
    assert isinstance(open_book(local), SQLiteKeyBook) and isinstance(open_book(shared), RedisKeyBook)
    assert isinstance(open_buckets(local), SQLiteBuckets) and isinstance(open_buckets(shared), RedisBuckets)
    assert open_book(None) is None and isinstance(open_buckets(None), MemoryBuckets)
    shared.close()


def test_the_store_the_key_book_and_the_history_share_one_sqlite_file(tmp_path):
    store = make_store("sqlite", str(tmp_path / "store.sqlite3"))
    open_book(store).records()
    open_buckets(store).errors(1)
    assert {"objects", "items", "access_keys", "access_usage", "dashboard_counts"} <= tables(store.seam)
