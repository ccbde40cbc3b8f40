"""The shared store: Redis, for several proxy instances behind one load balancer.

An object is three keys: a hash (owner, document, items_size, next), a sorted set of its item ids
scored by position, and a hash of the items by id; all three expire together (PEXPIRE, renewed by
every write). Every write is one Lua script, so it is atomic and one round trip; reads are one
round trip too. redis-py talks through the standard socket module, which the gevent worker patches:
a wait for Redis is a switch to the event loop.

Without --store-secret-file the key-hashing secret is kept in Redis itself (SET NX), so every
instance sharing the Redis shares it; so does the key thoughts are signed under (installation.py).
"""

from __future__ import annotations

import secrets
import time

from .base import DuplicateItem, Encoded, Store, TooLarge
from .seam import PREFIX, RedisServer

SECRET_KEY = PREFIX + "secret"

# KEYS: object, positions, items. ARGV: owner, document, ttl ms, items size, only new ('1' or '0'), then
# id, item pairs. 0: an object is there and only a new one was to be written.
PUT = """
if ARGV[5] == '1' and redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
local count = 0
for i = 6, #ARGV, 2 do
  count = count + 1
  redis.call('ZADD', KEYS[2], count, ARGV[i])
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
end
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'document', ARGV[2], 'items_size', ARGV[4], 'next', count)
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[3]) end
return 1
"""
# ARGV: ttl ms, max bytes, added size, then id, item pairs. 0: no object, -1: too large, else {-2, id}
APPEND = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local size = tonumber(redis.call('HGET', KEYS[1], 'items_size')) + redis.call('HSTRLEN', KEYS[1], 'document')
if size + tonumber(ARGV[3]) > tonumber(ARGV[2]) then return -1 end
for i = 4, #ARGV, 2 do
  if redis.call('ZSCORE', KEYS[2], ARGV[i]) then return {-2, ARGV[i]} end
end
local position = tonumber(redis.call('HGET', KEYS[1], 'next'))
for i = 4, #ARGV, 2 do
  position = position + 1
  redis.call('ZADD', KEYS[2], position, ARGV[i])
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
end
redis.call('HSET', KEYS[1], 'next', position)
redis.call('HINCRBY', KEYS[1], 'items_size', ARGV[3])
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[1]) end
return 1
"""
# ARGV: document, ttl ms, max bytes. 0: no object, -1: too large.
UPDATE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if tonumber(redis.call('HGET', KEYS[1], 'items_size')) + string.len(ARGV[1]) > tonumber(ARGV[3]) then return -1 end
redis.call('HSET', KEYS[1], 'document', ARGV[1])
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[2]) end
return 1
"""
# ARGV: after ('' for none), count (-1 for all), descending ('1' or '0'). false: `after` not found.
PAGE = """
local start
if ARGV[1] ~= '' then
  start = redis.call('ZSCORE', KEYS[2], ARGV[1])
  if not start then return false end
end
local count = tonumber(ARGV[2])
local ids
if ARGV[3] == '1' then
  ids = redis.call('ZREVRANGEBYSCORE', KEYS[2], start and '(' .. start or '+inf', '-inf', 'LIMIT', 0, count)
else
  ids = redis.call('ZRANGEBYSCORE', KEYS[2], start and '(' .. start or '-inf', '+inf', 'LIMIT', 0, count)
end
local items = {}
for i, id in ipairs(ids) do items[i] = redis.call('HGET', KEYS[3], id) end
return items
"""
# ARGV: item id, ttl ms.
DELETE_ITEM = """
local item = redis.call('HGET', KEYS[3], ARGV[1])
if not item then return 0 end
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HINCRBY', KEYS[1], 'items_size', -string.len(item))
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[2]) end
return 1
"""


class RedisStore(Store):
    def __init__(self, url: str, ttl_seconds: float, max_bytes: int, secret_file: str | None = None):
        self.seam = RedisServer(url)
        super().__init__(ttl_seconds, max_bytes, secret_file)
        self.client = self.seam.client

    def close(self) -> None:
        self.seam.close()

    def _script(self, source: str, key: str, args: list):
        return self.seam.run_script(source, _keys(key), args)

    def _ttl_ms(self) -> int:
        return int(self.ttl_seconds * 1000)

    def _default_secret(self) -> bytes:
        self.seam.call(lambda: self.client.set(SECRET_KEY, secrets.token_hex(32), nx=True))  # the first instance's
        return self.seam.call(self.client.get, SECRET_KEY)

    # --- objects ---------------------------------------------------------------------------------

    def _load(self, key: str) -> tuple[str, bytes] | None:
        owner, document = self.seam.call(self.client.hmget, _keys(key)[0], ["owner", "document"])
        return (owner.decode(), document) if owner is not None and document is not None else None

    def _note_owner(self, key: str, owner: str) -> bool:
        """The object in its owner's index (a sorted set scored by when it expires): a storage quota's
        measure. Not in the write's script: the index lives in the owner's hash slot, not the object's."""
        index = _owner_index(owner)
        with self.client.pipeline(transaction=False) as pipe:
            pipe.zadd(index, {key: _now_ms() + self._ttl_ms()})
            pipe.pexpire(index, self._ttl_ms())
            self.seam.call(pipe.execute)
        return True

    def _stored_bytes(self, owner: str) -> int:
        index = _owner_index(owner)
        self.seam.call(self.client.zremrangebyscore, index, "-inf", _now_ms())
        keys = [member.decode() for member in self.seam.call(self.client.zrange, index, 0, -1)]
        with self.client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.hget(_keys(key)[0], "items_size")
                pipe.hstrlen(_keys(key)[0], "document")
            sizes = self.seam.call(pipe.execute)
        return sum(int(size or 0) for size in sizes)

    def _owner(self, key: str) -> str | None:
        owner = self.seam.call(self.client.hget, _keys(key)[0], "owner")
        return owner.decode() if owner is not None else None

    def _put(self, key: str, owner: str, document: bytes, items: list[Encoded], only_new: bool) -> bool:
        size = sum(len(item) for _, item in items)
        return self._script(PUT, key, [owner, document, self._ttl_ms(), size, "1" if only_new else "0", *_flat(items)]) == 1

    def _update(self, key: str, document: bytes) -> bool:
        outcome = self._script(UPDATE, key, [document, self._ttl_ms(), self.max_bytes])
        if outcome == -1:
            raise TooLarge
        return outcome == 1

    def _delete(self, key: str) -> bool:
        return self.seam.call(self.client.delete, *_keys(key)) > 0

    # --- items -----------------------------------------------------------------------------------

    def _append(self, key: str, items: list[Encoded]) -> bool:
        size = sum(len(item) for _, item in items)
        outcome = self._script(APPEND, key, [self._ttl_ms(), self.max_bytes, size, *_flat(items)])
        if isinstance(outcome, list):
            raise DuplicateItem(outcome[1].decode())
        if outcome == -1:
            raise TooLarge
        return outcome == 1

    def _page(self, key: str, after: str | None, count: int | None, descending: bool) -> list[bytes] | None:
        found = self._script(PAGE, key, [after or "", -1 if count is None else count, "1" if descending else "0"])
        return None if found is None else [item for item in found if item is not None]

    def _item(self, key: str, item_id: str) -> bytes | None:
        return self.seam.call(self.client.hget, _keys(key)[2], item_id)

    def _delete_item(self, key: str, item_id: str) -> bool:
        return self._script(DELETE_ITEM, key, [item_id, self._ttl_ms()]) == 1


def _keys(key: str) -> list[str]:
    """The object's three keys, in one hash slot ({key}) so a Redis Cluster can run the scripts."""
    return [f"{PREFIX}{{{key}}}:object", f"{PREFIX}{{{key}}}:positions", f"{PREFIX}{{{key}}}:items"]


def _owner_index(owner: str) -> str:
    return f"{PREFIX}owner:{{{owner}}}:objects"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _flat(items: list[Encoded]) -> list:
    return [part for pair in items for part in pair]
