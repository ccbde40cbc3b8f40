"""The store interface on both backends: SQLite in a temporary file, Redis on a real redis-server."""

from __future__ import annotations

import multiprocessing
import os
import stat
import time

import pytest

from api_like_oai.errors import StoreUnavailable
from api_like_oai.store import DuplicateItem, TooLarge, UnknownCursor, new_id, open_store
from api_like_oai.store.base import encode
from api_like_oai.store.keys import SHARED_OWNER
from api_like_oai.store.settings import StoreSettings, duration, store_settings

from ..servers import free_port

MAX_BYTES = 4096


def make_store(kind: str, place: str, ttl_seconds: float = 60.0, max_bytes: int = MAX_BYTES, secret_file=None):
    return open_store(StoreSettings(kind, place, ttl_seconds, secret_file), max_bytes)


@pytest.fixture(params=["sqlite", "redis"])
def backend(request, tmp_path):
    """(kind, location) of an empty store of each backend."""
    if request.param == "sqlite":
        return "sqlite", str(tmp_path / "store.sqlite3")
    url = request.getfixturevalue("redis_server").url.rsplit("/", 1)[0] + "/1"  # the proxies' tests use 0
    cleaner = make_store("redis", url)
    cleaner.client.flushdb()
    cleaner.close()
    return "redis", url


@pytest.fixture
def store(backend):
    opened = make_store(*backend)
    yield opened
    opened.close()


def message(n: int) -> dict:
    return {"id": f"msg_{n}", "type": "message", "role": "user", "content": [{"type": "input_text", "text": f"m{n}"}]}


def ids(page) -> list[str]:
    return [item["id"] for item in page.items]


def test_an_object_is_its_owners_alone(store):
    alice, bob = store.owner("key-alice"), store.owner("key-bob")
    key = new_id("resp")
    store.put(key, alice, {"id": key, "status": "completed"}, [message(1)])
    assert store.get(key, alice) == {"id": key, "status": "completed"}
    assert store.get(key, bob) is None and store.page(key, bob) is None and store.item(key, bob, "msg_1") is None
    assert not store.delete(key, bob) and not store.append(key, bob, [message(2)]) and not store.update(key, bob, {})
    assert not store.delete_item(key, bob, "msg_1")
    assert ids(store.page(key, alice)) == ["msg_1"]
    assert store.delete(key, alice)
    assert store.get(key, alice) is None and store.page(key, alice) is None and not store.delete(key, alice)


def test_owner_is_a_keyed_hash_kept_across_restarts(backend, tmp_path):
    first = make_store(*backend)
    owner = first.owner("sk-secret-key")
    assert owner != "sk-secret-key" and len(owner) == 64 and first.owner(None) == SHARED_OWNER
    assert first.owner("sk-other-key") != owner
    first.close()
    assert make_store(*backend).owner("sk-secret-key") == owner  # the secret was kept
    secret_file = tmp_path / "configured.secret"
    configured = make_store(*backend, secret_file=str(secret_file))
    assert configured.owner("sk-secret-key") not in (owner, None)  # another secret, another digest
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600


def test_keys_are_never_stored(tmp_path):
    store = make_store("sqlite", str(tmp_path / "store.sqlite3"))
    key = new_id("conv")
    store.put(key, store.owner("sk-never-written"), {"id": key}, [message(1)])
    store.close()
    for path in tmp_path.iterdir():
        assert b"sk-never-written" not in path.read_bytes(), path


def test_items_page_by_after_limit_and_order(store):
    owner = store.owner(None)
    key = new_id("conv")
    store.put(key, owner, {"id": key}, [message(1), message(2)])
    assert store.append(key, owner, [message(3), message(4), message(5)])
    assert ids(store.page(key, owner)) == ["msg_1", "msg_2", "msg_3", "msg_4", "msg_5"]
    first = store.page(key, owner, limit=2)
    assert ids(first) == ["msg_1", "msg_2"] and first.has_more
    assert ids(store.page(key, owner, after="msg_2", limit=2)) == ["msg_3", "msg_4"]
    last = store.page(key, owner, after="msg_4", limit=2)
    assert ids(last) == ["msg_5"] and not last.has_more
    assert ids(store.page(key, owner, order="desc", limit=3)) == ["msg_5", "msg_4", "msg_3"]
    assert ids(store.page(key, owner, order="desc", after="msg_3")) == ["msg_2", "msg_1"]
    assert store.item(key, owner, "msg_4") == message(4)
    with pytest.raises(UnknownCursor):
        store.page(key, owner, after="msg_9")


def test_append_refuses_a_duplicate_id_whole(store):
    owner = store.owner(None)
    key = new_id("conv")
    store.put(key, owner, {"id": key}, [message(1)])
    for batch in ([message(2), message(1)], [message(3), message(3)]):
        with pytest.raises(DuplicateItem):
            store.append(key, owner, batch)
    assert ids(store.page(key, owner)) == ["msg_1"]


def test_deleted_item_leaves_the_list(store):
    owner = store.owner(None)
    key = new_id("conv")
    store.put(key, owner, {"id": key}, [message(1), message(2), message(3)])
    assert store.delete_item(key, owner, "msg_2") and not store.delete_item(key, owner, "msg_2")
    assert ids(store.page(key, owner)) == ["msg_1", "msg_3"] and store.item(key, owner, "msg_2") is None
    assert store.update(key, owner, {"id": key, "metadata": {"topic": "x"}})
    assert store.get(key, owner)["metadata"] == {"topic": "x"} and ids(store.page(key, owner)) == ["msg_1", "msg_3"]


def test_an_object_never_outgrows_max_bytes(store):
    owner = store.owner(None)
    key = new_id("conv")
    big = {**message(0), "content": [{"type": "input_text", "text": "x" * (MAX_BYTES // 2)}]}
    with pytest.raises(TooLarge):
        store.put(key, owner, {"id": key}, [big, {**big, "id": "msg_1"}, {**big, "id": "msg_2"}])
    store.put(key, owner, {"id": key}, [big])
    with pytest.raises(TooLarge):
        store.append(key, owner, [{**big, "id": "msg_1"}])
    with pytest.raises(TooLarge):
        store.update(key, owner, {"id": key, "padding": "y" * MAX_BYTES})
    assert ids(store.page(key, owner)) == ["msg_0"]
    assert store.delete_item(key, owner, "msg_0") and store.append(key, owner, [{**big, "id": "msg_1"}])


def test_only_new_creates_once_and_a_bigger_limit_shares_the_storage(store):
    """Of two callers creating the same list (a key's index of files), one creates it: the other appends."""
    owner = store.owner(None)
    key = new_id("index")
    assert store.put(key, owner, {"id": key}, [message(1)], only_new=True)
    assert not store.put(key, owner, {"id": key, "replaced": True}, [message(2)], only_new=True)
    assert store.get(key, owner) == {"id": key} and ids(store.page(key, owner)) == ["msg_1"]
    big = {**message(2), "content": [{"type": "input_text", "text": "x" * MAX_BYTES}]}
    with pytest.raises(TooLarge):
        store.append(key, owner, [big])
    assert store.limited_to(4 * MAX_BYTES).append(key, owner, [big])
    assert ids(store.page(key, owner)) == ["msg_1", "msg_2"] and store.max_bytes == MAX_BYTES


def test_objects_expire_after_their_last_write(backend):
    store = make_store(*backend, ttl_seconds=1.0)
    owner = store.owner(None)
    kept, left = new_id("conv"), new_id("conv")
    store.put(kept, owner, {"id": kept}, [message(1)])
    store.put(left, owner, {"id": left}, [message(1)])
    time.sleep(0.6)
    assert store.append(kept, owner, [message(2)])  # renews the conversation's lifetime
    time.sleep(0.6)
    assert store.get(left, owner) is None and store.page(left, owner) is None and not store.append(left, owner, [])
    assert ids(store.page(kept, owner)) == ["msg_1", "msg_2"]
    time.sleep(1.2)
    assert store.get(kept, owner) is None and store.item(kept, owner, "msg_1") is None


def _append_many(kind: str, place: str, key: str, worker: int, count: int) -> None:
    store = make_store(kind, place, max_bytes=10**7)
    owner = store.owner(None)
    for n in range(count):
        assert store.append(key, owner, [message(worker * 1000 + n)])


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_processes_appending_at_once_lose_nothing(kind, tmp_path, request):
    """Two worker processes append to one conversation at the same time: every item is kept, once."""
    place = str(tmp_path / "shared.sqlite3") if kind == "sqlite" else request.getfixturevalue("redis_server").url
    store = make_store(kind, place, max_bytes=10**7)
    key = new_id("conv")
    store.put(key, store.owner(None), {"id": key})
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_append_many, args=(kind, place, key, worker, 150)) for worker in (1, 2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    appended = ids(store.page(key, store.owner(None)))
    assert sorted(appended) == sorted(f"msg_{w * 1000 + n}" for w in (1, 2) for n in range(150))
    for worker in (1, 2):  # each writer's items in the order it wrote them
        mine = [item for item in appended if item.startswith(f"msg_{worker}")]
        assert mine == [f"msg_{worker * 1000 + n}" for n in range(150)]


def test_an_unreachable_redis_is_store_unavailable():
    store = make_store("redis", f"redis://127.0.0.1:{free_port()}/0")
    with pytest.raises(StoreUnavailable, match="Redis"):
        store.get(new_id("resp"), SHARED_OWNER)


def test_an_unwritable_sqlite_file_is_store_unavailable(tmp_path):
    (tmp_path / "store.sqlite3").mkdir()  # a directory where the file should be
    store = make_store("sqlite", str(tmp_path / "store.sqlite3"))
    with pytest.raises(StoreUnavailable):
        store.put(new_id("resp"), SHARED_OWNER, {})


@pytest.mark.parametrize(
    "url, kind, location",
    [
        ("sqlite:///var/lib/proxy/store.db", "sqlite", "/var/lib/proxy/store.db"),
        ("redis://cache:6379/2", "redis", "redis://cache:6379/2"),
        ("none", "none", ""),
    ],
)
def test_store_urls(url, kind, location):
    settings = store_settings(url, 60.0, None)
    assert (settings.kind, settings.location, settings.enabled) == (kind, location, kind != "none")


def test_default_store_is_sqlite_under_xdg_data_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert store_settings(None, 60.0, None).location == str(tmp_path / "api-like-oai" / "store.sqlite3")


@pytest.mark.parametrize("url", ["sqlite://relative.db", "mysql://x", "redis://", "sqlite:///"])
def test_unusable_store_urls_are_refused(url):
    with pytest.raises(ValueError, match="--store"):
        store_settings(url, 60.0, None)


@pytest.mark.parametrize("text, seconds", [("90", 90), ("90s", 90), ("15m", 900), ("12h", 43200), ("30d", 2592000), ("0.5", 0.5)])
def test_durations(text, seconds):
    assert duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "-5", "3x", "d"])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        duration(text)


def test_sqlite_file_is_created_on_first_use(tmp_path):
    path = tmp_path / "new" / "dir" / "store.sqlite3"
    store = make_store("sqlite", str(path))
    assert not path.exists()
    store.put(new_id("resp"), SHARED_OWNER, {})
    assert path.exists() and os.path.exists(str(path) + "-wal")


def test_integers_beyond_64_bits_come_back_exactly(store):
    owner = store.owner(None)
    key = new_id("conv")
    item = {**message(1), "annotations": [{"index": 2**70}]}
    store.put(key, owner, {"id": key, "big": -(2**80)}, [item])
    assert store.get(key, owner)["big"] == -(2**80) and store.item(key, owner, "msg_1") == item


def test_an_owners_stored_bytes_count_its_live_objects_alone(store):
    alice, bob = store.owner("key-alice"), store.owner("key-bob")
    first, second = new_id("conv"), new_id("resp")
    store.put(first, alice, {"id": first}, [message(1)])
    store.put(second, alice, {"id": second, "text": "x" * 1000})
    store.put(new_id("conv"), bob, {"id": "bob's"}, [message(9)] * 1)
    document, item = len(encode({"id": first})), len(encode(message(1)))
    assert store.stored_bytes(alice) == document + item + len(encode({"id": second, "text": "x" * 1000}))
    store.append(first, alice, [message(2)])
    store.delete(second, alice)
    assert store.stored_bytes(alice) == document + item + len(encode(message(2)))
    assert store.stored_bytes(store.owner("key-carol")) == 0
