"""The Redis key book decides an admission inside its Lua script (atomic, one round trip) and the
proxy then reads the verdict again with `access.limits.decide` (for the headers and the message): the two
must agree, or a request would be counted and refused, or let run uncounted. Held here case by case,
for new requests ("admit", with and without audio) and a running request's further reservation ("more"),
on a real redis-server."""

from __future__ import annotations

import dataclasses
import itertools
from datetime import UTC, datetime

import pytest

from api_like_oai.access.book import open_book
from api_like_oai.access.keys import KeyRecord
from api_like_oai.access.limits import LIMIT_ORDER, WINDOW_SECONDS, Counts, decide, decide_more, needed_tokens
from api_like_oai.access.redis import _limit_keys, admit_arguments, counts_of

from .test_store import make_store

NOON = datetime(2026, 12, 1, 12, 20, tzinfo=UTC).timestamp()

# What the key has used when the request comes: requests and tokens in the minute's window, today's
# tokens, requests in flight, the tokens those hold reserved, and today's audio milliseconds.
USED = [
    Counts(),
    Counts(requests=2, tokens=40, tokens_today=40, in_flight=1, reserved=10, audio_ms_today=59_000),
    Counts(requests=3, tokens=95, tokens_today=990, in_flight=2, reserved=5, audio_ms_today=120_000),
]
# Each limit alone at the edge the counts above meet, and all at once.
LIMIT_SETS = [
    {},
    {"max_parallel": 2},
    {"rpm": 3},
    {"tpm": 100},
    {"tpm": 60},
    {"tokens_per_day": 1000},
    {"audio_seconds_per_day": 60},
    {"audio_seconds_per_day": 120},
    {"max_parallel": 3, "rpm": 4, "tpm": 200, "tokens_per_day": 2000, "audio_seconds_per_day": 180},
]
NEEDS = [None, 0, 5, 50, 5000]
AUDIO = [0, 1000, 1001, 60_000]  # milliseconds of audio the request carries: none, to the edge, past it


@pytest.fixture(scope="module")
def book(redis_server):
    store = make_store("redis", redis_server.url.rsplit("/", 1)[0] + "/2")
    yield open_book(store)
    store.close()


def with_used(book, name: str, used: Counts, stale: bool = False) -> None:
    """The Redis keys of key `name` holding `used` (the window's events 10 s old, leases far from ending),
    and with `stale` what no longer counts beside it (STALE)."""
    requests, tokens, day, leases, reserved, audio = _limit_keys(name, NOON)
    client = book.client
    client.delete(requests, tokens, day, leases, reserved, audio)
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
    if used.audio_ms_today:
        client.set(audio, used.audio_ms_today)


def script_verdict(book, record, need: int, mode: str, audio: int = 0) -> tuple[bool, Counts]:
    args = admit_arguments(record, "new-request", NOON, NOON + 60, need, mode, audio)
    admitted, *numbers = book.admit_script(keys=_limit_keys(record.name, NOON), args=args)
    return admitted == 1, counts_of(numbers)


# Every used, limits, max_tokens and audio together; and, without audio, with what no longer counts beside
# what is used (stale: requests and tokens of a second past the window, and a lease that ran out still
# holding a reservation), which the script must drop before deciding.
CASES = [(*case, False) for case in itertools.product(range(len(USED)), range(len(LIMIT_SETS)), NEEDS, AUDIO)] + [
    (*case, 0, True) for case in itertools.product(range(len(USED)), range(len(LIMIT_SETS)), NEEDS)
]


@pytest.mark.parametrize(("used", "limits", "max_tokens", "audio", "stale"), CASES)
def test_the_scripts_admission_is_limits_decide(book, used, limits, max_tokens, audio, stale):
    record = KeyRecord(f"k{used}-{limits}-{max_tokens}-{audio}-{stale}", "digest", created_at=NOON, **LIMIT_SETS[limits])
    with_used(book, record.name, USED[used], stale)
    admitted, counts = script_verdict(book, record, needed_tokens(record, max_tokens), "admit", audio)
    second = float(int(NOON - 10))
    assert counts == dataclasses.replace(
        USED[used],
        oldest_request_at=second if USED[used].requests else None,
        oldest_tokens_at=second if USED[used].tokens else None,
    )  # stale left out
    assert admitted == decide(record, counts, NOON, max_tokens, audio).allowed
    counted = int(book.client.get(_limit_keys(record.name, NOON)[5]) or 0)
    counts_audio = admitted and audio > 0 and record.audio_seconds_per_day is not None
    assert counted == USED[used].audio_ms_today + (audio if counts_audio else 0)


@pytest.mark.parametrize(
    ("used", "limits", "more", "stale"), [(*case[:3], case[4]) for case in CASES if case[2] is not None and case[3] == 0]
)
def test_the_scripts_further_reservation_is_limits_decide_more(book, used, limits, more, stale):
    record = KeyRecord(f"m{used}-{limits}-{more}-{stale}", "digest", created_at=NOON, **LIMIT_SETS[limits])
    with_used(book, record.name, USED[used], stale)
    admitted, counts = script_verdict(book, record, more, "more")
    assert admitted == decide_more(record, counts, NOON, more).allowed


def test_the_cases_meet_every_verdict():
    """The cases are not all one way: each limit refuses some and every set admits some."""
    refused_by = set()
    for used, limits, max_tokens, audio, _ in CASES:
        record = KeyRecord("any", "digest", created_at=NOON, **LIMIT_SETS[limits])
        refused_by.add(decide(record, USED[used], NOON, max_tokens, audio).refused_by)
    assert refused_by == {None, *LIMIT_ORDER}
