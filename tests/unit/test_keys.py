"""Managed keys, limits and usage: the pure parts (access/keys, limits, usage, manage's schema) and the
key book on both stores (SQLite, a real redis-server), including limits counted atomically by
concurrent instances."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from api_like_oai.access import limits, manage
from api_like_oai.access.book import LEASE_SECONDS, open_book
from api_like_oai.access.keys import KEY_PREFIX, Caller, KeyProblem, KeyRecord, NameTaken, UnknownKey, check_name, matching
from api_like_oai.access.limits import Counts, day_of, decide, openai_headers
from api_like_oai.access.usage import UsageEntry, as_csv, summed

from .test_store import backend, make_store  # noqa: F401 - the store fixture of each backend

NOON = datetime(2026, 12, 1, 12, 20, tzinfo=UTC).timestamp()  # far from a day's edge


def record(**given) -> KeyRecord:
    return KeyRecord("team", "digest", created_at=NOON, **given)


# --- keys ---------------------------------------------------------------------------------------


def test_a_key_matches_only_a_whole_configured_key():
    assert matching("key-one", ("key-two", "key-one"))
    assert not matching("key-on", ("key-one",)) and not matching("", ("key-one",)) and not matching("x", ())


def test_a_caller_may_use_the_models_of_its_key_by_name_or_alias():
    limited = Caller("team", record(models=("smol",)))
    assert limited.allows("smol", "smol-alias") and not limited.allows("other", "other")
    assert Caller("config-key").allows("anything")


def test_revoked_and_expired_keys_are_not_usable():
    assert record(expires_at=NOON + 1).usable(NOON) and not record(expires_at=NOON).usable(NOON)
    assert not record(revoked=True).usable(NOON)


@pytest.mark.parametrize("name", ["", "-dash", "has space", "x" * 65, "semi;colon"])
def test_key_names_are_plain(name):
    with pytest.raises(KeyProblem):
        check_name(name)


def test_a_record_round_trips_through_its_stored_form_and_shows_no_digest():
    original = record(models=("a", "b"), rpm=5, expires_at=NOON)
    assert KeyRecord.decode(original.encode()) == original
    assert "digest" not in original.public() and original.public()["models"] == ["a", "b"]


def test_changes_set_only_what_is_given_and_zero_clears_a_limit():
    changes = manage.KeyChanges(rpm=0, tpm=500, expires="1h")
    fields = changes.record_fields(NOON)
    assert fields == {"rpm": 0, "tpm": 500, "expires_at": NOON + 3600}
    assert manage.updated(record(rpm=3, tokens_per_day=9), fields) == record(tpm=500, tokens_per_day=9, expires_at=NOON + 3600)


def test_changes_refuse_negative_limits_and_bad_durations():
    with pytest.raises(ValueError):
        manage.KeyChanges(rpm=-1)
    with pytest.raises(ValueError):
        manage.KeyChanges(expires="soon")


# --- limits -------------------------------------------------------------------------------------


def test_requests_per_minute_refuse_the_request_past_the_limit_until_the_oldest_leaves_the_window():
    assert decide(record(rpm=3), Counts(requests=2, oldest_request_at=NOON - 50), NOON).allowed
    refused = decide(record(rpm=3), Counts(requests=3, oldest_request_at=NOON - 50), NOON)
    assert refused.refused_by == "rpm" and refused.retry_after == pytest.approx(10)
    assert "requests per minute (rpm) limit 3" in refused.message()


def test_token_limits_need_room_for_max_tokens_before_the_request_runs():
    assert decide(record(tpm=100), Counts(tokens=40, oldest_tokens_at=NOON - 1), NOON, max_tokens=60).allowed
    assert decide(record(tpm=100), Counts(tokens=41, oldest_tokens_at=NOON - 1), NOON, max_tokens=60).refused_by == "tpm"
    assert decide(record(tpm=100), Counts(tokens=100), NOON).refused_by == "tpm"  # nothing left at all
    day = decide(record(tokens_per_day=1000), Counts(tokens_today=990), NOON, max_tokens=20)
    assert day.refused_by == "tokens_per_day" and day.retry_after == limits.seconds_to_midnight(NOON)


def test_a_max_tokens_larger_than_the_whole_limit_runs_when_nothing_is_used():
    assert limits.needed_tokens(record(tpm=100, tokens_per_day=50), 32000) == 50
    assert decide(record(tpm=100), Counts(), NOON, max_tokens=32000).allowed


def test_requests_in_flight_are_checked_first():
    refused = decide(record(max_parallel=2, rpm=1), Counts(requests=5, in_flight=2), NOON)
    assert refused.refused_by == "max_parallel" and refused.retry_after == 1.0


def test_the_headers_say_what_is_left_in_each_apis_words():
    decision = decide(
        record(rpm=10, tpm=1000), Counts(requests=3, tokens=250, oldest_request_at=NOON - 30, oldest_tokens_at=NOON - 59.5), NOON
    )
    assert openai_headers(decision) == {
        "x-ratelimit-limit-requests": "10",
        "x-ratelimit-remaining-requests": "6",
        "x-ratelimit-reset-requests": "30s",
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "750",
        "x-ratelimit-reset-tokens": "500ms",
    }
    assert limits.anthropic_headers(decision)["anthropic-ratelimit-requests-remaining"] == "6"
    assert limits.anthropic_headers(decision)["anthropic-ratelimit-requests-reset"] == "2026-12-01T12:20:30Z"
    assert openai_headers(decide(record(), Counts(), NOON)) == {}


def test_audio_seconds_per_day_refuse_only_a_request_with_audio_past_the_limit_in_milliseconds():
    limited = record(audio_seconds_per_day=60)
    assert limits.audio_ms(1.0001) == 1001 and limits.audio_ms(None) == 0 and limits.audio_ms(0.0) == 0
    assert decide(limited, Counts(audio_ms_today=59_000), NOON, audio=1000).allowed  # exactly 60 s
    refused = decide(limited, Counts(audio_ms_today=59_000), NOON, audio=1001)
    assert refused.refused_by == "audio_seconds_per_day" and refused.retry_after == limits.seconds_to_midnight(NOON)
    assert "seconds of audio per day (audio_seconds_per_day) limit 60" in refused.message()
    assert decide(limited, Counts(audio_ms_today=90_000), NOON).allowed  # a request without audio runs
    assert decide(record(), Counts(audio_ms_today=90_000), NOON, audio=5000).allowed


def test_reset_durations_read_as_openais():
    assert [limits.duration_text(s) for s in (0.2, 1, 59.2, 90)] == ["200ms", "1s", "1m0s", "1m30s"]
    assert day_of(NOON) == "2026-12-01"


# --- usage --------------------------------------------------------------------------------------


def entry(key="team", model="smol", prompt=10, completion=5, day="2026-12-01") -> UsageEntry:
    return UsageEntry(day, key, model, "/v1/chat/completions", 1, prompt, 0, completion, 0, 0.5)


def test_usage_sums_by_the_groups_asked_for():
    rows = [entry(), entry(model="other"), entry(key="ops", prompt=1, completion=1)]
    by_key = summed(rows, ("key",))
    assert [(row.key, row.model, row.requests, row.tokens) for row in by_key] == [("ops", "*", 1, 2), ("team", "*", 2, 30)]
    header = "day,key,model,api,requests,prompt_tokens,cached_tokens,completion_tokens,errors,seconds,audio_seconds"
    assert as_csv(by_key).splitlines()[0] == header


# --- the key book on each store ---------------------------------------------------------------


@pytest.fixture
def book(backend):  # noqa: F811
    store = make_store(*backend)
    yield open_book(store)
    store.close()


def test_a_created_key_is_found_by_its_digest_only_and_a_name_is_taken_once(book):
    key, created = manage.create_key(book, "team", manage.KeyChanges(models=["smol"], rpm=5))
    assert key.startswith(KEY_PREFIX) and created.digest == book.digest(key) and key not in created.digest
    assert book.by_digest(book.digest(key)) == created and book.by_name("team") == created
    with pytest.raises(NameTaken):
        manage.create_key(book, "team", manage.KeyChanges())
    with pytest.raises(UnknownKey):
        manage.revoke_key(book, "nobody")


def test_revoking_and_updating_are_seen_by_another_instance_at_once(backend):  # noqa: F811
    first, second = open_book(make_store(*backend)), open_book(make_store(*backend))
    key, _ = manage.create_key(first, "team", manage.KeyChanges())
    assert second.by_digest(second.digest(key)).revoked is False
    manage.update_key(second, "team", manage.KeyChanges(tpm=7))
    manage.revoke_key(second, "team")
    seen = first.by_digest(first.digest(key))
    assert seen.revoked and seen.tpm == 7 and [r.name for r in first.records()] == ["team"]


def test_a_burst_across_instances_gets_exactly_the_requests_per_minute(backend):  # noqa: F811
    books = [open_book(make_store(*backend)) for _ in range(5)]
    limited = record(rpm=20)
    outcomes: list[bool] = []

    def ask(index: int) -> None:
        outcomes.append(books[index % 5].admit(limited, f"request-{index}", time.time(), None).allowed)

    threads = [threading.Thread(target=ask, args=(index,)) for index in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count(True) == 20 and outcomes.count(False) == 30


def test_places_in_flight_are_freed_when_the_request_finishes(book):
    limited, now = record(max_parallel=1), time.time()  # Redis expires keys by its own clock
    assert book.admit(limited, "first", now, None).allowed
    assert book.admit(limited, "second", now, None).refused_by == "max_parallel"
    book.finish(limited, "first", now + 1, entry())
    assert book.admit(limited, "third", now + 1, None).allowed


def test_tokens_finished_count_against_the_minute_and_the_day_and_leave_the_window(book):
    limited, now = record(tpm=20, tokens_per_day=40), time.time()
    assert book.admit(limited, "one", now, 5).allowed
    book.finish(limited, "one", now, entry(prompt=12, completion=6))
    refused = book.admit(limited, "two", now + 1, 5)
    assert refused.refused_by == "tpm" and refused.counts.tokens == 18 and refused.counts.tokens_today == 18
    assert book.admit(limited, "three", now + 61, 5).allowed  # the minute's tokens left the window


def test_usage_adds_up_per_key_model_api_and_day(book):
    limited, now = replace(record(), name="team"), time.time()
    for _ in range(3):
        book.finish(limited, None, now, entry(day=day_of(now)))
    book.finish(limited, None, now, entry(model="other", prompt=1, completion=2, day=day_of(now)))
    rows = book.usage(day_of(now))
    assert [(row.model, row.requests, row.prompt_tokens, row.completion_tokens, row.seconds) for row in rows] == [
        ("other", 1, 1, 2, 0.5),
        ("smol", 3, 30, 15, 1.5),
    ]
    assert book.usage("2999-01-01") == []


def test_audio_seconds_are_counted_at_admission_against_the_day_and_in_the_usage_at_the_end(book):
    limited, now = record(audio_seconds_per_day=10), time.time()
    assert book.admit(limited, "clip-1", now, None, limits.audio_ms(6.5)).allowed
    refused = book.admit(limited, "clip-2", now, None, limits.audio_ms(4.0))
    assert refused.refused_by == "audio_seconds_per_day" and refused.counts.audio_ms_today == 6500
    assert book.admit(limited, "text", now, None).allowed  # no audio: not that limit's
    assert book.admit(limited, "clip-3", now, None, 3500).allowed  # 10 s exactly
    book.finish(limited, "clip-1", now, replace(entry(day=day_of(now)), audio_seconds=6.5))
    book.finish(limited, "clip-3", now, replace(entry(day=day_of(now)), audio_seconds=3.5))
    assert [(row.requests, row.audio_seconds) for row in book.usage(day_of(now))] == [(2, 10.0)]
    unlimited = replace(record(rpm=100), name="free")  # counted in its usage, not in a day's counter it has no limit for
    assert book.admit(unlimited, "u1", now, None, 5000).allowed
    assert book.admit(unlimited, "u2", now, None, 5000).counts.audio_ms_today == 0


def test_running_requests_hold_their_tokens_until_llamacpp_reports_them(book):
    limited, now = record(tpm=100), time.time()
    assert book.admit(limited, "a", now, 40).allowed  # max_tokens reserved at admission
    assert book.admit(limited, "b", now, 40).allowed
    refused = book.admit(limited, "c", now, 40)
    assert refused.refused_by == "tpm" and refused.counts.reserved == 80 and refused.counts.tokens == 0
    assert book.reserve(limited, "a", now, 15).allowed  # a's rendered prompt: 95 taken
    assert book.reserve(limited, "b", now, 10).refused_by == "tpm"  # 105 would not fit
    book.checkpoint(limited, "a", now + 1, entry(prompt=15, completion=20, day=day_of(now)))
    counts = book.admit(limited, "d", now + 1, 10).counts  # refused: 35 used + 60 held + 10
    assert (counts.tokens, counts.reserved) == (35, 60)
    book.finish(limited, "a", now + 2, entry(prompt=0, completion=5, day=day_of(now)))
    admitted = book.admit(limited, "e", now + 2, 20)  # a's rest of its reservation is freed
    assert admitted.allowed and (admitted.counts.tokens, admitted.counts.reserved) == (40, 40)
    assert [(row.requests, row.prompt_tokens, row.completion_tokens) for row in book.usage(day_of(now))] == [(2, 15, 25)]


def test_a_request_whose_worker_was_killed_keeps_its_written_tokens_and_its_reservation_until_its_lease_ends(book):
    limited, now = record(tpm=1000, tokens_per_day=5000), time.time()
    assert book.admit(limited, "killed", now, 300).allowed
    book.checkpoint(limited, "killed", now + 1, entry(prompt=50, completion=100, day=day_of(now)))
    held = book.admit(limited, "next", now + 2, 1).counts  # nobody finishes "killed"
    assert (held.tokens, held.reserved, held.tokens_today, held.in_flight) == (150, 150, 150, 1)
    later = book.admit(limited, "much-later", now + 2 + LEASE_SECONDS, 1).counts
    # The day keeps what was written (unless "much later" is already tomorrow: the test ran near midnight UTC).
    written_today = 150 if day_of(now + 2 + LEASE_SECONDS) == day_of(now) else 0
    assert (later.tokens, later.reserved, later.tokens_today) == (0, 0, written_today)


def test_checkpoints_replace_only_what_they_report_so_another_worker_sees_the_whole_reservation_held(backend):  # noqa: F811
    running, restarted = open_book(make_store(*backend)), open_book(make_store(*backend))
    limited, now = record(tpm=10_000), time.time()
    assert running.admit(limited, "streaming", now, 2000).allowed  # max_tokens, then its prompt's bound
    assert running.reserve(limited, "streaming", now, 40).allowed
    for second, completion in enumerate((1, 45, 50, 48), start=1):  # the first write has its prompt's 3
        running.checkpoint(
            limited, "streaming", now + second, entry(prompt=3 if second == 1 else 0, completion=completion, day=day_of(now))
        )
    held = restarted.admit(limited, "after", now + 5, 8).counts  # its worker killed: nobody finishes it
    assert (held.tokens, held.reserved, held.tokens_taken) == (147, 2040 - 147, 2040)
    running.finish(limited, "streaming", now + 6, entry(prompt=0, completion=2, day=day_of(now)))
    freed = restarted.admit(limited, "later", now + 6, 8).counts  # a request that ended (its client left)
    assert (freed.tokens, freed.reserved) == (149, 8)  # frees the rest; "after" still holds its 8


def test_a_ticket_writes_llamacpps_counts_as_they_arrive_and_the_rest_when_the_request_ends(book, monkeypatch):
    from types import SimpleNamespace

    from api_like_oai.access import gate
    from api_like_oai.backends.events import GenerationEvent

    monkeypatch.setattr(gate, "CHECKPOINT_SECONDS", 0.0)  # every report written at once
    limited = book.by_name(manage.create_key(book, "team", manage.KeyChanges(tpm=10_000))[1].name)
    answer = SimpleNamespace(
        model="smol",
        endpoint="/v1/chat/completions",
        started=time.perf_counter(),
        status=200,
        prompt_tokens=0,
        cached_tokens=0,
        completion_tokens=0,
    )
    ticket = gate.Ticket(Caller("team", limited), gate.Gate(("k",), book=book), record=answer)
    ticket.admit(max_tokens=50)
    observe = ticket.observer()
    for completion in (1, 2, 3):
        observe(GenerationEvent(text="x", prompt_tokens=12, completion_tokens=completion, cached_tokens=4))
    rows = book.usage(day_of(time.time()))
    assert [(row.requests, row.prompt_tokens, row.cached_tokens, row.completion_tokens) for row in rows] == [(1, 12, 4, 3)]
    answer.prompt_tokens, answer.cached_tokens, answer.completion_tokens = 12, 4, 9  # the answer's usage
    ticket.finish(answer)
    rows = book.usage(day_of(time.time()))
    assert [(row.requests, row.prompt_tokens, row.cached_tokens, row.completion_tokens, row.errors) for row in rows] == [
        (1, 12, 4, 9, 0)
    ]
    assert book.admit(limited, "after", time.time(), 1).counts.tokens_taken == 21  # used; nothing held


def test_a_prompt_that_does_not_fit_what_is_left_is_refused_before_generation_and_counted_upstream_only_then(book):
    from api_like_oai.access import gate
    from api_like_oai.errors import RateLimited

    limited = book.by_name(manage.create_key(book, "team", manage.KeyChanges(tpm=140))[1].name)
    counted: list[str] = []

    def ticket():
        admitted = gate.Ticket(Caller("team", limited), gate.Gate(("k",), book=book))
        admitted.admit(max_tokens=30)
        return admitted

    first = ticket()
    first.before_generation(40, lambda: counted.append("first") or 10)  # 30 + 40 bytes fit: no count
    second = ticket()  # 70 held, and 30 for the second
    second.before_generation(60, lambda: counted.append("second") or 20)  # 160 would not fit: 20 tokens do
    assert counted == ["second"] and (first.reserved, second.reserved) == (70, 50)
    with pytest.raises(RateLimited) as refused:
        ticket()  # 120 held + 30 would pass 140
    assert refused.value.status == 429 and int(refused.value.headers["Retry-After"]) >= 1


def test_audio_whose_length_is_unknown_is_refused_for_a_key_limited_in_audio_seconds_only(book):
    from api_like_oai.access import gate
    from api_like_oai.errors import InvalidRequest

    limited = book.by_name(manage.create_key(book, "ears", manage.KeyChanges(audio_seconds_per_day=60))[1].name)
    with pytest.raises(InvalidRequest) as refused:
        gate.Ticket(Caller("ears", limited), gate.Gate(("k",), book=book)).admit(None, audio_seconds=None)
    assert refused.value.status == 400 and refused.value.code == "audio_length_unknown"
    other = book.by_name(manage.create_key(book, "other", manage.KeyChanges(rpm=5))[1].name)
    gate.Ticket(Caller("other", other), gate.Gate(("k",), book=book)).admit(None, audio_seconds=None)


def test_an_older_sqlite_file_gets_the_audio_columns_and_keeps_its_rows(tmp_path):
    import sqlite3

    from api_like_oai.access.sqlite import SQLiteKeyBook

    path = tmp_path / "old.sqlite"
    old = sqlite3.connect(path)  # the tables as a proxy before audio seconds made them
    old.executescript("""
        CREATE TABLE access_days (key_name TEXT NOT NULL, day TEXT NOT NULL, tokens INTEGER NOT NULL,
            PRIMARY KEY (key_name, day)) WITHOUT ROWID;
        CREATE TABLE access_usage (day TEXT NOT NULL, key_name TEXT NOT NULL, model TEXT NOT NULL, api TEXT NOT NULL,
            requests INTEGER NOT NULL, prompt_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL,
            completion_tokens INTEGER NOT NULL, errors INTEGER NOT NULL, seconds REAL NOT NULL,
            PRIMARY KEY (day, key_name, model, api)) WITHOUT ROWID;""")
    today = day_of(time.time())
    old.execute("INSERT INTO access_days VALUES ('team', ?, 30)", (today,))
    old.execute("INSERT INTO access_usage VALUES (?, 'team', 'smol', '/v1/chat/completions', 2, 20, 0, 10, 0, 1.5)", (today,))
    old.commit()
    old.close()
    book = open_book(make_store("sqlite", str(path)))
    assert isinstance(book, SQLiteKeyBook)
    limited = record(tokens_per_day=100, audio_seconds_per_day=5)
    admitted = book.admit(limited, "clip", time.time(), 1, 2000)
    assert admitted.allowed and admitted.counts.tokens_today == 30 and admitted.counts.audio_ms_today == 0
    book.finish(limited, "clip", time.time(), replace(entry(day=today), audio_seconds=2.0))
    assert book.admit(limited, "more", time.time(), 1, 3001).refused_by == "audio_seconds_per_day"
    assert [(row.requests, row.prompt_tokens, row.audio_seconds) for row in book.usage(today)] == [(3, 30, 2.0)]


# --- priority at the upstream's door ------------------------------------------------------------


def test_waiting_generations_get_a_free_slot_highest_priority_first_and_in_arrival_order_within_one():
    from api_like_oai.access.priority import SlotQueue

    waiting_now: dict[str, int] = {}
    queue = SlotQueue(on_wait=lambda priority, delta: waiting_now.update({priority: waiting_now.get(priority, 0) + delta}))
    running = queue.take(1, "low")  # the one slot, taken
    served: list[str] = []

    def ask(name: str, priority: str) -> None:
        place = queue.take(1, priority)
        served.append(name)
        place.release()

    threads = []
    for name, priority in (("low-1", "low"), ("normal-1", "normal"), ("low-2", "low"), ("high-1", "high")):
        threads.append(threading.Thread(target=ask, args=(name, priority)))
        threads[-1].start()
        while queue.waiting < len(threads):  # each waits before the next comes: a known arrival order
            time.sleep(0.001)
    assert waiting_now == {"low": 2, "normal": 1, "high": 1}
    running.release()
    for thread in threads:
        thread.join(5)
    assert served == ["high-1", "normal-1", "low-1", "low-2"]
    assert queue.running == 0 and queue.waiting == 0 and set(waiting_now.values()) == {0}


def test_a_slot_is_taken_at_once_under_the_count_when_it_is_not_known_and_before_any_priority_but_normal():
    from api_like_oai.access.priority import SlotQueue

    queue = SlotQueue()
    places = [queue.take(4) for _ in range(6)]  # normal requests only: llama-server's order
    places += [queue.take(None, "low") for _ in range(5)] + [queue.take(12, "low")]
    assert queue.running == 12 and queue.waiting == 0 and queue.ordering
    for place in places:
        place.release()
        place.release()  # twice: the place is given back once
    assert queue.running == 0


def test_a_waiter_that_gives_up_leaves_the_queue_and_holds_no_slot():
    from api_like_oai.access.priority import SlotQueue

    queue = SlotQueue()
    held = queue.take(1, "low")
    outcome = []

    def give_up() -> None:
        try:
            queue.take(1, "high")
        except TimeoutError:
            outcome.append("gave up")

    original_wait = threading.Event.wait
    try:
        threading.Event.wait = lambda self, timeout=None: (_ for _ in ()).throw(TimeoutError())
        give_up()
    finally:
        threading.Event.wait = original_wait
    assert outcome == ["gave up"] and queue.waiting == 0
    held.release()
    assert queue.running == 0 and queue.take(1) is not None


def test_priority_is_kept_with_the_key_and_changed_like_its_limits():
    assert KeyRecord.decode(record(priority="high").encode()).priority == "high"
    fields = manage.KeyChanges(priority="low").record_fields(NOON)
    assert manage.updated(record(), fields).priority == "low"
    assert manage.updated(record(priority="high"), {"priority": ""}).priority == "normal"
    assert manage.KeyChanges(priority=None).record_fields(NOON) == {}
    with pytest.raises(ValueError):
        manage.KeyChanges(priority="urgent")
    assert Caller("config-key", given_priority="high").priority == "high"
    assert Caller("team", record(priority="low"), given_priority="high").priority == "low"
