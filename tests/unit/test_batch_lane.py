"""The batch lane without a server: a batch's lines checked up front and written in OpenAI's format, a
file's content kept as items, and the background priority at a model's slot queue (after every key's
request; preempted by one that finds every slot busy)."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import pytest

from api_like_oai.access import priority as slot_queues
from api_like_oai.access.priority import BACKGROUND, SlotQueue
from api_like_oai.backends.events import GenerationEvent
from api_like_oai.backends.http import OPENED
from api_like_oai.backends.upstream import UpstreamRequest
from api_like_oai.batch import batches, files, lines
from api_like_oai.errors import Preempted, UpstreamUnavailable
from api_like_oai.services.door import Door
from api_like_oai.siblings import LaneMark

CHAT = "/v1/chat/completions"


def line(custom_id, url=CHAT, body=None) -> bytes:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body or {"model": "m"}}).encode()


def test_every_line_is_checked_and_a_bad_one_is_named_not_fatal():
    content = b"\n".join(
        [
            line("a"),
            b"",  # blank lines are skipped, but counted in the numbering
            b"{not json",
            b"[1, 2]",
            json.dumps({"url": CHAT, "body": {}}).encode(),
            line("a"),
            line("b", url="/v1/embeddings"),
            json.dumps({"custom_id": "c", "method": "GET", "url": CHAT, "body": {}}).encode(),
            json.dumps({"custom_id": "d", "url": CHAT, "body": "text"}).encode(),
            line("e", body={"model": "m", "n": 10**30}),
        ]
    )
    good, bad = lines.checked(content, CHAT)
    assert [(g.number, g.custom_id) for g in good] == [(1, "a"), (10, "e")]
    assert good[1].body["n"] == 10**30  # integers of any size stay exact
    assert [(b.number, b.custom_id, b.code) for b in bad] == [
        (3, None, "invalid_json_line"),
        (4, None, "invalid_request"),
        (5, None, "missing_required_parameter"),
        (6, "a", "duplicate_custom_id"),
        (7, "b", "mismatched_endpoint"),
        (8, "c", "invalid_method"),
        (9, "d", "invalid_request"),
    ]


def test_results_are_openai_lines_keyed_by_the_line_number():
    good, bad = lines.checked(line("x") + b"\n" + b"oops", CHAT)
    answered = lines.answered(good[0], 200, {"object": "chat.completion", "big": 10**30})
    assert answered["id"] == "1" and answered["text"].endswith("\n")
    written = json.loads(answered["text"])
    assert written["id"].startswith("batch_req_") and written["custom_id"] == "x" and written["error"] is None
    assert written["response"]["status_code"] == 200 and written["response"]["body"]["big"] == 10**30
    assert written["response"]["request_id"].startswith("req_")
    refused = json.loads(lines.refused(bad[0])["text"])
    assert refused["response"] is None and refused["error"]["code"] == "invalid_json_line"
    expired = json.loads(lines.refused(good[0], "batch_expired", "too late")["text"])
    assert expired["custom_id"] == "x" and expired["error"] == {"code": "batch_expired", "message": "too late"}


@pytest.mark.parametrize("content", [b"", b"one line\n" * 50_000, "é".encode() * 300_000, bytes(range(256)) * 4000])
def test_a_files_content_comes_back_whole_from_its_items(content):
    items = files.chunks(content)
    assert files.joined(items) == content
    assert all(len(item.get("text", item.get("base64", ""))) <= files.CHUNK_CHARACTERS for item in items)


def test_a_background_generation_waits_behind_every_key_and_is_preempted_by_one():
    queue = SlotQueue()
    running = queue.take(1, BACKGROUND)
    assert running.preempted is not None and not running.preempted.is_set()
    served: list[str] = []

    def ask(name: str, priority: str) -> None:
        place = queue.take(1, priority)
        served.append(name)
        place.release()

    threads = []
    for name, level in (("batch-2", BACKGROUND), ("low", "low")):
        threads.append(threading.Thread(target=ask, args=(name, level)))
        threads[-1].start()
        while queue.waiting < len(threads):
            time.sleep(0.001)
        # a waiting batch line preempts nothing; a key's request preempts the running line
        assert running.preempted.is_set() == (level != BACKGROUND)
    running.release()
    for thread in threads:
        thread.join(5)
    assert served == ["low", "batch-2"] and queue.preemptions == 1
    assert queue.running == 0 and queue.waiting == 0


def test_a_key_request_under_the_slot_count_preempts_nothing():
    queue = SlotQueue()
    background = queue.take(2, BACKGROUND)
    interactive = queue.take(2, "normal")
    assert not background.preempted.is_set() and interactive.preempted is None
    background.release()
    interactive.release()
    assert queue.running == 0 and queue._background == []


def test_a_request_let_in_by_another_worker_preempts_a_line_here_only_past_the_slots():
    """--workers N: the runner's queue hears of the other workers' requests (elsewhere -> heard)."""
    told: list[tuple[int, bool]] = []
    other_worker, runner = SlotQueue(elsewhere=lambda held, came, starting: told.append((held, came)) or True), SlotQueue()
    lines = [runner.take(2, BACKGROUND) for _ in range(2)]
    first = other_worker.take(None, "normal")  # not ordering there: let in at once, and told
    other_worker.take(None, "low")
    other_worker.take(None, BACKGROUND)  # a background one is told to nobody
    assert told == [(1, True), (2, True)]
    assert not runner.heard("w", 0, True)  # the two lines fill the two slots: nothing to make room for
    assert runner.heard("w", 1, True) and lines[0].preempted.is_set() and not lines[1].preempted.is_set()
    assert runner.heard("w", 2, True) and lines[1].preempted.is_set()
    assert not runner.heard("w", 3, True) and runner.preemptions == 2  # no line left to stop
    lines[0].release()
    first.release()
    assert told[-1] == (2, False)  # its end is told too
    assert not SlotQueue().heard("w", 5, True)  # slots not known: nothing is stopped


def test_a_stopped_line_waits_for_the_slot_another_worker_holds_until_it_says_it_is_free():
    """The line stopped for another worker's request, run again at once, must not take back the slot
    before that request reached llama-server: it waits until the worker says its request ended."""
    runner = SlotQueue()
    line = runner.take(1, BACKGROUND)
    assert runner.heard("other", 1, True) and line.preempted.is_set()
    line.release()
    again: list = []
    thread = threading.Thread(target=lambda: again.append(runner.take(1, BACKGROUND)))
    thread.start()
    time.sleep(0.2)
    assert again == [] and runner.waiting == 1  # the slot is the other worker's now
    person = runner.take(1, "normal")  # a key's request here is not held back by it
    person.release()
    assert again == [] and runner.waiting == 1
    assert not runner.heard("other", 0, False)  # its request ended
    thread.join(5)
    assert len(again) == 1 and runner.running == 1


def waiting_for(queue: SlotQueue, priority_name: str, capacity: int) -> tuple[threading.Thread, list]:
    """A take of `priority_name` in a thread, once it waits in `queue` (its place in the list when granted)."""
    granted: list = []
    before = queue.waiting
    thread = threading.Thread(target=lambda: granted.append(queue.take(capacity, priority_name)))
    thread.start()
    while queue.waiting == before and not granted:
        time.sleep(0.001)
    return thread, granted


def test_while_people_use_a_model_batch_lines_leave_a_slot_free_for_their_next_request(monkeypatch):
    queue = SlotQueue()
    lines = [queue.take(3, BACKGROUND) for _ in range(3)]  # nobody about: the batch takes every slot
    assert queue.kept_free() == 0 and queue.running == 3
    lines.pop().release()
    monkeypatch.setattr(slot_queues, "PEOPLE_ACTIVE_SECONDS", 0.5)
    queue.take(3, "normal").release()  # a person's request, answered
    assert queue.kept_free() == 1
    line, granted = waiting_for(queue, BACKGROUND, 3)  # the batch's next line leaves that slot free
    assert granted == [] and queue.running == 2 and queue.waiting == 1
    person = queue.take(3, "normal")  # so the person's next request has it at once, stopping nobody
    assert queue.preemptions == 0 and not any(place.preempted.is_set() for place in lines)
    person.release()
    assert granted == [] and queue.waiting == 1  # still kept while people are about
    line.join(5)  # once they are gone (PEOPLE_ACTIVE_SECONDS), the line takes it without being told
    assert len(granted) == 1 and queue.running == 3 and queue.kept_free() == 0


def test_a_second_person_at_once_still_preempts_a_line_and_a_one_slot_model_keeps_no_slot_free():
    queue = SlotQueue()
    line = queue.take(2, BACKGROUND)
    first = queue.take(2, "normal")  # the free slot
    assert queue.kept_free() == 1 and not line.preempted.is_set()
    second, granted = waiting_for(queue, "high", 2)
    assert line.preempted.is_set() and queue.preemptions == 1
    line.release()
    second.join(5)
    assert len(granted) == 1
    first.release()
    granted[0].release()
    alone = SlotQueue()
    alone.take(1, "normal").release()
    assert alone.kept_free() == 0 and alone.take(1, BACKGROUND).held  # one slot: the line runs, preemptible


def test_a_cpu_bound_box_may_keep_more_slots_free_but_never_every_one():
    """--batch-free-slots: fewer lines share the decoding steps with a person's prompt."""
    from api_like_oai.arguments import parse_settings

    queue = SlotQueue(free_for_people=3)
    queue.take(4, "normal").release()
    assert queue.kept_free() == 3
    line = queue.take(4, BACKGROUND)
    thread, granted = waiting_for(queue, BACKGROUND, 4)
    assert granted == [] and queue.running == 1  # one line beside people, not three
    queue.free_for_people = 9
    assert queue.kept_free() == 3  # all but one: a batch is never stopped outright
    queue._people_until = 0.0
    line.release()  # (people gone) the next line is let in at the release
    thread.join(5)
    assert len(granted) == 1
    granted[0].release()
    assert parse_settings(["--batch-free-slots", "2"]).batch_free_slots == 2
    assert parse_settings([]).batch_free_slots is None and slot_queues.KEPT_FREE == 1  # by --batch-yield (app.py)
    with pytest.raises(SystemExit):
        parse_settings(["--batch-free-slots", "-1"])


def test_a_request_another_worker_let_in_keeps_a_slot_free_here_too(monkeypatch):
    runner = SlotQueue()
    runner.take(3, BACKGROUND).release()  # the slots are known
    assert runner.kept_free() == 0
    monkeypatch.setattr(slot_queues, "PEOPLE_ACTIVE_SECONDS", 0.5)
    assert not runner.heard("other", 1, True)  # 1 of 3 held there: nothing to preempt
    assert not runner.heard("other", 0, False) and runner.kept_free() == 1  # ended there; people still about
    lines = [runner.take(3, BACKGROUND) for _ in range(2)]
    thread, granted = waiting_for(runner, BACKGROUND, 3)
    assert granted == [] and runner.running == 2
    thread.join(5)  # people gone: the third line runs
    assert len(granted) == 1
    for place in [*lines, *granted]:
        place.release()


def test_yielding_a_persons_request_stops_every_line_and_holds_them_until_its_first_token():
    """--batch-yield on (a CPU box): the lines decoding beside a prompt share its compute, so a key's request
    stops all of them, not one, and they run again once it answers; nothing holds them after."""
    queue = SlotQueue(yielding=True)
    lines = [queue.take(4, BACKGROUND) for _ in range(3)]
    person = queue.take(4, "normal")  # the slot kept free: it goes at once, and every line is stopped
    assert all(place.preempted.is_set() for place in lines) and queue.preemptions == 3
    for place in lines:
        place.release()
    again, granted = waiting_for(queue, BACKGROUND, 4)
    assert granted == [] and queue.running == 1  # a stopped line sent again would read beside its prompt
    person.answer_began()  # its first token
    again.join(5)
    assert len(granted) == 1 and not granted[0].preempted.is_set()
    person.release()
    granted[0].release()
    assert queue.running == 0 and queue._starting == 0


def test_yielding_a_request_ended_before_its_first_token_or_given_up_waiting_holds_nothing():
    queue = SlotQueue(yielding=True)
    line = queue.take(1, BACKGROUND)
    queue._recheck_in = lambda: (_ for _ in ()).throw(TimeoutError())  # its wait ends: its client left
    with pytest.raises(TimeoutError):  # one slot, the line's: it waited and gave up
        queue.take(1, "normal")
    del queue._recheck_in
    assert line.preempted.is_set() and queue._starting == 0
    line.release()
    failed = queue.take(1, "normal")
    failed.release()  # ended without an answer (an upstream error)
    assert queue._starting == 0 and queue.take(1, BACKGROUND).held


def test_yielding_another_workers_request_stops_every_line_here_until_it_says_it_answers():
    told: list[tuple[int, bool, int]] = []
    other_worker = SlotQueue(elsewhere=lambda held, came, starting: told.append((held, came, starting)) or True)
    other_worker.yielding = True
    person = other_worker.take(None, "normal")
    person.answer_began()
    person.release()
    assert told == [(1, True, 1), (1, False, 0), (0, False, 0)]  # came, answering, ended
    runner = SlotQueue(yielding=True)
    lines = [runner.take(3, BACKGROUND) for _ in range(2)]
    assert runner.heard("other", 1, True, 1) and all(place.preempted.is_set() for place in lines)
    for place in lines:
        place.release()
    again, granted = waiting_for(runner, BACKGROUND, 3)
    assert granted == []
    assert not runner.heard("other", 1, False, 0)  # it answers: the line goes (its slot still counted)
    again.join(5)
    assert len(granted) == 1


@pytest.mark.parametrize(
    ("choice", "upstream", "gpu", "yields"),
    [
        ("auto", "http://127.0.0.1:8080", False, True),  # a CPU-only box serving its own llama-server
        ("auto", "http://127.0.0.1:8080", True, False),  # a GPU: lines beside a prompt cost it little
        ("auto", "http://10.0.0.5:8080", False, False),  # a server elsewhere: its devices are not known
        ("on", "http://10.0.0.5:8080", True, True),
        ("off", "http://127.0.0.1:8080", False, False),
    ],
)
def test_batch_yield_is_on_by_default_for_a_cpu_only_box_serving_its_own_models(monkeypatch, choice, upstream, gpu, yields):
    from api_like_oai import app
    from api_like_oai.arguments import parse_settings

    monkeypatch.setattr(app, "has_gpu", lambda: gpu)
    settings = parse_settings(["--llama-api", upstream, "--batch-yield", choice])
    assert app.yields_to_people(settings.batch_yield, settings.models[0]) is yields
    assert parse_settings([]).batch_yield == "auto"
    model = SimpleNamespace(name="m", settings=settings.models[0], places=SlotQueue())
    app._wire_slot_queues(SimpleNamespace(models={"m": model}), SimpleNamespace(slot_waiting_noted=None), None, settings)
    model.places.take(4, "normal").release()  # people about, 4 slots
    assert model.places.yielding is yields and model.places.kept_free() == (3 if yields else 1)  # one line beside them


def test_a_word_of_slots_held_elsewhere_expires_if_their_end_is_never_told(monkeypatch):
    monkeypatch.setattr(slot_queues, "HELD_ELSEWHERE_FOR", 0.2)
    runner = SlotQueue()
    runner.take(1, BACKGROUND).release()  # the slots are known
    runner.heard("killed worker", 1, True)
    started = time.monotonic()
    line = runner.take(1, BACKGROUND)
    assert 0.15 < time.monotonic() - started < 5 and line.held


def test_a_worker_running_batch_lines_marks_it_for_the_others_while_it_does(tmp_path):
    runner, other = LaneMark(str(tmp_path)), LaneMark(str(tmp_path))
    queue = SlotQueue()
    queue.on_background = runner.noted
    lines = [queue.take(3, BACKGROUND) for _ in range(2)]
    queue.take(3, "normal").release()  # a key's request is no batch line
    assert other.elsewhere() and not runner.elsewhere()  # the runner tells nobody of its own requests
    lines[0].release()
    assert other.elsewhere()
    lines[1].release()
    assert not other.elsewhere() and runner.own == 0


class Slow:
    """An upstream whose generation gives an event whenever the test lets it."""

    def __init__(self):
        self.closed = False
        self.next = threading.Semaphore(0)

    def generate(self, request, **options):
        def events():
            try:
                for n in range(100):
                    self.next.acquire()
                    yield GenerationEvent(text=f"t{n}")
            finally:
                self.closed = True

        return events()

    def slot_count(self):
        return 1


class BackgroundTicket:
    caller = type("Caller", (), {"priority": BACKGROUND})()
    metrics = None


def test_the_door_stops_a_preempted_generation_at_its_next_event_and_frees_its_slot():
    upstream, queue = Slow(), SlotQueue()
    events = Door(upstream, queue, BackgroundTicket()).generate(UpstreamRequest("/completion", {}))
    upstream.next.release()
    assert next(events).text == "t0"
    granted = []
    waiter = threading.Thread(target=lambda: granted.append(queue.take(1, "high")))
    waiter.start()
    while queue.waiting == 0:
        time.sleep(0.001)
    upstream.next.release()
    with pytest.raises(Preempted):
        next(events)
    waiter.join(5)
    assert upstream.closed and len(granted) == 1 and queue.running == 1
    granted[0].release()


def test_the_door_tells_the_queue_when_a_persons_answer_begins_so_the_lines_held_for_it_go_on():
    upstream, queue = Slow(), SlotQueue(yielding=True)
    upstream.slot_count = lambda: 3  # the person's, one kept free for the next, one for a line
    events = Door(upstream, queue).generate(UpstreamRequest("/completion", {}))  # no key: a person's
    line, granted = waiting_for(queue, BACKGROUND, 3)
    assert granted == []  # its prompt is read alone
    upstream.next.release()
    assert next(events).text == "t0"
    time.sleep(0.05)
    assert granted == []  # its first token is on its way to the client first
    upstream.next.release()
    assert next(events).text == "t1"  # passed on: the line goes
    line.join(5)
    assert len(granted) == 1 and queue.running == 2
    events.close()
    granted[0].release()
    assert queue.running == 0


class HungUp(Slow):
    """Slow, whose exchange with the server is registered as backends.http does, and whose read fails
    as a socket shut down from elsewhere does."""

    def __init__(self):
        super().__init__()
        self.hung_up = threading.Event()

    def generate(self, request, **options):
        OPENED.get()(self)
        events = super().generate(request, **options)

        def failing():
            for event in events:
                if self.hung_up.is_set():
                    raise UpstreamUnavailable("llama.cpp at <address>: connection lost")
                yield event

        return failing()

    def hang_up(self):
        self.hung_up.set()
        self.next.release()  # the reader wakes now


def test_a_preempted_generation_is_hung_up_at_once_and_its_lost_read_is_a_preemption():
    upstream, queue = HungUp(), SlotQueue()
    events = Door(upstream, queue, BackgroundTicket()).generate(UpstreamRequest("/completion", {}))
    upstream.next.release()
    assert next(events).text == "t0"  # its answer began: a hang-up is now a preemption, not a lost server
    waiter = threading.Thread(target=lambda: queue.take(1, "high").release())
    waiter.start()
    assert upstream.hung_up.wait(5)  # no next token needed
    with pytest.raises(Preempted):
        list(events)
    waiter.join(5)
    assert queue.running == 0 and queue.preemptions == 1


@pytest.mark.parametrize(
    ("sent", "key", "gets"),
    [
        ("flex", "normal", "low"),
        ("priority", "normal", "normal"),  # never above the key's own
        ("priority", "high", "high"),
        ("default", "high", "high"),
        ("auto", "low", "low"),
        (" LOW ", "high", "low"),
        ("u=3, i", "normal", "normal"),  # a browser's RFC 9218 header names no priority of ours
        (None, "low", "low"),
        ("high", BACKGROUND, BACKGROUND),  # a batch's line asks for nothing above the background
    ],
)
def test_a_request_may_ask_a_priority_up_to_its_keys(sent, key, gets):
    from api_like_oai.access.priority import asked, capped

    assert capped(asked(sent), key) == gets


def test_a_batchs_progress_row_has_its_rate_and_time_left_and_a_tenant_sees_its_own():
    from api_like_oai.batch.batches import progress_row
    from api_like_oai.dashboard.live import for_viewer

    batch = {
        "id": "batch_1",
        "_key": "labelling",
        "endpoint": CHAT,
        "status": "in_progress",
        "in_progress_at": 1000,
        "request_counts": {"total": 100, "completed": 25, "failed": 5},
    }
    row = progress_row(batch, None, now=1060.0)
    assert (row["lines_per_minute"], row["eta_seconds"], row["status"]) == (30.0, 140.0, "in_progress")
    assert progress_row(batch, {"at": 1050}, now=1060.0)["status"] == "cancelling"
    waiting = progress_row({**batch, "status": "validating", "in_progress_at": None}, None, now=1060.0)
    assert waiting["lines_per_minute"] is None and waiting["eta_seconds"] is None
    other = {**row, "id": "batch_2", "key": "someone-else"}
    caller = type("Caller", (), {"name": "labelling", "allows": lambda self, name: True})()
    assert for_viewer({"batches": [row, other]}, caller, sees_all=False)["batches"] == [row]
    assert for_viewer({"batches": [row, other]}, caller, sees_all=True)["batches"] == [row, other]


def loaded(in_flight: int = 0, queued: int = 0, value: str = "loaded") -> dict:
    return {"value": value, "in_flight": in_flight, "queued": queued}


@pytest.mark.parametrize(
    ("started", "name", "may"),
    [
        ({}, "remote", True),  # a model the proxy does not start
        ({"a": loaded(in_flight=3)}, "a", True),  # loaded: its lines run beside its users (the slot queue orders them)
        ({"a": loaded(in_flight=1), "b": loaded(value="unloaded")}, "b", False),  # loading b could evict a, in use
        ({"a": loaded(queued=1), "b": loaded(value="unloaded")}, "b", False),
        ({"a": loaded(), "b": loaded(value="unloaded")}, "b", True),  # a is idle: b may be loaded
        ({"a": loaded(in_flight=2, value="loading"), "b": loaded(value="unloaded")}, "b", True),
    ],
)
def test_a_line_loads_a_model_only_when_that_evicts_nobodys(started, name, may):
    from api_like_oai.batch.runner import may_run

    assert may_run(started, name) is may


@pytest.fixture(params=["sqlite", "redis"])
def claims_store(request, tmp_path):
    """An empty store of each backend, for the batch runner's claims."""
    from api_like_oai.store import StoreSettings, open_store

    if request.param == "sqlite":
        store = open_store(StoreSettings("sqlite", str(tmp_path / "store.sqlite3")), 4096)
    else:
        store = open_store(StoreSettings("redis", request.getfixturevalue("redis_server").url.rsplit("/", 1)[0] + "/6"), 4096)
        store.client.flushdb()
    yield store
    store.close()


def test_one_runner_holds_a_batch_and_a_silent_one_is_taken_over(claims_store, monkeypatch):
    from api_like_oai.batch import runner

    store = claims_store
    first = runner.Claim.take(store, "batch_x", "first")
    assert first is not None and runner.Claim.take(store, "batch_x", "second") is None  # held, renewed just now
    assert first.renew()
    monkeypatch.setattr(runner, "CLAIM_SECONDS", 0.0)  # the first is silent from now on
    second = runner.Claim.take(store, "batch_x", "second")
    assert second is not None and second.epoch == 2
    assert not first.renew() and second.renew()  # the first learns it lost the batch, and stops
    assert runner.Claim.take(store, "batch_x", "third").epoch == 3  # (silent again: taken over again)


def test_a_batch_given_back_on_a_graceful_stop_is_taken_over_at_once_and_written_no_more(claims_store):
    """Runner.let_go (SIGTERM): the claim goes back without CLAIM_SECONDS of silence; the result written
    before stays, none is written after (a line answering then runs again under the next holder)."""
    from api_like_oai.batch import runner

    store, owner = claims_store, "k" * 64
    holder = runner.Runner(app=None, store=store, gate=None, slots=lambda: 1)
    first = runner.Claim.take(store, "batch_x", holder.holder)
    job = holder.running["batch_x"] = runner.Job(holder, "batch_x", owner, first)
    store.put("file-out", owner, {"id": "file-out"})
    job.batch = {"id": "batch_x", "_output_file": "file-out", "request_counts": {"completed": 0, "failed": 0}}
    store.put("batch_x", owner, job.batch)
    assert job._write({"id": "1"}, success=True)
    holder.let_go()
    assert not job._write({"id": "2"}, success=True) and not first.renew()
    job._save()  # the next holder writes the batch now: not this one's counts
    assert store.get("batch_x", owner)["request_counts"]["completed"] == 0
    second = runner.Claim.take(store, "batch_x", "second")
    assert second is not None and second.epoch == 2 and second.renew() and not first.renew()
    assert [item["id"] for item in store.page("file-out", owner).items] == ["1"]
    files.add_to_list(store, batches.QUEUE_KEY, batches.RUNNER_OWNER, {"id": "batch_y", "owner": owner})
    holder.round()  # stopping: it takes no batch any more
    assert runner.Claim.take(store, "batch_y", "second") is not None and list(holder.running) == ["batch_x"]


def test_a_batchs_usage_sums_its_answers_of_every_api():
    good, _ = lines.checked(b"\n".join(line(c) for c in "abcd"), CHAT)
    chat = {"usage": {"prompt_tokens": 10, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4}}}
    responses = {"usage": {"input_tokens": 7, "output_tokens": 2, "output_tokens_details": {"reasoning_tokens": 1}}}
    embeddings = {"usage": {"prompt_tokens": 5, "total_tokens": 5}}
    answered = [
        lines.answered(g, 200, body) for g, body in zip(good, (chat, responses, embeddings, {"no": "usage"}), strict=True)
    ]
    assert lines.usage_of(answered) == {
        "input_tokens": 22,
        "input_tokens_details": {"cached_tokens": 4},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 1},
        "total_tokens": 27,
    }
