"""The supervisor process: one asyncio run loop owns every launched model's state and children (no
locks: every change happens on the loop, and after each one `reconsider` asks plan.decide what to do;
a model's status moves only along plan.TRANSITIONS).

The state machine alone: workers reach it through listener.py (the socket, one Connection per request,
and the process's main) in the typed messages of messages.py.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import string
import time
from collections import deque
from dataclasses import dataclass, field

from ..errors import without_addresses
from . import drafts, launch_rules, messages, occupancy, plan, slots
from .footprint import device_split, model_facts
from .process import Child, StartFailed, http_request, record_children
from .spec import LaunchSpec, SupervisorSettings

log = logging.getLogger("api_like_oai.supervisor")

TICK_SECONDS = 1.0  # TTLs and retry times are looked at this often
MAX_BACKOFF_SECONDS = 60.0
OCCUPANCY_FRESH_SECONDS = 0.1  # an endpoint picker scrapes every 50 ms: the replicas' /slots are read at most this often
DYING_SECONDS = 2.0  # a replica that refuses connections this long after a worker said so, is killed
RETRY_AFTER_FULL_SECONDS = 5


@dataclass
class Waiter:
    arrived: float
    granted: asyncio.Future


@dataclass
class Managed:
    """One launched model's state, owned by the run loop."""

    spec: LaunchSpec
    footprint_mib: int | None = None  # None until its file's header was read (estimate())
    facts: dict = field(default_factory=dict)  # what the model list shows of its file (gguf_header.summary)
    estimating: asyncio.Future | None = None
    per_device: dict | None = None  # device -> MiB, with a budget per device (once estimated)
    status: str = plan.UNLOADED
    stage: str | None = None  # what a load is doing now
    children: list[Child | None] = field(default_factory=list)
    in_flight: int = 0
    last_used: float = 0.0
    waiters: deque = field(default_factory=deque)
    draining: bool = False
    failures: int = 0
    retry_at: float = 0.0
    error: str | None = None
    exit_code: int | None = None
    extra_args: tuple[str, ...] = ()  # from a load request's "args" (launch_rules), and a fleet pool's --rpc
    lent_mib: int = 0  # of its memory, what other boxes' rpc-servers hold (a fleet's pool)
    good_args: tuple[str, ...] = ()  # the extra_args of its last launch that loaded (the configured one at first)
    good_lent_mib: int = 0
    loads: int = 0
    load_seconds: float = 0.0
    evictions: int = 0
    ttl: float | None = None  # a client's keep_alive (Ollama's API), over spec.ttl until it stops
    restores: slots.RestoreReport = field(default_factory=slots.RestoreReport)  # all loads together
    drafts: drafts.DraftCounts = field(default_factory=drafts.DraftCounts)
    stage_seconds: dict = field(default_factory=dict)  # a swap's stages, all swaps together (the bench reads them)
    drain_began: float | None = None

    def move(self, status: str) -> None:
        """The model's status changes to `status`, if plan.TRANSITIONS allows it (IllegalTransition if not)."""
        plan.check_transition(self.status, status)
        self.status = status

    def timed(self, stage: str, since: float) -> float:
        """Add the time since `since` to `stage`'s total; now, the next stage's start."""
        now = time.monotonic()
        self.stage_seconds[stage] = self.stage_seconds.get(stage, 0.0) + now - since
        return now

    @property
    def idle_seconds(self) -> float:
        return self.spec.ttl if self.ttl is None else self.ttl

    def ready_urls(self) -> list[str]:
        return [url for url, child in zip(self.spec.urls, self.children, strict=False) if child and child.exit_code is None]

    def view(self) -> plan.ModelState:
        return plan.ModelState(
            self.spec.name,
            (self.footprint_mib or 0) - self.lent_mib,
            self.status,
            self.in_flight,
            self.last_used,
            self.waiters[0].arrived if self.waiters else None,
            self.draining,
            self.spec.pinned,
            self.idle_seconds,
            self.retry_at,
            self.per_device,
        )

    def status_dict(self) -> dict:
        status = {
            "value": self.status if self.status != plan.STOPPING else plan.LOADED,
            "memory_mib": None if self.footprint_mib is None else self.footprint_mib - self.lent_mib,
            "replicas": len(self.spec.ports),
            "upstreams": list(self.spec.urls),
            "ready": len(self.ready_urls()) if self.status == plan.LOADED else 0,
            "in_flight": self.in_flight,
            "queued": len(self.waiters),
            "pinned": self.spec.pinned,
            "ttl": self.idle_seconds,
            "loads": self.loads,
            "load_seconds": round(self.load_seconds, 3),
            "evictions": self.evictions,
            "failures": self.failures,
            "restored_tokens": self.restores.restored_tokens,
            "restore_failures": self.restores.failures,
            "restores_skipped": self.restores.skipped,
            "stage_seconds": {stage: round(seconds, 4) for stage, seconds in self.stage_seconds.items()},
        }
        if self.status == plan.STOPPING:
            status["stopping"] = True
        if self.stage:
            status["stage"] = self.stage
        if self.status == plan.FAILED:
            retry_in = max(0.0, self.retry_at - time.monotonic())  # the next request tries again after this
            status |= {"failed": True, "exit_code": self.exit_code, "error": self.error, "retry_in": round(retry_in, 1)}
        if self.extra_args:
            status["args"] = list(self.extra_args)
        if self.per_device is not None:
            status["devices"] = dict(self.per_device)
        if self.spec.draft:
            status["draft"] = {"model": self.spec.draft, "replicas": len(self.spec.drafting_urls), **self.drafts.status()}
        if self.lent_mib:
            status["lent_mib"] = self.lent_mib
        if self.facts:
            status["file"] = self.facts
        return status

    def live_children(self) -> list[Child]:
        return [child for child in self.children if child and child.exit_code is None]


class Supervisor:
    def __init__(self, settings: SupervisorSettings, pid_file: str | None = None):
        self.settings, self.pid_file = settings, pid_file
        self.budget = plan.Budget(settings.memory_budget_mib, settings.max_loaded, settings.device_budgets)
        self.models = {spec.name: Managed(spec) for spec in settings.models}
        self.subscribers: list[asyncio.Queue] = []
        self._occupancy: asyncio.Future | None = None  # the last reading of the models' occupancy, or the one under way
        self._occupancy_at = 0.0
        # llama-server reads its image marker from here (LLAMA_MEDIA_MARKER) instead of drawing one per start
        alphabet = string.ascii_letters + string.digits
        self.media_marker = "<__media_" + "".join(secrets.choice(alphabet) for _ in range(32)) + "__>"

    # --- the decisions -----------------------------------------------------------------------

    def reconsider(self) -> None:
        actions = plan.decide([m.view() for m in self.models.values()], self.budget, time.monotonic())
        for name, why in actions.refuse.items():
            self._fail_waiters(self.models[name], why, 503)
        for name in actions.drain:
            self.models[name].draining = True
            self.models[name].drain_began = time.monotonic()
            self.models[name].evictions += 1
            log.info("model %s: draining to make room (%d in flight)", name, self.models[name].in_flight)
        for name in actions.stop:
            model = self.models[name]
            model.evictions += name in actions.evicted
            model.move(plan.STOPPING)
            asyncio.get_running_loop().create_task(self._stop(model))
        for name in actions.start:
            model = self.models[name]
            model.move(plan.LOADING)
            model.stage = "starting"
            self.emit(model)
            asyncio.get_running_loop().create_task(self._start(model))

    # --- estimates ---------------------------------------------------------------------------

    async def estimate(self, model: Managed) -> None:
        """The model's footprint and file facts, read once, off the loop: start-up never waits for them
        (estimate_all reads them in the background; a request for a model not read yet waits here)."""
        if model.estimating is None:
            model.estimating = asyncio.ensure_future(asyncio.to_thread(model_facts, model.spec, self.settings.header_cache))
        model.footprint_mib, model.facts = await asyncio.shield(model.estimating)
        budgets = self.settings.device_budgets
        if budgets is not None and model.per_device is None:
            replicas = len(model.spec.ports)
            model.per_device = {
                device: mib * replicas
                for device, mib in device_split(
                    model.spec, model.footprint_mib // replicas, budgets, self.settings.header_cache
                ).items()
            }

    async def estimate_all(self) -> None:
        for model in self.models.values():
            await self.estimate(model)
            self.emit(model)

    # --- leases ------------------------------------------------------------------------------

    async def acquire(self, name: str, say, unreachable: list[str] | None = None) -> list[str]:
        """The ready URLs of model `name` once it is loaded; the caller then holds a lease (in_flight).
        `unreachable`: the URLs a worker could not reach (refused or reset before any byte), checked
        first, so that a crashed replica is restarted and this request waits for it like any load."""
        model = self._model(name)
        if model.footprint_mib is None:
            await self.estimate(model)
        if unreachable and model.status == plan.LOADED:
            await self._recheck(model, set(unreachable))
        if model.status == plan.LOADED and not model.draining and model.ready_urls():
            return self._grant(model)
        if model.status == plan.FAILED and time.monotonic() < model.retry_at:
            raise SupervisorError(model.error or "the model failed", 503, max(1, round(model.retry_at - time.monotonic())))
        if len(model.waiters) >= model.spec.queue_limit:
            raise SupervisorError(
                f"too many requests are waiting for model {name!r} ({model.spec.queue_limit}, its queue_limit)",
                429,
                RETRY_AFTER_FULL_SECONDS,
            )
        waiter = Waiter(time.monotonic(), asyncio.get_running_loop().create_future())
        model.waiters.append(waiter)
        await say(messages.Wait(model.stage or "queued"))
        self.reconsider()
        try:
            return await waiter.granted
        except asyncio.CancelledError:
            if waiter in model.waiters:
                model.waiters.remove(waiter)
            if waiter.granted.done() and not waiter.granted.cancelled() and waiter.granted.exception() is None:
                self.release(name)  # granted just as the caller went away
            raise

    def _grant(self, model: Managed) -> list[str]:
        model.in_flight += 1
        model.last_used = time.monotonic()
        return model.ready_urls()

    def release(self, name: str) -> None:
        model = self.models[name]
        model.in_flight -= 1
        model.last_used = time.monotonic()
        if model.in_flight == 0:
            self.reconsider()

    def _grant_waiters(self, model: Managed) -> None:
        while model.waiters:
            waiter = model.waiters.popleft()
            if not waiter.granted.done():
                waiter.granted.set_result(self._grant(model))

    def _fail_waiters(self, model: Managed, message: str, status: int, retry_after: int | None = None) -> None:
        while model.waiters:
            waiter = model.waiters.popleft()
            if not waiter.granted.done():
                waiter.granted.set_exception(SupervisorError(message, status, retry_after))

    def _model(self, name: str) -> Managed:
        if name not in self.models:
            raise SupervisorError(f"model {name!r} is not one the proxy starts; known: {', '.join(sorted(self.models))}", 404)
        return self.models[name]

    # --- load and unload on request -----------------------------------------------------------

    async def load(self, name: str, args: list[str] | None, say, lent_mib: int = 0, rpc: list[str] | None = None) -> dict:
        """Load `name` with a caller's `args` (launch_rules' allowlist, checked again here) added to its
        configured command line, restarted if they changed; no args: the configured launch. `rpc`: a
        fleet's pool, `lent_mib` of its memory held there, not counted against this budget. A requested
        launch that fails is answered as a 400 with the child's last line, and the model goes back to
        its last good launch at once (started again if it was loaded): no request breaks a model."""
        model = self._model(name)
        launch = _requested_launch(args, rpc)
        if launch == model.extra_args and lent_mib == model.lent_mib:
            await self.acquire(name, say)
            self.release(name)
            return model.status_dict()
        good, was_loaded = (model.good_args, model.good_lent_mib), model.status == plan.LOADED
        await self.unload(name)
        model.extra_args, model.lent_mib = launch, lent_mib
        try:
            await self.acquire(name, say)
        except SupervisorError as failure:
            if launch == good[0] or model.status != plan.FAILED:
                raise
            self._fall_back(model, good, was_loaded)
            raise SupervisorError(
                f"model {name!r} did not start with the requested args: {_last_line(failure.message)}", 400
            ) from None
        self.release(name)
        return model.status_dict()

    def _fall_back(self, model: Managed, good: tuple[tuple[str, ...], int], was_loaded: bool) -> None:
        """After a requested launch failed: the last good launch, with no backoff (the failure was the
        request's, not the model's), started again at once if it was loaded."""
        model.extra_args, model.lent_mib = good
        model.failures, model.retry_at = max(0, model.failures - 1), 0.0
        log.warning("model %s: a requested launch failed; back to its last good launch", model.spec.name)
        self.emit(model)
        if was_loaded:
            asyncio.get_running_loop().create_task(self._load_quietly(model.spec.name))

    async def _load_quietly(self, name: str) -> None:
        async def nobody(_message) -> None:
            return None

        try:
            await self.acquire(name, nobody)
        except SupervisorError:
            return  # its failure is in its status, and retried with backoff by the next request
        self.release(name)

    def keep_alive(self, name: str, seconds: float) -> dict:
        """Model `name` stays loaded `seconds` idle (0: for ever) from now on, until it is stopped."""
        model = self._model(name)
        model.ttl = seconds
        self.reconsider()
        return model.status_dict()

    async def unload(self, name: str) -> dict:
        model = self._model(name)
        if model.status in (plan.LOADING, plan.LOADED) and not model.draining:
            model.draining = True
            self.reconsider()
        while model.status in (plan.LOADING, plan.LOADED, plan.STOPPING):
            await self._next_change()
        return model.status_dict()

    async def _next_change(self) -> None:
        queue: asyncio.Queue = asyncio.Queue()
        self.subscribers.append(queue)
        try:
            await queue.get()
        finally:
            self.subscribers.remove(queue)

    # --- starting and stopping ----------------------------------------------------------------

    async def _start(self, model: Managed) -> None:
        spec, began = model.spec, time.monotonic()
        slot_dir = self.settings.slot_dir if spec.slot_save else None
        env = {"LLAMA_MEDIA_MARKER": self.media_marker, **spec.environment(), "LLAMA_API_KEY": self.settings.api_key}
        model.children = [
            Child(
                f"{spec.name}/{replica}",
                spec.argv(self.settings.llama_server, replica, slot_dir, model.extra_args),
                env,
                spec.ports[replica],
            )
            for replica in range(len(spec.ports))
        ]
        try:
            for child in model.children:
                await child.spawn()
                self._record_children()
            spawned = model.timed("start", began)
            await asyncio.gather(
                *(child.wait_ready(spec.load_timeout, lambda stage: self._stage(model, stage)) for child in model.children)
            )
            healthy = model.timed("health", spawned)
            if slot_dir:
                await self._restore(model, slot_dir)
                model.timed("restore", healthy)
        except (StartFailed, OSError) as exc:
            await self._failed_start(model, str(exc))
            return
        for child in model.children:
            asyncio.get_running_loop().create_task(self._watch(model, child))
        model.move(plan.LOADED)
        model.stage, model.error, model.failures = None, None, 0
        model.good_args, model.good_lent_mib = model.extra_args, model.lent_mib
        model.loads += 1
        model.load_seconds += time.monotonic() - began
        log.info("model %s: loaded in %.2f s", spec.name, time.monotonic() - began)
        self.emit(model)
        self._grant_waiters(model)
        self.reconsider()

    async def _failed_start(self, model: Managed, message: str) -> None:
        for child in model.children:
            await child.stop(self.settings.stop_timeout)
        model.exit_code = next((c.exit_code for c in model.children if c.exit_code not in (None, 0, -15)), None)
        self._mark_failed(model, message)
        self._fail_waiters(model, message, 503, round(model.retry_at - time.monotonic()))
        self.reconsider()

    def _mark_failed(self, model: Managed, message: str) -> None:
        model.failures += 1
        model.move(plan.FAILED)
        model.stage, model.error, model.draining = None, message, False
        model.drain_began = None
        # the first failure is retried by the next request at once; then 1, 2, 4 ... 60 s apart
        model.retry_at = time.monotonic() + (min(2 ** (model.failures - 2), MAX_BACKOFF_SECONDS) if model.failures > 1 else 0)
        log.warning("model %s failed: %s", model.spec.name, message)
        self.emit(model)

    async def _recheck(self, model: Managed, urls: set[str]) -> None:
        """The replicas at `urls` a worker could not reach: one that answers /health is left alone; one
        that does not is given a moment to finish dying (a kill -9 the loop has not seen yet), killed if
        it still runs, and counted lost at once, before the request that found it joins the waiters."""
        for url, child in zip(model.spec.urls, model.children, strict=False):
            if url not in urls or child is None or child.noticed or child.stopping:
                continue
            if child.exit_code is None and (await http_request(child.port, "GET", "/health", timeout=2))[0]:
                continue
            try:
                await asyncio.wait_for(asyncio.shield(child.process.wait()), DYING_SECONDS)
            except asyncio.TimeoutError:
                log.warning("[%s] runs but does not accept connections: killed", child.label)
                child.kill_now()
                await child.process.wait()
            self._lost(model, child)

    async def _watch(self, model: Managed, child: Child) -> None:
        """A replica that exits without being asked to: the model is failed once no replica is left
        (restarted by the next request, after a backoff); its leases fail on their own connections."""
        await child.process.wait()
        self._lost(model, child)

    def _lost(self, model: Managed, child: Child) -> None:
        """`child` exited unasked (seen by its watch or by a worker's recheck, whichever is first)."""
        if child.stopping or child.noticed:
            return
        child.noticed = True
        log.warning("[%s] exited unexpectedly with code %s", child.label, child.exit_code)
        if model.status == plan.LOADED and not model.ready_urls():
            model.exit_code = child.exit_code
            self._mark_failed(
                model, f"llama-server for {child.label} exited with code {child.exit_code}; its last lines:\n{child.tail(20)}"
            )
            self.reconsider()
        else:
            self.emit(model)

    async def _stop(self, model: Managed) -> None:
        began = time.monotonic()
        if model.drain_began is not None and model.draining:  # drained to make room: its requests count too
            model.stage_seconds["drain"] = model.stage_seconds.get("drain", 0.0) + began - model.drain_began
            model.drain_began = None
        self._stage(model, "stopping")
        if model.spec.draft:
            await self.read_drafts(model)  # its last counts, before its processes and their counters go
        if model.spec.slot_save and self.settings.slot_dir:
            await asyncio.gather(
                *(
                    slots.save_all(child, self.settings.slot_dir, model.spec.name, n)
                    for n, child in enumerate(model.children)
                    if child
                )
            )
        signalled = model.timed("stop", began)
        # plan.decide stops only a model with no lease held, and its slots are saved: SIGKILL at once
        await asyncio.gather(*(child.stop(self.settings.stop_timeout, idle=True) for child in model.children if child))
        model.timed("exit", signalled)
        model.move(plan.UNLOADED)
        model.stage, model.draining, model.ttl = None, False, None
        log.info("model %s: unloaded", model.spec.name)
        self.emit(model)
        self.reconsider()

    async def _restore(self, model: Managed, slot_dir: str) -> None:
        """Each replica's saved slots restored and checked (slots.py); a failure is the log's, not a client's."""
        self._stage(model, "restoring slots")
        reports = await asyncio.gather(
            *(slots.restore_all(child, slot_dir, model.spec.name, n) for n, child in enumerate(model.children))
        )
        for report in reports:
            model.restores.add(report)

    async def read_drafts(self, model: Managed) -> None:
        """Add what each replica's draft proposed and had accepted since the last read (drafts.py)."""
        children = model.live_children()
        for child in children:
            status, body = await http_request(child.port, "GET", "/metrics", api_key=child.api_key)
            if status == 200:
                model.drafts.update(child.pid, body.decode("utf-8", "replace"))
        model.drafts.forget({child.pid for child in children})

    def _record_children(self) -> None:
        if self.pid_file:
            record_children(self.pid_file, [child for model in self.models.values() for child in model.children if child])

    def _stage(self, model: Managed, stage: str) -> None:
        model.stage = stage
        self.emit(model)

    async def stop_all(self) -> None:
        await asyncio.gather(
            *(child.stop(self.settings.stop_timeout) for model in self.models.values() for child in model.children if child)
        )

    # --- what is going on ----------------------------------------------------------------------

    def emit(self, model: Managed) -> None:
        event = {"model": model.spec.name, "status": model.status_dict(), "time": time.time()}
        for queue in self.subscribers:
            queue.put_nowait(event)

    def status(self) -> dict:
        return {
            "models": {name: model.status_dict() for name, model in self.models.items()},
            "memory_budget_mib": self.budget.memory_mib,
            "max_loaded": self.budget.max_loaded,
            "devices": self.device_use(),
        }

    async def occupancy(self) -> dict:
        """Every model's occupancy (occupancy.py), as JSON. Scrapes that come together share one
        reading, and a reading serves for OCCUPANCY_FRESH_SECONDS, so however often the pool's metrics
        are scraped, each replica's /slots is asked at most that often."""
        reading = self._occupancy
        if reading is None or (reading.done() and time.monotonic() - self._occupancy_at > OCCUPANCY_FRESH_SECONDS):
            self._occupancy_at = time.monotonic()
            reading = self._occupancy = asyncio.ensure_future(self._read_occupancy())
        return await asyncio.shield(reading)

    async def _read_occupancy(self) -> dict:
        """Every model's, loaded or not (one not loaded: its queue for the load, nothing running)."""
        models = list(self.models.values())
        answers = await asyncio.gather(*(self._replicas_slots(model) for model in models))
        return {
            "models": {
                model.spec.name: occupancy.occupancy(
                    model.in_flight, len(model.waiters), replicas_slots, model.spec.kv_unified
                ).to_json()
                for model, replicas_slots in zip(models, answers, strict=True)
            }
        }

    async def _replicas_slots(self, model: Managed) -> list[list[dict]]:
        """The slots of each of the model's replicas that answered /slots (one that did not is left out)."""
        if model.status != plan.LOADED:
            return []
        answers = await asyncio.gather(
            *(http_request(child.port, "GET", "/slots", timeout=1.0, api_key=child.api_key) for child in model.live_children())
        )
        return [slots for slots in (occupancy.parse_slots(*answer) for answer in answers) if slots is not None]

    def device_use(self) -> dict:
        """Each device's budget and the MiB the models holding memory take of it (their estimates)."""
        holding = [model.view() for model in self.models.values() if model.status in plan.HOLDING_MEMORY]
        used = plan.device_use(holding, self.budget)
        return {device: {"budget_mib": limit, "used_mib": used.get(device, 0)} for device, limit in self.budget.limits().items()}

    def logs(self, name: str) -> list[str]:
        model = self._model(name)
        return [line for child in model.children if child for line in child.lines]


def _requested_launch(args: list[str] | None, rpc: list[str] | None) -> tuple[str, ...]:
    """The flags a load adds to the configured command line: the caller's, held to the allowlist (a
    worker checked them already; the supervisor does not take a worker's word for what it runs), and
    a pool's helpers."""
    try:
        requested = launch_rules.check_requested(args or ())
    except launch_rules.DisallowedFlag as refused:
        raise SupervisorError(str(refused), 400) from None
    if rpc and not all(isinstance(endpoint, str) and launch_rules.RPC_ENDPOINT.fullmatch(endpoint) for endpoint in rpc):
        raise SupervisorError("a pool's helpers are host:port addresses", 400)
    return requested + (("--rpc", ",".join(rpc)) if rpc else ())


def _last_line(message: str) -> str:
    """A start failure's last log line, without addresses (a load's answer may reach a tenant)."""
    lines = [line for line in message.splitlines() if line.strip()]
    return without_addresses(lines[-1] if lines else message)[:500]


class SupervisorError(Exception):
    def __init__(self, message: str, status: int, retry_after: int | None = None):
        super().__init__(message)
        self.message, self.status, self.retry_after = message, status, retry_after

    def reply(self) -> messages.Refused:
        return messages.Refused(self.message, self.status, self.retry_after)
