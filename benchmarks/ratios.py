"""The ratio rows (issue 29): the proxy beside its neighbours, in one sitting, every row alternating
its targets (ABBA: A B C, then C B A, ...; LiteLLM's windows after the others', `window_order`), so that
whatever the machine does meanwhile hits all of them alike. Judged as ratios or differences against a
neighbour in the same row, never as absolutes:

- against an instant or paced fake upstream: the floor of the stack (benchmarks/floor_app.py, a bare
  Flask app under the proxy's worker and HTTP client), the proxy, and LiteLLM's proxy; the proxy's
  CPU per request (non-streamed) and per relayed token (paced streams) ÷ the floor's;
- against a real llama-server (`--threads` one less than the cores): llama-server's own OpenAI API,
  the proxy and LiteLLM; the time to the first token each adds, and their tokens/s ÷ direct.

Every front serves several model names, one per upstream, so each is started once for all rows.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

from .client import Connection, Sample, closed_loop, encode_post
from .processes import ProcessTree, Service, TasksCpu
from .results import REQUEST_ERROR_BOUND, FrontCell, RatioRow, block_error, percentile
from .workload import GENERATED_TOKENS, PATHS, generation_body

# the model names the fronts serve: one per upstream
INSTANT, PACED_FAST, PACED_SLOW, REAL = "bench", "paced8", "paced40", "real"
PACED_INTERVALS = {PACED_FAST: 8.0, PACED_SLOW: 40.0}
LITELLM_SETTLE_SECONDS = 5.0  # at most, after a LiteLLM window, for its cut requests to wind down


@dataclass(frozen=True)
class RatioPlan:
    window_seconds: float = 3.0
    warmup_seconds: float = 0.5
    rounds: int = 4  # passes over the targets, the order reversed every other pass
    instant_clients: int = 8
    # (streams, model, a new connection per stream): issue 13's paced loads, keep-alive and not
    paced: tuple[tuple[int, str, bool], ...] = (
        (16, PACED_FAST, False),
        (16, PACED_FAST, True),
        (64, PACED_FAST, False),
        (64, PACED_FAST, True),
        (256, PACED_SLOW, False),
        (256, PACED_SLOW, True),
    )
    generation_clients: tuple[int, ...] = (1, 4)
    generation_rounds: int = 12
    # The request-cost rows (instant upstream, CPU per request): the floor and the proxy (and the proxy at
    # another revision) take turns under the same clients in phases of `phase_seconds`, `block_passes`
    # passes over them (ABBA) a block; blocks are added past `request_seconds_min` until every target ÷
    # floor has a standard error over the blocks within `request_error` (block_error), or for at most
    # `request_seconds_max`. LiteLLM's windows follow, `rounds` of them.
    phase_seconds: float = 0.25
    block_passes: int = 4
    request_seconds_min: float = 40.0
    request_seconds_max: float = 120.0
    request_error: float = REQUEST_ERROR_BOUND

    @classmethod
    def quick(cls, against: bool = False) -> RatioPlan:
        """The regression guard (`scripts/bench --quick`): the same rows, fewer and shorter windows; with
        an earlier revision beside (`--against`), twice the windows, so that each row's noise (the spread
        of a target's windows) is read from four windows, not two, which understate it."""
        return cls(
            window_seconds=2.0,
            warmup_seconds=0.3,
            rounds=4 if against else 2,
            paced=((16, PACED_FAST, False), (16, PACED_FAST, True), (64, PACED_FAST, False)),
            generation_clients=(1,),
            generation_rounds=6,
            request_seconds_min=30.0,
            request_seconds_max=90.0,
        )


def passes(names: tuple[str, ...], rounds: int):
    """ABBA: the targets in order, then reversed, `rounds` times in all."""
    for number in range(rounds):
        yield from (names if number % 2 == 0 else tuple(reversed(names)))


def window_order(names: tuple[str, ...], rounds: int) -> list[str]:
    """A CPU row's windows: the fronts compared closely (the floor, the proxy, the proxy at another
    revision) ABBA, then LiteLLM's windows. The requests a window cuts keep LiteLLM (and the fakes
    streaming to it) busy for seconds after its window, which would fall on whichever front came next;
    LiteLLM costs 10-30 times the others, so its own windows need no such care."""
    close = tuple(name for name in names if name != "litellm")
    return [*passes(close, rounds), *(["litellm"] * rounds if "litellm" in names else [])]


def warm_up(fronts: dict[str, Service], clients: int) -> None:
    """`clients` non-streamed requests at once to each front: its first requests import and build what it
    builds lazily (LiteLLM takes seconds), outside any window."""

    async def one(front: Service) -> None:
        request = encode_post(front.port, PATHS["chat"], generation_body("chat", False))
        connections = [Connection(front.port) for _ in range(clients)]
        try:
            await asyncio.gather(*(c.send(request) for c in connections))
        finally:
            for connection in connections:
                connection.close()

    for front in fronts.values():
        asyncio.run(one(front))


def stream_frames(front: Service, model: str) -> int:
    """SSE frames (`data: ` lines, [DONE] too) in one whole stream of this front: a paced token is then
    a frame counted in a window × GENERATED_TOKENS / this."""

    async def one() -> int:
        connection = Connection(front.port)
        try:
            body = {**generation_body("chat", True), "model": model}
            sample = await connection.send(encode_post(front.port, PATHS["chat"], body), keep_body=True)
        finally:
            connection.close()
        if sample.status != 200:
            raise RuntimeError(f"{front.name} answered {sample.status} to a {model} stream")
        return sample.body.count(b"data: ")

    return asyncio.run(one())


async def cpu_row(
    name: str,
    fronts: dict[str, Service],
    model: str,
    clients: int,
    plan: RatioPlan,
    new_connections: bool = False,
    frames: dict[str, int] | None = None,
) -> RatioRow:
    """A paced row: each front in turn under `clients` closed-loop clients for a window (window_order): its
    CPU per relayed token. Streams are counted by their frames as they arrive (`frames`: a whole stream's,
    per front), so a window's edges cut no stream, and a slow front that finishes none in a window still
    counts what it relayed."""
    spent = {target: _Totals() for target in fronts}
    for target in window_order(tuple(fronts), plan.rounds):
        await _window(fronts[target], spent[target], model, True, clients, plan, frames[target], new_connections, True)
    cells = [_cpu_cell(target, totals, frames[target]) for target, totals in spent.items()]
    return RatioRow(name, "token", clients, cells, load_now())


async def request_row(
    name: str, fronts: dict[str, Service], model: str, streamed: bool, clients: int, plan: RatioPlan, frames: dict[str, int]
) -> RatioRow:
    """A request-cost row: the fronts compared closely (all but LiteLLM) take turns under the same clients
    (interleaved), then LiteLLM's `plan.rounds` windows; each front's CPU per request (whole streams when
    `streamed`; LiteLLM's windows cut them, so its streams are counted by their `frames`)."""
    close = {target: front for target, front in fronts.items() if target != "litellm"}
    spent = {target: _Totals() for target in fronts}
    request = {**generation_body("chat", streamed), "model": model}
    measured = [pid for front in close.values() for pid in front.tree().pids()]
    everything = ProcessTree(os.getpid()).pids()
    with higher_priority(everything), cores_apart(measured, [pid for pid in everything if pid not in measured]):
        blocks = await interleaved(close, request, clients, plan, {target: spent[target] for target in close})
    for _ in range(plan.rounds if "litellm" in fronts else 0):
        await _window(fronts["litellm"], spent["litellm"], model, streamed, clients, plan, frames.get("litellm", 0))
    cells = [_cpu_cell(target, totals, 0 if target in close else frames.get(target, 0)) for target, totals in spent.items()]
    return RatioRow(name, "request", clients, cells, load_now(), block_seconds=blocks)


@dataclass
class _Totals:
    """One target's tally in a CPU row."""

    cpu: float = 0.0  # seconds
    requests: int = 0
    frames: float = 0.0
    seconds: float = 0.0
    errors: int = 0
    windows: list[float] = field(default_factory=list)  # the cost in each window, or each block


async def _window(
    front: Service,
    totals: _Totals,
    model: str,
    streamed: bool,
    clients: int,
    plan: RatioPlan,
    stream_frames: int,
    new_connections: bool = False,
    per_token: bool = False,
) -> None:
    """One window of `front` under `clients` closed-loop clients, added to `totals`; then wait until the
    front stops working on the requests the window cut."""
    request = encode_post(front.port, PATHS["chat"], {**generation_body("chat", streamed), "model": model})
    window = await closed_loop(
        front.port,
        request,
        clients,
        plan.window_seconds,
        plan.warmup_seconds,
        lambda: {"cpu": front.tree().cpu_seconds()},
        stagger=PACED_INTERVALS.get(model, 0.0) / 1000,
        new_connections=new_connections,
        abandon=True,
    )
    totals.cpu += window.spent("cpu")
    totals.requests += len(window.samples)
    totals.frames += window.spent("frames")
    totals.seconds += window.seconds
    totals.errors += sum(s.status != 200 for s in window.samples)
    streams = _streams(len(window.samples), window.spent("frames"), stream_frames if streamed else 0)
    totals.windows.append(_cost(window.spent("cpu"), streams, per_token))
    await settle(front, at_most=LITELLM_SETTLE_SECONDS if front.name == "litellm" else 2.0)


@dataclass
class _Turns:
    """What the clients of an interleaved row share: whose phase it is, and each front's answers."""

    current: str
    running: bool = True
    answered: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)


async def interleaved(fronts: dict[str, Service], body: dict, clients: int, plan: RatioPlan, spent: dict[str, _Totals]) -> float:
    """`clients` closed-loop clients, each with a keep-alive connection to every front, send `body` to
    whichever front's phase it is; the fronts take turns every `plan.phase_seconds` (ABBA), so each sees the
    machine as the others do, a quarter-second apart. Each front's CPU (TasksCpu: nanoseconds) and answers
    are read at the end of every block of `plan.block_passes` passes: its cost in each block goes to
    `spent[front].windows`, its totals to `spent` (these fronts' alone). Blocks are added until every front
    ÷ the floor is known within `plan.request_error`, between `plan.request_seconds_min` and `..._max`.
    Returns a block's seconds."""
    names = tuple(fronts)
    requests = {target: encode_post(front.port, PATHS["chat"], body) for target, front in fronts.items()}
    turns = _Turns(names[0], answered=dict.fromkeys(names, 0), errors=dict.fromkeys(names, 0))
    cpu = {target: TasksCpu(front.tree().pids()) for target, front in fronts.items()}
    tasks = [asyncio.create_task(_turn_client(fronts, requests, turns)) for _ in range(clients)]
    try:
        for target in names:  # a pass unmeasured: connections opened, each front warm
            turns.current = target
            await asyncio.sleep(plan.phase_seconds)
        started, before = time.perf_counter(), _tally(cpu, turns)
        while True:
            for target in passes(names, plan.block_passes):
                turns.current = target
                await asyncio.sleep(plan.phase_seconds)
            after = _tally(cpu, turns)
            _add_block(spent, before, after, plan.block_passes * plan.phase_seconds)
            before, elapsed = after, time.perf_counter() - started
            if elapsed >= plan.request_seconds_max or elapsed >= plan.request_seconds_min and _known(spent, plan):
                break
    finally:
        turns.running = False
        await asyncio.gather(*tasks, return_exceptions=True)
    return elapsed / len(spent["floor"].windows)


async def _turn_client(fronts: dict[str, Service], requests: dict[str, bytes], turns: _Turns) -> None:
    connections = {target: Connection(front.port) for target, front in fronts.items()}
    try:
        while turns.running:
            target = turns.current
            sample = await connections[target].send(requests[target])
            turns.answered[target] += 1
            turns.errors[target] += sample.status != 200
    finally:
        for connection in connections.values():
            connection.close()


def _tally(cpu: dict[str, TasksCpu], turns: _Turns) -> dict[str, tuple[int, int, int]]:
    """Each front's (CPU ns, answers, errors) so far."""
    return {target: (clock.nanoseconds(), turns.answered[target], turns.errors[target]) for target, clock in cpu.items()}


def _add_block(spent: dict[str, _Totals], before: dict, after: dict, seconds_each: float) -> None:
    """A block's CPU, answers and errors added to each front's totals, and its cost in the block (µs per
    answer; requests in flight at its edges count in the next block, their CPU partly in this one)."""
    for target, totals in spent.items():
        if target not in after:
            continue
        nanoseconds, answered, errors = (now - then for now, then in zip(after[target], before[target], strict=True))
        totals.cpu += nanoseconds / 1e9
        totals.requests += answered
        totals.errors += errors
        totals.seconds += seconds_each
        totals.windows.append(_cost(nanoseconds / 1e9, answered, per_token=False))


def _known(spent: dict[str, _Totals], plan: RatioPlan) -> bool:
    """Whether every front ÷ the floor has a standard error over the blocks within the plan's."""
    errors = [block_error(spent["floor"].windows, totals.windows) for target, totals in spent.items() if target != "floor"]
    return all(error <= plan.request_error for error in errors if not math.isnan(error)) and not any(map(math.isnan, errors))


@contextmanager
def higher_priority(pids: list[int], niceness: int = -10):
    """The processes measured (the bench, its fakes and fronts) ahead of the machine's other work while a
    request-cost row runs, so that what else runs takes less of their CPU and caches (the row's ratio
    reads higher on a busy machine: the proxy's larger working set suffers more). Needs CAP_SYS_NICE;
    without it the row runs as it is. Each process's own priority is restored after."""
    before = {}
    for pid in pids:
        try:
            before[pid] = os.getpriority(os.PRIO_PROCESS, pid)
            os.setpriority(os.PRIO_PROCESS, pid, niceness)
        except OSError:
            before.pop(pid, None)
    try:
        yield
    finally:
        for pid, value in before.items():
            try:
                os.setpriority(os.PRIO_PROCESS, pid, value)
            except OSError:
                continue  # the process ended


@contextmanager
def cores_apart(fronts: list[int], others: list[int]):
    """The fronts measured (every thread of their processes) on the last core, the bench's clients, its fakes
    and the rest on the other cores, while a request-cost row runs; each thread's own affinity restored after.
    Left to the scheduler, the fronts, the clients and the fake upstream sat on either core differently from
    one run to the next, and a wake-up across cores costs more than one on the same core on this kind of VM:
    the non-streamed row read 2.52x and 2.65x in two runs of one tree, 2.40x and 2.40x pinned (issue 54).
    Every front finds the same placement, in every run. Nothing to do on one core."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        yield
        return
    before: dict[int, set[int]] = {}
    for pids, placed in ((fronts, {cores[-1]}), (others, set(cores[:-1]))):
        for thread in _threads(pids):
            try:
                before[thread] = os.sched_getaffinity(thread)
                os.sched_setaffinity(thread, placed)
            except OSError:
                before.pop(thread, None)  # the thread ended
    try:
        yield
    finally:
        for thread, placed in before.items():
            try:
                os.sched_setaffinity(thread, placed)
            except OSError:
                continue  # the thread ended


def _threads(pids: list[int]) -> list[int]:
    """Every thread (its id) of the processes `pids` now."""
    threads = []
    for pid in pids:
        try:
            threads += [int(thread) for thread in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue  # the process ended
    return threads


async def settle(front: Service, quiet_cpu: float = 0.05, at_most: float = 2.0) -> None:
    """Wait (at most `at_most` seconds) until `front` stops using the CPU for the requests the window cut
    short, so that they do not slow the next target's window."""
    deadline = time.perf_counter() + at_most
    before = front.tree().cpu_seconds()
    while time.perf_counter() < deadline:
        await asyncio.sleep(0.25)
        now = front.tree().cpu_seconds()
        if now - before <= quiet_cpu * 0.25:
            return
        before = now


def _streams(requests: int, frames: float, stream_frames: int) -> float:
    """The streams relayed, counted by their frames (`stream_frames` a whole stream's), or the requests
    finished when not streamed."""
    return frames / stream_frames if stream_frames else requests


def _cost(cpu: float, streams: float, per_token: bool) -> float:
    """CPU (µs) per stream or request, or per relayed token; a front that spent CPU and finished nothing
    costs infinitely much."""
    units = streams * GENERATED_TOKENS if per_token else streams
    if units:
        return cpu * 1e6 / units
    return math.inf if cpu > 0 else math.nan


def _cpu_cell(target: str, totals: _Totals, stream_frames: int) -> FrontCell:
    streams = _streams(totals.requests, totals.frames, stream_frames)
    tokens = streams * GENERATED_TOKENS if stream_frames else 0
    return FrontCell(
        target,
        totals.requests,
        totals.seconds,
        _cost(totals.cpu, streams, per_token=False),
        _cost(totals.cpu, streams, per_token=True) if stream_frames else math.nan,
        totals.errors,
        tokens_per_s=tokens / totals.seconds if tokens else math.nan,
        window_costs=totals.windows,
    )


async def generation_row(
    targets: dict[str, Service], models: dict[str, str], clients: int, rounds: int, threads: int
) -> RatioRow:
    """Real generation: rounds of `clients` identical streamed chats to one target at a time, ABBA; each
    target's TTFT and tokens/s (medians), and the fronts' CPU per request."""
    connections = {target: [Connection(service.port) for _ in range(clients)] for target, service in targets.items()}
    requests = {
        target: encode_post(service.port, PATHS["chat"], {**generation_body("chat", True), "model": models[target]})
        for target, service in targets.items()
    }
    samples: dict[str, list[Sample]] = {target: [] for target in targets}
    cpu, errors = dict.fromkeys(targets, 0.0), dict.fromkeys(targets, 0)
    try:
        for index, target in enumerate((*targets, *passes(tuple(targets), rounds))):
            before = targets[target].tree().cpu_seconds()
            batch = await asyncio.gather(*(answered(c, requests[target]) for c in connections[target]))
            if index >= len(targets):  # the first pass warms up: connections, slots, the prompt cache
                cpu[target] += targets[target].tree().cpu_seconds() - before
                samples[target] += [s for s in batch if s is not None]
                errors[target] += sum(s is None for s in batch)
    finally:
        for connection in (c for group in connections.values() for c in group):
            connection.close()
    cells = []
    for target, measured in samples.items():
        cells.append(
            FrontCell(
                target,
                len(measured),
                sum(s.total for s in measured),
                cpu[target] * 1e6 / len(measured) if target != "direct" and measured else math.nan,
                math.nan,
                errors[target],
                ttft_p50_ms=percentile([s.ttft * 1000 for s in measured], 0.5),
                tokens_per_s=percentile([GENERATED_TOKENS / s.total for s in measured], 0.5),
            )
        )
    return RatioRow(
        f"real generation, streamed chat, {clients} client{'s' if clients > 1 else ''}, llama-server --threads {threads}",
        "generation",
        clients,
        cells,
        load_now(),
    )


async def answered(connection: Connection, request: bytes) -> Sample | None:
    """The sample of a whole 200 answer; None for another status or a stream cut short (LiteLLM 1.106.12
    drops a connection now and then on an internal error), the connection then opened anew."""
    try:
        sample = await connection.send(request, watch_text=True)
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        connection.close()
        return None
    return sample if sample.status == 200 else None


def load_now() -> str:
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def instant_and_paced_rows(fronts: dict[str, Service], plan: RatioPlan, progress: Callable[[str], None]) -> list[RatioRow]:
    frames: dict[str, dict[str, int]] = {}

    def frames_of(model: str) -> dict[str, int]:
        if model not in frames:
            frames[model] = {target: stream_frames(front, model) for target, front in fronts.items()}
        return frames[model]

    warm_up(fronts, plan.instant_clients)
    rows = []
    for streamed in (False, True):
        label = f"{'streamed 64 tokens' if streamed else 'non-streamed'}, instant upstream, {plan.instant_clients} clients"
        progress(f"ratio row: {label}")
        row = asyncio.run(
            request_row(label, fronts, INSTANT, streamed, plan.instant_clients, plan, frames_of(INSTANT) if streamed else {})
        )
        blocks = len(row.cell("floor").window_costs)
        progress(f"  {row.over_floor('proxy'):.2f}x the floor, ±{row.floor_error() * 100:.1f}% over {blocks} blocks")
        rows.append(row)
    for clients, model, new_connections in plan.paced:
        label = (
            f"paced {clients} streams @ {PACED_INTERVALS[model]:g} ms, "
            f"{'a new connection per stream' if new_connections else 'keep-alive'}"
        )
        progress(f"ratio row: {label}")
        rows.append(asyncio.run(cpu_row(label, fronts, model, clients, plan, new_connections, frames_of(model))))
    return rows


def generation_rows(
    llama: Service, fronts: dict[str, Service], plan: RatioPlan, threads: int, progress: Callable[[str], None]
) -> list[RatioRow]:
    targets = {"direct": llama, **{name: front for name, front in fronts.items() if name != "floor"}}
    models = {target: "bench" if target == "direct" else REAL for target in targets}
    rows = []
    for clients in plan.generation_clients:
        progress(f"ratio row: real generation, {clients} clients")
        started = time.perf_counter()
        rows.append(asyncio.run(generation_row(targets, models, clients, plan.generation_rounds, threads)))
        progress(f"  ({time.perf_counter() - started:.0f} s)")
    return rows
