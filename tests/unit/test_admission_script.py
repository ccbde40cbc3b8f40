"""The Redis key book decides an admission inside its Lua script (atomic, one round trip) and the
proxy then reads the verdict again with `access.limits.decide` (for the headers and the message): the two
must agree, or a request would be counted and refused, or let run uncounted. Held here case by case,
for new requests ("admit") and a running request's further reservation ("more"), on a real redis-server."""

from __future__ import annotations

import dataclasses
import itertools
from datetime import UTC, datetime

import pytest

from api_like_oai.access.book import open_book
from api_like_oai.access.keys import KeyRecord
from api_like_oai.access.limits import WINDOW_SECONDS, Counts, decide, decide_more, needed_tokens
from api_like_oai.access.redis import _limit_keys

from .test_store import make_store

NOON = datetime(2026, 12, 1, 12, 20, tzinfo=UTC).timestamp()
LIMITS = ("max_parallel", "rpm", "tpm", "tokens_per_day")

# What the key has used when the request comes: requests and tokens in the minute's window, today's
# tokens, requests in flight, and the tokens those hold reserved.
USED = [Counts(), Counts(requests=2, tokens=40, tokens_today=40, in_flight=1, reserved=10),
        Counts(requests=3, tokens=95, tokens_today=990, in_flight=2, reserved=5)]
# Each limit alone at the edge the counts above meet, and all at once.
LIMIT_SETS = [{}, {"max_parallel": 2}, {"rpm": 3}, {"tpm": 100}, {"tpm": 60}, {"tokens_per_day": 1000},
              {"max_parallel": 3, "rpm": 4, "tpm": 200, "tokens_per_day": 2000}]
NEEDS = [None, 0, 5, 50, 5000]
# What the key used that no longer counts, beside it or not: requests and tokens of a second past the
# window, and a lease that ran out still holding a reservation. The script drops them before deciding.
STALE = [False, True]


@pytest.fixture(scope="module")
def book(redis_server):
    store = make_store("redis", redis_server.url.rsplit("/", 1)[0] + "/2")
    yield open_book(store)
    store.close()


def with_used(book, name: str, used: Counts, stale: bool = False) -> None:
    """The Redis keys of key `name` holding `used` (the window's events 10 s old, leases far from ending),
    and with `stale` what no longer counts beside it (STALE)."""
    requests, tokens, day, leases, reserved = _limit_keys(name, NOON)
    client = book.client
    client.delete(requests, tokens, day, leases, reserved)
    second = str(int(NOON - 10))
    if stale:
        client.hset(requests, str(int(NOON - WINDOW_SECONDS - 5)), 7)
        client.hset(tokens, str(int(NOON - WINDOW_SECONDS - 5)), 900)
        client.zadd(leases, {"ran-out": NOON - 1})
        client.hset(reserved, "ran-out", 300)
    if used.requests:
        client.hset(requests, second, used.requests)
    if used.tokens:
        client.hset(tokens, second, used.tokens)
    if used.tokens_today:
        client.set(day, used.tokens_today)
    for n in range(used.in_flight):
        client.zadd(leases, {f"running-{n}": NOON + 100})
    if used.reserved:
        client.hset(reserved, "running-0", used.reserved)


def script_verdict(book, record, need: int, mode: str) -> tuple[bool, Counts]:
    limits = ["" if getattr(record, name) is None else getattr(record, name) for name in LIMITS]
    args = [repr(NOON), WINDOW_SECONDS, "new-request", repr(NOON + 60), need, *limits, mode]
    admitted, *numbers = book.admit_script(keys=_limit_keys(record.name, NOON), args=args)
    counts = Counts(*(int(n) for n in numbers[:4]), *(float(n) if n not in (b"", "") else None for n in numbers[4:6]),
                    int(numbers[6]))
    return admitted == 1, counts


CASES = list(itertools.product(range(len(USED)), range(len(LIMIT_SETS)), NEEDS, STALE))


@pytest.mark.parametrize(("used", "limits", "max_tokens", "stale"), CASES)
def test_the_scripts_admission_is_limits_decide(book, used, limits, max_tokens, stale):
    record = KeyRecord(f"k{used}-{limits}-{max_tokens}-{stale}", "digest", created_at=NOON, **LIMIT_SETS[limits])
    with_used(book, record.name, USED[used], stale)
    admitted, counts = script_verdict(book, record, needed_tokens(record, max_tokens), "admit")
    second = float(int(NOON - 10))
    assert counts == dataclasses.replace(USED[used], oldest_request_at=second if USED[used].requests else None,
                                         oldest_tokens_at=second if USED[used].tokens else None)   # stale left out
    assert admitted == decide(record, counts, NOON, max_tokens).allowed


@pytest.mark.parametrize(("used", "limits", "more", "stale"), [case for case in CASES if case[2] is not None])
def test_the_scripts_further_reservation_is_limits_decide_more(book, used, limits, more, stale):
    record = KeyRecord(f"m{used}-{limits}-{more}-{stale}", "digest", created_at=NOON, **LIMIT_SETS[limits])
    with_used(book, record.name, USED[used], stale)
    admitted, counts = script_verdict(book, record, more, "more")
    assert admitted == decide_more(record, counts, NOON, more).allowed


def test_the_cases_meet_every_verdict():
    """The cases are not all one way: each limit refuses some and every set admits some."""
    refused_by = set()
    for used, limits, max_tokens, _ in CASES:
        record = KeyRecord("any", "digest", created_at=NOON, **LIMIT_SETS[limits])
        refused_by.add(decide(record, USED[used], NOON, max_tokens).refused_by)
    assert refused_by == {None, *LIMITS}
