"""The batch runner: in every worker of every instance, a background loop that claims queued batches
through the store and runs their lines in the background lane.

- **One runner per batch, through the store**: a claim is an object of its own whose items are epochs
  ("epoch-1", "epoch-2", ...): a runner takes a batch by creating it (only_new) or, once its holder
  stopped renewing it for CLAIM_SECONDS (a killed worker, a crashed box), by appending the next epoch,
  which the store lets one caller do. A holder that finds a newer epoch than its own stops. A graceful
  stop (SIGTERM: `Runner.let_go`) gives each claim back, its beat made old, so the next runner (the
  restarted instance, another of the fleet) takes the batch over at once rather than CLAIM_SECONDS later.
- **A line is answered once**: its result is an item whose id is the line's number, in the output or
  the error file; the store refuses a second (DuplicateItem), so even two runners of one batch (a
  holder too slow to notice it lost its claim) write each line once. A restarted runner reads the
  results written and runs only the lines without one.
- **Lines run through the app itself, in-process** (`call`): the route of the batch's endpoint with
  its admission, the key's limits and usage, the model's lease, its errors in the API's shape, which
  is what an output line holds (status and body). Not HTTP to itself (no socket, no key in memory:
  the caller is given in the WSGI environ, which no header can set), and not the services called
  directly (that would copy four routes and the error mapping).
- **The lowest priority**: a line's caller is the batch's key at `BACKGROUND`, below every key's
  priority, so at the model's slot queue (access/priority.py) every interactive request goes first,
  and one that finds every slot busy with batch lines preempts one: the line is stopped and run again
  (services/door.py; with llama.cpp's prompt cache its prompt is not computed again).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import secrets
import threading
import time
from dataclasses import replace

from werkzeug.test import EnvironBuilder

from ..access.keys import ADMIN_NAME, ANONYMOUS, CONFIG_KEY_NAME, Caller
from ..access.priority import BACKGROUND
from ..store import DuplicateItem, Store
from ..store.base import encode
from ..store.keys import SHARED_OWNER, same_owner
from . import batches, files, lines

log = logging.getLogger("api_like_oai")

POLL_SECONDS = 1.0  # how often a runner looks at the queue
CLAIM_SECONDS = 10.0  # a claim not renewed this long is taken over (its runner is gone)
RENEW_SECONDS = 2.0  # a runner renews its claims, checks cancels and writes its counts this often
MAX_BATCHES = 4  # batches one worker runs at once
LIMITED_PAUSE_SECONDS = 1.0  # a line over its key's rate limits is tried again after this


class Runner:
    """The batch runner of one worker: `app` runs the lines, `store` holds the batches, `gate` says who
    a batch's owner is (its key now: a revoked key's batch stops), `slots()` how many lines to keep in
    flight (the models' slots), `metrics` (observability.Metrics) counts the lines."""

    def __init__(self, app, store: Store, gate, slots, metrics=None, lane_open=lambda model: True, elected=lambda: True):
        self.app, self.store, self.gate, self.slots, self.metrics = app, store, gate, slots, metrics
        self.lane_open = lane_open  # lane_open(model asked): whether a line for it may run now (see may_run)
        # until_answered(model asked): returns once the request a line was stopped for began answering
        self.until_answered = lambda model: None
        self.elected = elected  # whether this worker is its instance's runner (one_per_instance)
        self.holder = f"{os.getpid()}-{secrets.token_hex(4)}"
        self.running: dict[str, Job] = {}  # by batch id
        self.stopping = False  # a graceful stop began (let_go): no batch is taken any more
        self._lock = threading.Lock()

    def start(self) -> None:
        threading.Thread(target=self._loop, name="batch-runner", daemon=True).start()  # a greenlet under gevent

    def _loop(self) -> None:
        while True:
            try:
                self.round()
            except Exception:
                log.exception("the batch runner failed a round; it tries again")
            time.sleep(POLL_SECONDS)

    def round(self) -> None:
        """Claim the queued batches nobody runs (up to MAX_BATCHES here) and start each."""
        if self.stopping or not self.elected():
            return
        queue = self.store.page(batches.QUEUE_KEY, batches.RUNNER_OWNER)
        for entry in queue.items if queue is not None else []:
            with self._lock:
                if entry["id"] in self.running or len(self.running) >= MAX_BATCHES:
                    continue
            claim = Claim.take(self.store, entry["id"], self.holder)
            if claim is None:
                continue
            job = Job(self, entry["id"], entry["owner"], claim)
            with self._lock:
                stopping = self.stopping
                if not stopping:
                    self.running[entry["id"]] = job
            if stopping:  # let_go ran meanwhile, without this job: its claim goes back here
                claim.let_go()
                return
            threading.Thread(target=self._run, args=(job,), daemon=True).start()

    def _run(self, job: Job) -> None:
        try:
            job.run()
        except Exception:
            log.exception("batch %s failed in its runner; another round takes it up again", job.batch_id)
        finally:
            with self._lock:
                self.running.pop(job.batch_id, None)

    def let_go(self) -> None:
        """A graceful stop (SIGTERM, InFlight.drain): no batch taken any more, and each one run here given
        back at once (Job.let_go), so that the next runner need not wait CLAIM_SECONDS for its claim. A
        crash gives nothing back: its claims expire."""
        with self._lock:
            self.stopping = True
            jobs = list(self.running.values())
        for job in jobs:
            try:
                job.let_go()
            except Exception:  # the store failing: this claim expires as after a crash; the others go back
                log.exception("batch %s: its claim could not be given back; it expires", job.batch_id)

    def caller_of(self, owner: str) -> Caller | None:
        """The key whose objects `owner` owns, as a caller at the background priority; None if it is gone."""
        caller = _owner_caller(self.gate, self.store, owner)
        if caller is None:
            return None
        if caller.record is not None:
            return replace(caller, record=replace(caller.record, priority=BACKGROUND))
        return replace(caller, given_priority=BACKGROUND)


def _owner_caller(gate, store: Store, owner: str) -> Caller | None:
    if not gate.required:
        return ANONYMOUS if owner == SHARED_OWNER else None
    for keys, caller in ((gate.admin_keys, Caller(ADMIN_NAME, admin=True)), (gate.api_keys, Caller(CONFIG_KEY_NAME))):
        if any(same_owner(store.owner(key), owner) for key in keys):
            return caller
    record = gate.book.by_digest(owner) if gate.book is not None else None
    return Caller(record.name, record) if record is not None and record.usable(time.time()) else None


class Claim:
    """A runner's hold on one batch (see the module's docstring)."""

    def __init__(self, store: Store, key: str, epoch: int, holder: str):
        self.store, self.key, self.epoch, self.holder = store, key, epoch, holder
        self.given_back = False
        self._lock = threading.Lock()  # a renewal never lands after let_go's old beat

    @classmethod
    def take(cls, store: Store, batch_id: str, holder: str) -> Claim | None:
        key, now = f"{batch_id}-claim", time.time()
        held = store.get(key, batches.RUNNER_OWNER)
        if held is None:
            made = store.put(key, batches.RUNNER_OWNER, _beat(1, holder), [{"id": "epoch-1"}], only_new=True)
            return cls(store, key, 1, holder) if made else None
        if now - held["beat"] < CLAIM_SECONDS:
            return None
        epoch = held["epoch"] + 1
        try:
            if not store.append(key, batches.RUNNER_OWNER, [{"id": f"epoch-{epoch}"}]):
                return None
        except DuplicateItem:
            return None  # another runner took it over first
        store.update(key, batches.RUNNER_OWNER, _beat(epoch, holder))
        return cls(store, key, epoch, holder)

    def renew(self) -> bool:
        """Whether the claim is still this runner's (then renewed)."""
        with self._lock:
            if self.given_back or not self._ours():
                return False
            return self.store.update(self.key, batches.RUNNER_OWNER, _beat(self.epoch, self.holder))

    def let_go(self) -> None:
        """Give the claim back, the batch left queued: its beat made CLAIM_SECONDS old, so the next runner
        takes it over at once, with the next epoch (the claim deleted, it would begin again at epoch 1,
        this holder's own). Left alone if another runner holds it already."""
        with self._lock:
            self.given_back = True
            if self._ours():
                self.store.update(self.key, batches.RUNNER_OWNER, {"epoch": self.epoch, "beat": 0.0, "holder": self.holder})

    def _ours(self) -> bool:
        latest = self.store.page(self.key, batches.RUNNER_OWNER, limit=1, order="desc")
        return latest is not None and bool(latest.items) and latest.items[0]["id"] == f"epoch-{self.epoch}"

    def release(self) -> None:
        self.store.delete(self.key, batches.RUNNER_OWNER)


def _beat(epoch: int, holder: str) -> dict:
    return {"epoch": epoch, "beat": time.time(), "holder": holder}


class Job:
    """One batch run by its claim's holder: validated, its lines run, finalized."""

    def __init__(self, runner: Runner, batch_id: str, owner: str, claim: Claim):
        self.runner, self.batch_id, self.owner, self.claim = runner, batch_id, owner, claim
        self.store = runner.store
        self.results = self.store.limited_to(self.store.max_bytes * files.RESULT_FACTOR)
        self.stop_reason: str | None = None  # "cancelled", "expired", "lost" (the claim), "given back" (let_go)
        self.given_back = False  # let_go: nothing more is written (set under counts_lock)
        self.counts_lock = threading.Lock()
        self.last_written = 0.0
        self.answered_here = 0  # pending lines this job answered (the pending gauge's part that ended)

    def run(self) -> None:
        batch = self.store.get(self.batch_id, self.owner)
        if batch is not None and batch["status"] not in batches.FINISHED:
            self.batch = batch
            self._proceed()
        if self.stop_reason == "lost" or self.given_back:
            return  # another runner holds the batch now (or soon): its queue entry and claim are its own
        self.store.delete_item(batches.QUEUE_KEY, batches.RUNNER_OWNER, self.batch_id)
        self.claim.release()

    def _proceed(self) -> None:
        caller = self.runner.caller_of(self.owner)
        content = self._input()
        if caller is None:
            return self._fail("key_unavailable", "the batch's API key was revoked or has expired")
        if content is None:
            return self._fail("input_unavailable", "the input file was deleted or has expired")
        good, bad = lines.checked(content, self.batch["endpoint"])
        if self.batch["status"] == "validating":
            if not good and not bad:
                return self._fail("empty_file", "the input file has no lines")
            self._start(len(good) + len(bad))
        for line in bad:
            self._write(lines.refused(line), success=False)
        if self.batch["status"] == "in_progress":
            self._check(at_once=True)  # cancelled or expired before it ran: no line starts
            pending = self._pending(good)
            self._count("pending", len(pending))
            try:
                self._run_lines(caller, pending)
            finally:
                self._count("pending", -self.unfinished(pending))
        self._finalize(good)

    def _input(self) -> bytes | None:
        document = self.store.get(self.batch["input_file_id"], self.owner)
        page = self.store.page(self.batch["input_file_id"], self.owner) if document is not None else None
        return files.joined(page.items) if page is not None else None

    def _start(self, total: int) -> None:
        """The result files made (owned by the batch's key, listed once finalized) and the batch in progress."""
        now = int(time.time())
        for name, kind in (("_output_file", "output"), ("_error_file", "error")):
            document = files.new_file(f"{self.batch_id}_{kind}.jsonl", "batch_output", 0, now, now)
            self.results.put(document["id"], self.owner, document)
            self.batch[name] = document["id"]
        counts = {"total": total, "completed": 0, "failed": 0}
        self.batch |= {"status": "in_progress", "in_progress_at": now, "request_counts": counts}
        self._save()

    def _pending(self, good: list[lines.Line]) -> list[lines.Line]:
        """The lines without a result yet; the counts as the result files say."""
        done = {name: self._result_ids(self.batch[name]) for name in ("_output_file", "_error_file")}
        counts = self.batch["request_counts"]
        counts["completed"], counts["failed"] = len(done["_output_file"]), len(done["_error_file"])
        answered = done["_output_file"] | done["_error_file"]
        return [line for line in good if str(line.number) not in answered]

    def _result_ids(self, file_id: str) -> set[str]:
        page = self.store.page(file_id, self.owner)
        return {item["id"] for item in page.items} if page is not None else set()

    def let_go(self) -> None:
        """Stop here and give the claim back (a graceful stop): a line whose result was written stays
        done; none is written from now on (a line answering now is dropped and run again by the next
        holder, as after a crash: two holders never both write, and the batch is never saved stale)."""
        with self.counts_lock:
            self.given_back = True
            self.stop_reason = "given back"
        self.claim.let_go()

    def _run_lines(self, caller: Caller, pending: list[lines.Line]) -> None:
        """The pending lines, as many at once as the models have slots (asked again as lines end: a
        model's /props may be read only by the first line), until they are done or the batch stops."""
        todo = iter(pending)
        todo_lock = threading.Lock()
        on_behalf = lines.OnBehalf(caller, self.owner)
        emptied = threading.Event()

        def work() -> None:
            while self.stop_reason is None:
                with todo_lock:
                    line = next(todo, None)
                if line is None:
                    emptied.set()
                    return
                self._answer(line, on_behalf)

        workers: list[threading.Thread] = []
        while True:
            workers = [worker for worker in workers if worker.is_alive()]
            while not emptied.is_set() and self.stop_reason is None and len(workers) < max(1, self.runner.slots()):
                workers.append(threading.Thread(target=work, daemon=True))
                workers[-1].start()
            if not workers:
                break
            workers[0].join(RENEW_SECONDS)
            self._check()
        self._end_lines(todo)

    def _count(self, what: str, delta: int = 1) -> None:
        """/metrics: a line's outcome (completed, failed, preempted), or the pending lines' change."""
        metrics = self.runner.metrics
        if metrics is None:
            return
        if what == "pending":
            metrics.batch_lines_pending.inc(delta)
        else:
            metrics.batch_lines.labels(what).inc(delta)

    def unfinished(self, pending: list[lines.Line]) -> int:
        """How many of `pending` still have no result here (the batch stopped, or its claim was lost)."""
        return len(pending) - self.answered_here

    def _answer(self, line: lines.Line, on_behalf: lines.OnBehalf) -> None:
        """Run one line (again while it is preempted, or over one of its key's limits: a batch waits for
        its key's room rather than failing lines) and write its result."""
        while True:
            while not self.runner.lane_open(line.body.get("model")) and self.stop_reason is None:
                time.sleep(LIMITED_PAUSE_SECONDS)  # its model would evict one that people use: later
            status, headers, body = call(self.runner.app, self.batch["endpoint"], line.body, on_behalf)
            again = again_later(status, headers)
            if again is None or self.stop_reason is not None:
                break
            if again == "limited":
                time.sleep(LIMITED_PAUSE_SECONDS)
            else:
                self._count("preempted")
                self.runner.until_answered(line.body.get("model"))
        if again is not None:
            return  # the batch stops: the line is left for a later run (or the batch's end)
        self._write(lines.answered(line, status, body), lines.succeeded(status))
        with self.counts_lock:
            self.answered_here += 1
        self._count("pending", -1)

    def _write(self, item: dict, success: bool) -> bool:
        """A result written once (a second is refused by the store) and counted; whether it was written.
        Under counts_lock: let_go waits for a write under way, and none follows it."""
        with self.counts_lock:
            if self.given_back:
                return False
            try:
                self.results.append(self.batch["_output_file" if success else "_error_file"], self.owner, [item])
            except DuplicateItem:
                return False
            self.batch["request_counts"]["completed" if success else "failed"] += 1
        self._count("completed" if success else "failed")
        return True

    def _check(self, at_once: bool = False) -> None:
        """Every RENEW_SECONDS while lines run (`at_once`: now): the claim renewed, a cancel or the
        window's end noticed, the counts written."""
        if time.time() - self.last_written < RENEW_SECONDS and not at_once:
            return
        if not self.claim.renew():
            self.stop_reason = "lost"
        elif batches.cancel_of(self.store, self.owner, self.batch_id) is not None:
            self.stop_reason = "cancelled"
        elif time.time() >= self.batch["expires_at"]:
            self.stop_reason = "expired"
        if self.stop_reason != "lost":
            self._save()

    def _end_lines(self, todo) -> None:
        """Lines never run: on expiry each is failed in the error file (OpenAI's `batch_expired`)."""
        if self.stop_reason == "expired":
            for line in todo:
                if self._write(lines.refused(line, "batch_expired", "the batch expired before this request ran"), success=False):
                    self.batch["_expired"] = self.batch.get("_expired", 0) + 1

    def _finalize(self, good: list[lines.Line]) -> None:
        if self.stop_reason == "lost" or self.given_back:
            return
        if self.stop_reason is None and batches.cancel_of(self.store, self.owner, self.batch_id) is not None:
            self.stop_reason = "cancelled"
        now = int(time.time())
        self.batch |= {"status": "finalizing", "finalizing_at": self.batch.get("finalizing_at") or now}
        self._save()
        output = self.store.page(self.batch["_output_file"], self.owner)
        self.batch["usage"] = lines.usage_of(output.items if output is not None else [])
        for name, public_name in (("_output_file", "output_file_id"), ("_error_file", "error_file_id")):
            self.batch[public_name] = self._publish(self.batch[name], now)
        status = {"cancelled": "cancelled", "expired": "expired"}.get(self.stop_reason, "completed")
        self.batch |= {"status": status, f"{status}_at": now}
        self._save()

    def _publish(self, file_id: str, now: int) -> str | None:
        """A result file listed among its key's files with its size; deleted if it holds nothing."""
        page = self.store.page(file_id, self.owner)
        document = self.store.get(file_id, self.owner)
        if page is None or document is None:
            return None
        if not page.items:
            self.store.delete(file_id, self.owner)
            return None
        lifetime = min(self.batch.get("_output_seconds") or self.store.ttl_seconds, self.store.ttl_seconds)
        size = len(files.joined(page.items))
        self.results.update(file_id, self.owner, document | {"bytes": size, "created_at": now, "expires_at": int(now + lifetime)})
        if self.batch["id"].startswith("batch_"):  # an Anthropic Message Batch's results are read as its own
            files.listed(self.store, self.owner, file_id)
        return file_id

    def _fail(self, code: str, message: str) -> None:
        self.batch |= {
            "status": "failed",
            "failed_at": int(time.time()),
            "errors": {"object": "list", "data": [{"code": code, "message": message, "param": None, "line": None}]},
        }
        self._save()

    def _save(self) -> None:
        with self.counts_lock:
            if self.given_back:
                return  # the next holder writes the batch now
            self.last_written = time.time()
            self.store.update(self.batch_id, self.owner, self.batch)


def call(app, url: str, body: dict, on_behalf: lines.OnBehalf) -> tuple[int, dict, object]:
    """(status, headers, JSON body) of POST `url` with `body`, answered by `app` in-process for
    `on_behalf`; a line asking for a stream is answered whole (an output line holds one body)."""
    if "stream" in body:
        body = {**body, "stream": False}
    environ = EnvironBuilder(path=url, method="POST", data=encode(body), content_type="application/json").get_environ()
    environ[lines.ENVIRON_KEY] = on_behalf
    status: list[int] = []
    headers: dict[str, str] = {}

    def start_response(status_line: str, header_list, exc_info=None):
        status.append(int(status_line.split(" ", 1)[0]))
        headers.update((name.lower(), value) for name, value in header_list)
        return lambda data: None

    answer = app(environ, start_response)
    try:
        data = b"".join(answer)
    finally:
        getattr(answer, "close", lambda: None)()
    try:
        return status[0], headers, json.loads(data)
    except ValueError:
        return status[0], headers, {"error": {"message": data.decode(errors="replace")[:1000], "type": "server_error"}}


def again_later(status: int, headers: dict[str, str]) -> str | None:
    """Why a line's answer is no answer but a reason to run it again, by its status and headers (every
    API's error shape has them): "preempted" (its slot went to an interactive request), "limited" (over
    its key's rate or token limits: a Retry-After; a full storage quota has none); None: an answer."""
    if headers.get("x-preempted"):
        return "preempted"
    if status == 429 and "retry-after" in headers:
        return "limited"
    return None


def may_run(started: dict, name: str) -> bool:
    """Whether a batch's line for the model `name` may run now, by the supervisor's status of the models
    it starts (`started`, by name; pure): a model it does not start, or one loaded, at once; one to be
    loaded only while no other loaded model is in use (loading it could evict that one)."""
    own = started.get(name)
    if own is None or own["value"] == "loaded":
        return True
    others = [other for other_name, other in started.items() if other_name != name]
    return not any(other["value"] == "loaded" and (other["in_flight"] or other["queued"]) for other in others)


def one_per_instance(run_dir: str | None):
    """elected() for a worker of an instance with several (`run_dir`: where they meet, siblings.py):
    whether it runs the instance's batches, the first worker to lock a file there (asked again each
    round: a dead worker's lock goes with it). One runner per instance keeps its lines within the
    slots it orders (the slot queue is per worker): other workers' requests then wait in llama-server
    behind the lines running, never behind lines waiting. None: a single worker, always elected."""
    if run_dir is None:
        return lambda: True
    path = os.path.join(run_dir, "batch-runner.lock")
    held: list[int] = []

    def elected() -> bool:
        if held:
            return True
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            return False
        held.append(descriptor)
        return True

    return elected
