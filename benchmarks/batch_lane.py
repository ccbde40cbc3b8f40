"""The batch lane's row (issue 51): people's chats while a batch saturates the slots, and the batch's own
throughput, against the real llama-server and model.

- **Time to first token** of short streamed chats, one at a time with a pause between them, in three
  conditions: the box idle; a batch running in the lane, holding every slot it may (the first chat finds
  every slot busy with its lines and preempts one; the later ones come while people are about, when the
  lane keeps a slot free for them: access/priority.py's KEPT_FREE; by --batch-yield's default, on a box
  without a GPU such as the bench's, all but one, and each chat stops every line until its first token); and the same
  lines sent as ordinary requests, as many at once as there are slots (what a job does without the lane:
  nothing is preempted, a chat waits for a slot like any request). Before each chat the row waits until the lines hold every slot
  they may again (every slot, or all but the kept ones while a line waits in the proxy for one), so each
  chat meets the busiest box the lane allows. Each condition's chats have their own prefix, so no chat
  finds its prompt cached by another's.
- **Throughput**: a batch of `throughput_lines` lines run in the lane with nothing else running, from the
  moment it is in progress (a batch is picked up within the runner's poll, a second: latency, not
  throughput) to its completion, submitted once the proxy no longer counts people about (the chats'
  PEOPLE_ACTIVE_SECONDS passed: no slot kept free), against the same lines (their own prefix) sent straight to
  llama-server, as many at once as it has slots. Compared as completion tokens per second, since a line
  may stop before its max_tokens.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from api_like_oai.access.priority import KEPT_FREE, PEOPLE_ACTIVE_SECONDS
from api_like_oai.app import has_gpu

from .processes import Service
from .results import BatchLaneResult
from .servers import llama_server, proxy
from .tables import number, table

SLOTS = 4  # llama_server()'s --parallel
MORE_FREE = SLOTS - 1  # --batch-free-slots of the second lane condition: one line beside people
# the slots the lane keeps free by default: all but one where it yields to people (--batch-yield auto: the
# proxy's llama-server is on loopback, so a box without a GPU), else KEPT_FREE
DEFAULT_KEPT = KEPT_FREE if has_gpu() else MORE_FREE
FINISHED = ("completed", "failed", "cancelled", "expired")
POLL_SECONDS = 0.1  # /slots asked this often before a chat (llama-server's HTTP thread: cheap)
STATUS_POLL_SECONDS = 0.25  # a batch's status asked this often (through the proxy: kept rare beside the lines)


@dataclass(frozen=True)
class BatchPlan:
    chats: int = 20  # interactive chats per condition
    chat_tokens: int = 8
    pause_seconds: float = 0.3  # between one chat's end and the next's wait for a full box
    line_tokens: int = 96  # a line's max_tokens: long enough to hold its slot
    saturating_lines: int = 400  # the saturating batch's lines (cancelled once the chats are done)
    throughput_lines: int = 48

    @classmethod
    def quick(cls) -> BatchPlan:
        return cls(chats=3, line_tokens=48, saturating_lines=40, throughput_lines=8)


def line_body(prefix: str, number: int, max_tokens: int) -> dict:
    """A batch line's chat: a different prompt per line, no sampling (the same tokens each way)."""
    text = f"{prefix} {number}: write a long story about a lighthouse keeper and the ships she saw."
    return {"model": "bench", "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens, "temperature": 0}


def batch_file(bodies: list[dict]) -> bytes:
    """The batch's input file: OpenAI's JSONL, one chat completion a line."""
    rows = (
        {"custom_id": f"line-{n}", "method": "POST", "url": "/v1/chat/completions", "body": body} for n, body in enumerate(bodies)
    )
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


def metric_value(metrics_text: str, name_and_labels: str) -> float:
    """A sample of Prometheus text, by its name and labels as written (0 when absent)."""
    for row in metrics_text.splitlines():
        if row.startswith(name_and_labels + " "):
            return float(row.rsplit(" ", 1)[1])
    return 0.0


def batch_row(binary: str, model: str, plan: BatchPlan, progress: Callable[[str], None]) -> BatchLaneResult:
    """The row, on a llama-server of its own (the machine's cores less one thread) and a proxy with a store;
    then the lane's chats again through a proxy started with --batch-free-slots MORE_FREE (its own store)."""
    store_dir = tempfile.mkdtemp(prefix="api-like-oai-bench-batch-")
    llama = llama_server(binary, model, max((os.cpu_count() or 2) - 1, 1)).start()
    fronts = [proxy(llama.url, "--store", f"sqlite://{store_dir}/store.sqlite3")]
    load = ", ".join(f"{n:.2f}" for n in os.getloadavg())
    try:
        fronts[0].start()
        result = _measured(Rig(llama, fronts[0], plan, kept=DEFAULT_KEPT), progress, load)
        fronts[0].stop()
        more_free = ("--batch-free-slots", str(MORE_FREE))
        fronts.append(proxy(llama.url, "--store", f"sqlite://{store_dir}/more-free.sqlite3", *more_free).start())
        progress(f"batch lane: {plan.chats} chats beside a batch again, {' '.join(more_free)}")
        rig = Rig(llama, fronts[1], plan, kept=MORE_FREE)
        result.more_free_ttft_ms, result.more_free_preemptions = _beside_lane(rig, "more-free")
        result.more_free, result.errors = MORE_FREE, result.errors + rig.errors
        return result
    finally:
        for front in fronts:
            front.stop()
        llama.stop()
        shutil.rmtree(store_dir, ignore_errors=True)


class Rig:
    def __init__(self, llama: Service, front: Service, plan: BatchPlan, kept: int = KEPT_FREE):
        import openai

        self.llama, self.front, self.plan = llama, front, plan
        self.kept = kept  # the slots the proxy's lane keeps free while people are about (--batch-free-slots)
        self.client = openai.OpenAI(base_url=front.url + "/v1", api_key="bench", max_retries=0, timeout=600)
        self.errors = 0

    def busy_slots(self) -> int:
        with urllib.request.urlopen(self.llama.url + "/slots", timeout=10) as answer:  # noqa: S310 - loopback
            return sum(1 for slot in json.loads(answer.read()) if slot.get("is_processing"))

    def metric(self, name_and_labels: str) -> float:
        with urllib.request.urlopen(self.front.url + "/metrics", timeout=10) as answer:  # noqa: S310 - loopback
            return metric_value(answer.read().decode(), name_and_labels)

    def preemptions(self) -> float:
        return self.metric('api_like_oai_batch_lines_total{outcome="preempted"}')

    def lane_full(self) -> bool:
        """Whether the batch's lines hold every slot they may: every slot, or every slot but those the
        lane keeps free for people while a line waits in the proxy for one."""
        busy = self.busy_slots()
        if busy >= SLOTS:
            return True
        return busy >= SLOTS - self.kept and self.metric('api_like_oai_slot_waiting{priority="background"}') > 0

    def every_slot_busy(self) -> bool:
        return self.busy_slots() >= SLOTS

    def first_token_ms(self, text: str) -> float:
        """One streamed chat's time to its first token (NaN if it failed)."""
        import openai

        started = time.perf_counter()
        messages = [{"role": "user", "content": text}]
        try:
            stream = self.client.chat.completions.create(
                model="bench", messages=messages, max_tokens=self.plan.chat_tokens, temperature=0, stream=True
            )
            first = None
            for chunk in stream:
                if first is None and chunk.choices and chunk.choices[0].delta.content:
                    first = time.perf_counter()
            return (first - started) * 1000 if first is not None else _failed(self)
        except openai.OpenAIError:
            return _failed(self)

    def chats(self, condition: str, full_box: Callable[[], bool] | None) -> list[float]:
        """The condition's chats, each (with `full_box`) once the box is as full as it gets."""
        times = []
        for index in range(self.plan.chats):
            if full_box is not None:
                _until(full_box, 120)
            times.append(self.first_token_ms(f"{condition} chat {index}: name one colour of the sea."))
            time.sleep(self.plan.pause_seconds)
        return times

    def submitted(self, bodies: list[dict]):
        uploaded = self.client.files.create(file=("lines.jsonl", io.BytesIO(batch_file(bodies))), purpose="batch")
        return self.client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")

    def status(self, batch_id: str) -> str:
        return self.client.batches.retrieve(batch_id).status


def _failed(rig: Rig) -> float:
    rig.errors += 1
    return float("nan")


def _until(condition: Callable[[], bool], timeout: float, poll: float = POLL_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError("the batch row waited too long (see the proxy's and llama-server's logs)")
        time.sleep(poll)


def _measured(rig: Rig, progress: Callable[[str], None], load: str) -> BatchLaneResult:
    plan = rig.plan
    rig.first_token_ms("warm-up: say hi.")
    progress(f"batch lane: {plan.chats} chats on the idle box")
    ttft = {"idle": rig.chats("idle", full_box=None)}
    progress(f"batch lane: {plan.chats} chats while a batch saturates the {SLOTS} slots (preemption)")
    ttft["lane"], preempted = _beside_lane(rig, "lane")
    progress(f"batch lane: {plan.chats} chats while the same lines run as plain requests (no preemption)")
    ttft["plain"] = _beside_plain_lines(rig)
    people_gone_at = time.monotonic() + PEOPLE_ACTIVE_SECONDS
    progress(f"batch lane: {plan.throughput_lines} lines straight to llama-server, then in the lane")
    direct_seconds, direct_tokens = _direct_throughput(rig)
    time.sleep(max(0.0, people_gone_at - time.monotonic()))  # the lane alone: no slot kept for people
    lane_seconds, lane_tokens = _lane_throughput(rig)
    return BatchLaneResult(
        SLOTS,
        ttft["idle"],
        ttft["lane"],
        ttft["plain"],
        int(preempted),
        plan.throughput_lines,
        lane_seconds,
        lane_tokens,
        direct_seconds,
        direct_tokens,
        rig.errors,
        load,
    )


def _beside_lane(rig: Rig, condition: str) -> tuple[list[float], int]:
    """(the chats' times to first token, lines preempted meanwhile) beside a saturating batch in the lane,
    cancelled once they are done (and the slots idle again)."""
    plan = rig.plan
    before = rig.preemptions()
    saturating = rig.submitted([line_body(f"{condition} saturating", n, plan.line_tokens) for n in range(plan.saturating_lines)])
    ttft = rig.chats(condition, full_box=rig.lane_full)
    preempted = rig.preemptions() - before
    rig.client.batches.cancel(saturating.id)
    _until(lambda: rig.status(saturating.id) in FINISHED, 300, STATUS_POLL_SECONDS)
    _until(lambda: rig.busy_slots() == 0, 120)
    return ttft, int(preempted)


def _beside_plain_lines(rig: Rig) -> list[float]:
    """The chats while SLOTS clients send the saturating lines through the proxy as plain requests."""
    stop = threading.Event()

    def client(worker: int) -> None:
        import openai

        for index in range(worker, 10**6, SLOTS):
            if stop.is_set():
                return
            try:
                rig.client.chat.completions.create(**line_body("plain", index, rig.plan.line_tokens))
            except openai.OpenAIError:
                rig.errors += 1

    workers = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(SLOTS)]
    for worker in workers:
        worker.start()
    try:
        return rig.chats("plain", full_box=rig.every_slot_busy)
    finally:
        stop.set()
        for worker in workers:
            worker.join(300)


def _lane_throughput(rig: Rig) -> tuple[float, int]:
    """(seconds from in progress to completed, completion tokens) of a batch run alone in the lane."""
    batch = rig.submitted([line_body("lane", n, rig.plan.line_tokens) for n in range(rig.plan.throughput_lines)])
    _until(lambda: rig.status(batch.id) != "validating", 60, STATUS_POLL_SECONDS)
    started = time.perf_counter()
    _until(lambda: rig.status(batch.id) in FINISHED, 1800, STATUS_POLL_SECONDS)
    seconds = time.perf_counter() - started
    done = rig.client.batches.retrieve(batch.id)
    rig.errors += done.request_counts.failed if done.request_counts else 0
    answers = (
        [json.loads(row) for row in rig.client.files.content(done.output_file_id).text.splitlines()]
        if done.output_file_id
        else []
    )
    return seconds, sum(answer["response"]["body"]["usage"]["completion_tokens"] for answer in answers)


def _direct_throughput(rig: Rig) -> tuple[float, int]:
    """(seconds, completion tokens) of the same lines sent straight to llama-server, SLOTS at once."""
    bodies = [line_body("direct", n, rig.plan.line_tokens) for n in range(rig.plan.throughput_lines)]

    def sent(body: dict) -> int:
        request = urllib.request.Request(  # noqa: S310 - loopback
            rig.llama.url + "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=600) as answer:  # noqa: S310 - loopback
            return json.loads(answer.read())["usage"]["completion_tokens"]

    started = time.perf_counter()
    with ThreadPoolExecutor(SLOTS) as pool:
        tokens = sum(pool.map(sent, bodies))
    return time.perf_counter() - started, tokens


def section(r: BatchLaneResult | None, alone_note: str = "") -> str:
    """results.md's part for the row (none if it was not measured)."""
    if r is None:
        return ""
    rows = [
        [label, str(len(getattr(r, f"{condition}_ttft_ms"))), number(r.ttft_p50(condition), 0), ratio]
        for condition, label, ratio in (
            ("idle", "idle box", "1.00x"),
            (
                "lane",
                "a batch in the lane (the defaults: without a GPU, one line beside people, each stopped for a chat)",
                f"{r.ttft_ratio('lane'):.2f}x",
            ),
            ("plain", "the same lines as plain requests (no preemption)", f"{r.ttft_ratio('plain'):.2f}x"),
            (
                "more_free",
                f"a batch in the lane, --batch-free-slots {r.more_free} (one line beside people)",
                f"{r.ttft_ratio('more_free'):.2f}x",
            ),
        )
        if getattr(r, f"{condition}_ttft_ms")
    ]
    lane_rate = r.lane_tokens / r.lane_seconds if r.lane_seconds else float("nan")
    direct_rate = r.direct_tokens / r.direct_seconds if r.direct_seconds else float("nan")
    return "\n\n".join(
        [
            "### 2g. People's chats beside a batch, and the batch's throughput (issue 51)",
            f"The real llama-server and model, {r.slots} slots. Short streamed chats one at a time, each sent once "
            "the lines hold every slot they may (the lane keeps one free while people are about, all but one by "
            "default without a GPU; the plain lines "
            "every slot; load average at the start: "
            f"{r.load_average}). {r.preemptions} lines were preempted during the lane's chats "
            f"({r.more_free_preemptions} with --batch-free-slots {r.more_free}); {r.errors} errors." + alone_note,
            table(["chats", "count", "time to first token p50 ms", "÷ idle"], rows),
            f"A batch of {r.lines} lines alone in the lane, from in progress to completed, against the same lines "
            f"sent straight to llama-server {r.slots} at once: {number(lane_rate, 1)} vs {number(direct_rate, 1)} "
            f"completion tokens/s ({r.throughput_ratio:.2f}x; {r.lane_seconds:.1f} s vs {r.direct_seconds:.1f} s).",
        ]
    )
