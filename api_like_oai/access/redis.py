"""The key book in the proxy's Redis (store/seam.RedisServer): every instance sharing the Redis shares the
keys, the counts and the usage. An admission is one Lua script (read the counts, decide, count the
request: atomic, one round trip); the end of a request is one MULTI transaction."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..store.seam import PREFIX
from .keys import KeyRecord
from .limits import DAY_SECONDS, LEASE_SECONDS, WINDOW_SECONDS, Counts, Decision, day_of, decide, decide_more, needed_tokens
from .usage import COUNTERS, FLOAT_COUNTERS, UsageEntry

if TYPE_CHECKING:
    from ..store import Store

RECORDS = PREFIX + "access:keys"  # hash: digest -> record
NAMES = PREFIX + "access:names"  # hash: name -> digest
USAGE_KEEP_SECONDS = 400 * DAY_SECONDS
SEPARATOR = "\x1f"

# KEYS: names, records. ARGV: name, digest, record. 0: the name is taken.
CREATE = """
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
return 1
"""
# KEYS: requests, tokens (hashes: second -> count), day, leases (sorted set: request id -> until),
# reserved (hash: request id -> tokens), today's audio milliseconds. ARGV: now, window, request id, lease
# until, need, then the limits max_parallel, rpm, tpm, tokens_per_day ('' for none), then "admit" (a new
# request: the comparisons of limits.decide) or "more" (a running one reserving `need` more:
# limits.decide_more), then the audio milliseconds the request carries and the limit audio_seconds_per_day.
# Answers {admitted, requests, tokens, today, in flight, oldest request, oldest tokens, reserved, audio today}.
ADMIT = """
local now = tonumber(ARGV[1])
local last_gone = math.floor(now - tonumber(ARGV[2]))
local function window(key)
  local sum, oldest = 0, ''
  local seconds = redis.call('HGETALL', key)
  for i = 1, #seconds, 2 do
    local second = tonumber(seconds[i])
    if second <= last_gone then
      redis.call('HDEL', key, seconds[i])
    else
      sum = sum + tonumber(seconds[i + 1])
      if oldest == '' or second < oldest then oldest = second end
    end
  end
  return sum, oldest
end
local requests, oldest_request = window(KEYS[1])
local tokens, oldest_tokens = window(KEYS[2])
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
local reserved = 0
local held = redis.call('HGETALL', KEYS[5])
for i = 1, #held, 2 do
  if redis.call('ZSCORE', KEYS[4], held[i]) then
    reserved = reserved + math.max(tonumber(held[i + 1]), 0)
  else
    redis.call('HDEL', KEYS[5], held[i])
  end
end
local today = tonumber(redis.call('GET', KEYS[3]) or '0')
local audio_today = tonumber(redis.call('GET', KEYS[6]) or '0')
local audio = tonumber(ARGV[11])
local in_flight = redis.call('ZCARD', KEYS[4])
local new = ARGV[10] == 'admit'
local need = tonumber(ARGV[5])
local asked = new and math.max(need, 1) or need
local wanted = {in_flight + 1, requests + 1, tokens + reserved + asked, today + reserved + asked}
local admitted = 1
for i = (new and 1 or 3), 4 do
  if ARGV[5 + i] ~= '' and wanted[i] > tonumber(ARGV[5 + i]) then admitted = 0 end
end
if new and audio > 0 and ARGV[12] ~= '' and audio_today + audio > tonumber(ARGV[12]) * 1000 then admitted = 0 end
if admitted == 1 and new then
  redis.call('HINCRBY', KEYS[1], math.floor(now), 1)
  redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2]) * 2000))
  redis.call('ZADD', KEYS[4], ARGV[4], ARGV[3])
  redis.call('PEXPIREAT', KEYS[4], math.ceil(tonumber(ARGV[4]) * 1000))
  if audio > 0 and ARGV[12] ~= '' then
    redis.call('INCRBY', KEYS[6], audio)
    redis.call('EXPIRE', KEYS[6], 2 * 86400)
  end
end
if admitted == 1 and need > 0 and (ARGV[8] ~= '' or ARGV[9] ~= '') then
  redis.call('HINCRBY', KEYS[5], ARGV[3], need)
  redis.call('PEXPIREAT', KEYS[5], math.ceil(tonumber(ARGV[4]) * 1000))
end
return {admitted, requests, tokens, today, in_flight, tostring(oldest_request), tostring(oldest_tokens), reserved,
        audio_today}
"""


class RedisKeyBook:
    """access.book.KeyBook in the store's Redis: its scripts registered with the seam."""

    def __init__(self, store: Store):
        self.store, seam = store, store.seam
        self.client, self._call = seam.client, seam.call
        self.create_script, self.admit_script = seam.script(CREATE), seam.script(ADMIT)

    def digest(self, api_key: str) -> str:
        return self.store.owner(api_key)

    # --- keys ------------------------------------------------------------------------------------

    def create(self, record: KeyRecord) -> bool:
        return (
            self._call(lambda: self.create_script(keys=[NAMES, RECORDS], args=[record.name, record.digest, record.encode()])) == 1
        )

    def save(self, record: KeyRecord) -> None:
        self._call(self.client.hset, RECORDS, record.digest, record.encode())

    def by_digest(self, digest: str) -> KeyRecord | None:
        stored = self._call(self.client.hget, RECORDS, digest)
        return KeyRecord.decode(stored) if stored is not None else None

    def by_name(self, name: str) -> KeyRecord | None:
        digest = self._call(self.client.hget, NAMES, name)
        return self.by_digest(digest.decode()) if digest is not None else None

    def records(self) -> list[KeyRecord]:
        stored = self._call(self.client.hvals, RECORDS)
        return sorted((KeyRecord.decode(record) for record in stored), key=lambda record: record.name)

    # --- limits and usage ------------------------------------------------------------------------

    def admit(self, record: KeyRecord, request_id: str, now: float, max_tokens: int | None, audio: int = 0) -> Decision:
        counts = self._counted(record, request_id, now, needed_tokens(record, max_tokens), "admit", audio)
        return decide(record, counts, now, max_tokens, audio)  # the script's comparisons: the same verdict as `admitted`

    def reserve(self, record: KeyRecord, request_id: str, now: float, more: int) -> Decision:
        return decide_more(record, self._counted(record, request_id, now, more, "more"), now, more)

    def _counted(self, record: KeyRecord, request_id: str, now: float, need: int, mode: str, audio: int = 0) -> Counts:
        """The counts the script read before it admitted (or refused) the request."""
        args = admit_arguments(record, request_id, now, now + LEASE_SECONDS, need, mode, audio)
        _admitted, *numbers = self._call(lambda: self.admit_script(keys=_limit_keys(record.name, now), args=args))
        return counts_of(numbers)

    def checkpoint(self, record: KeyRecord, request_id: str | None, now: float, entry: UsageEntry) -> None:
        self._count_usage(record, request_id, now, entry, final=False)

    def finish(self, record: KeyRecord, request_id: str | None, now: float, entry: UsageEntry) -> None:
        self._count_usage(record, request_id, now, entry, final=True)

    def _count_usage(self, record: KeyRecord, request_id: str | None, now: float, entry: UsageEntry, final: bool) -> None:
        """One MULTI: the tokens counted in place of as many reserved (a reservation read below 0 counts
        as 0), the usage added; at the end the place in flight and the reservation freed."""
        _requests_key, tokens_key, day_key, leases_key, reserved_key, _audio_key = _limit_keys(record.name, now)
        usage_key = f"{PREFIX}usage:{entry.day}"
        group = SEPARATOR.join((entry.key, entry.model, entry.api))
        with self.client.pipeline(transaction=True) as transaction:
            if request_id is not None and final:
                transaction.zrem(leases_key, request_id)
                transaction.hdel(reserved_key, request_id)
            if entry.tokens and record.has_token_limits:
                transaction.hincrby(tokens_key, str(int(now)), entry.tokens)
                transaction.pexpire(tokens_key, int(WINDOW_SECONDS * 2000))
                transaction.incrby(day_key, entry.tokens)
                transaction.expire(day_key, 2 * DAY_SECONDS)
                if request_id is not None and not final:
                    transaction.hincrby(reserved_key, request_id, -entry.tokens)
            if any(entry.counters()):  # an action's end (Ticket.admit_action) writes no row
                for name, value in zip(COUNTERS, entry.counters(), strict=True):
                    add = transaction.hincrbyfloat if name in FLOAT_COUNTERS else transaction.hincrby
                    add(usage_key, group + SEPARATOR + name, value)
                transaction.expire(usage_key, USAGE_KEEP_SECONDS)
            self._call(transaction.execute)

    def usage(self, since_day: str, until_day: str | None = None) -> list[UsageEntry]:
        days = self._call(lambda: sorted(key.decode() for key in self.client.scan_iter(f"{PREFIX}usage:*")))
        entries = []
        for usage_key in days:
            day = usage_key.rsplit(":", 1)[1]
            if since_day <= day <= (until_day or "9999-12-31"):
                entries += _entries(day, self._call(self.client.hgetall, usage_key))
        return entries


def admit_arguments(record: KeyRecord, request_id: str, now: float, lease_until: float, need: int, mode: str, audio: int) -> list:
    """ADMIT's ARGV (the limits '' where the key has none)."""

    def limit(name: str):
        return "" if getattr(record, name) is None else getattr(record, name)

    return [
        repr(now),
        WINDOW_SECONDS,
        request_id,
        repr(lease_until),
        need,
        *(limit(name) for name in ("max_parallel", "rpm", "tpm", "tokens_per_day")),
        mode,
        audio,
        limit("audio_seconds_per_day"),
    ]


def counts_of(numbers: list) -> Counts:
    """The counts ADMIT answers with (after its verdict)."""
    return Counts(
        *(int(number) for number in numbers[:4]), *(_time(number) for number in numbers[4:6]), int(numbers[6]), int(numbers[7])
    )


def _limit_keys(name: str, now: float) -> list[str]:
    """The key's requests, tokens, today's tokens, leases, reservations and today's audio, in one hash slot ({name})."""
    base = f"{PREFIX}access:{{{name}}}:"
    return [
        base + "requests",
        base + "tokens",
        base + "day:" + day_of(now),
        base + "leases",
        base + "reserved",
        base + "audio:" + day_of(now),
    ]


def _entries(day: str, fields: dict[bytes, bytes]) -> list[UsageEntry]:
    groups: dict[tuple, dict] = {}
    for field, value in fields.items():
        key, model, api, name = field.decode().split(SEPARATOR)
        groups.setdefault((key, model, api), {})[name] = float(value) if name in FLOAT_COUNTERS else int(value)
    return [UsageEntry(day, *group, **counters) for group, counters in sorted(groups.items())]


def _time(number) -> float | None:
    return float(number) if number not in (b"", "", None) else None
