"""Which models to start, drain or stop (pure: the supervisor's state in, actions out; no I/O, no clock).

The rules, llama-swap's and more:
- a model with a request in flight is never stopped: to make room it is *drained* (it takes no new
  requests; they queue behind the swap) and stopped once its last request ended;
- the waiting models are served in the order of their oldest waiting request, and all of a model's
  waiting requests go together when it is ready (A B A B arriving is served A A B B: swaps collated);
- room is made by evicting loaded, unpinned models, idle ones first, least recently used first; only
  as many as the budget (memory in MiB, and the count of loaded models) needs, and only models that
  free memory on a device where the new one does not fit (a budget per device: each GPU and the CPU);
- a model that can never fit (more than the budget, or more than what pinned models leave) is refused;
- an idle model past its TTL is stopped;
- one swap at a time: while models are being stopped to make room, nothing else starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Where a model is in its life. "stopping" and "loading" hold their memory like "loaded" does.
UNLOADED, LOADING, LOADED, STOPPING, FAILED = "unloaded", "loading", "loaded", "stopping", "failed"
HOLDING_MEMORY = (LOADING, LOADED, STOPPING)
# The status changes the supervisor may make (Managed.move), each with what makes it; any other is a bug.
TRANSITIONS: dict[tuple[str, str], str] = {
    (UNLOADED, LOADING): "a request waits for it and it fits (decide's start)",
    (FAILED, LOADING): "a request waits for it, its backoff past (decide's start)",
    (LOADING, LOADED): "every replica answers /health (and its slots are restored)",
    (LOADING, FAILED): "a replica exited, or was not ready within load_timeout",
    (LOADED, FAILED): "its last replica exited unasked",
    (LOADED, STOPPING): "idle and drained, evicted or past its TTL (decide's stop)",
    (STOPPING, UNLOADED): "its replicas exited",
}


class IllegalTransition(Exception):
    """A status change not in TRANSITIONS."""


def check_transition(old: str, new: str) -> None:
    if (old, new) not in TRANSITIONS:
        raise IllegalTransition(f"a model cannot go from {old} to {new}")


@dataclass(frozen=True)
class ModelState:
    """One launched model as the planner sees it."""

    name: str
    footprint_mib: int  # all replicas
    status: str = UNLOADED
    in_flight: int = 0  # leases held
    last_used: float = 0.0  # when its last request ended (or started, while in flight)
    waiting_since: float | None = None  # its oldest queued request's arrival, if any wait
    draining: bool = False  # to be stopped once idle; takes no new requests
    pinned: bool = False
    ttl: float = 0.0  # idle seconds before it is stopped; 0: never
    retry_at: float = 0.0  # a failed start is not retried before this
    per_device: dict | None = None  # device -> MiB (all replicas), with a budget per device


@dataclass(frozen=True)
class Budget:
    memory_mib: int  # all devices together
    max_loaded: int | None = None
    devices: dict | None = None  # device ("gpu0", "cpu") -> MiB; None: one pool of memory_mib

    def limits(self) -> dict[str, int]:
        return self.devices if self.devices is not None else {MEMORY: self.memory_mib}

    def needs(self, model: ModelState) -> dict[str, int]:
        """What `model` takes of each device this budget counts."""
        if self.devices is None or model.per_device is None:
            return {MEMORY if self.devices is None else CPU: model.footprint_mib}
        return model.per_device


MEMORY, CPU = "memory", "cpu"  # the one pool without per-device budgets; the system's memory with them


@dataclass
class Actions:
    """What to do now: start these, stop these (idle), drain these (busy), refuse their waiters."""

    start: list[str] = field(default_factory=list)
    stop: list[str] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)  # of those stopped or drained: to make room
    drain: list[str] = field(default_factory=list)
    refuse: dict[str, str] = field(default_factory=dict)  # model -> why


def decide(models: list[ModelState], budget: Budget, now: float) -> Actions:
    """The actions that bring `models` closer to serving every waiting request within `budget`."""
    actions = Actions()
    by_name = {model.name: model for model in models}
    for model in models:
        if model.status == LOADED and model.in_flight == 0 and (model.draining or _expired(model, now)):
            actions.stop.append(model.name)
    if actions.stop or any(m.status == STOPPING or (m.draining and m.in_flight) for m in models):
        return actions  # a swap is under way: memory is free only once its processes are gone
    holding = [m for m in models if m.status in HOLDING_MEMORY]
    for waiting in sorted((m for m in models if _needs_start(m, now)), key=lambda m: m.waiting_since):
        why_never = _never_fits(waiting, models, budget)
        if why_never:
            actions.refuse[waiting.name] = why_never
            continue
        evict = _evictions(waiting, holding, budget)
        if evict is None:
            break  # it fits only once models now loading are done: wait
        if not evict:
            actions.start.append(waiting.name)
            holding.append(waiting)
            continue
        for name in evict:
            (actions.drain if by_name[name].in_flight else actions.stop).append(name)
        actions.evicted.extend(evict)
        break
    return actions


def _expired(model: ModelState, now: float) -> bool:
    return model.ttl > 0 and now - model.last_used >= model.ttl


def _needs_start(model: ModelState, now: float) -> bool:
    return model.waiting_since is not None and model.status in (UNLOADED, FAILED) and now >= model.retry_at


def _never_fits(model: ModelState, models: list[ModelState], budget: Budget) -> str | None:
    limits, needs = budget.limits(), budget.needs(model)
    pinned = [m for m in models if m.pinned and m.status in HOLDING_MEMORY and m.name != model.name]
    pinned_use = device_use(pinned if not model.pinned else [], budget)
    for device, need in needs.items():
        limit = limits.get(device, 0)
        if need > limit:
            return (
                f"model {model.name!r} needs about {need} MiB{_on(device, budget)}, more than the whole memory "
                f"budget of {limit} MiB{_on(device, budget)} (--memory-budget; or set its memory: by hand)"
            )
        if need + pinned_use.get(device, 0) > limit:
            return (
                f"model {model.name!r} needs about {need} MiB{_on(device, budget)} and the pinned models "
                f"{', '.join(m.name for m in pinned)} hold {pinned_use[device]} MiB "
                f"of the {limit} MiB budget{_on(device, budget)}"
            )
    return None


def _on(device: str, budget: Budget) -> str:
    return "" if budget.devices is None else f" on {device}"


def device_use(models: list[ModelState], budget: Budget) -> dict[str, int]:
    """MiB `models` hold on each device of `budget`."""
    used: dict[str, int] = {}
    for model in models:
        for device, mib in budget.needs(model).items():
            used[device] = used.get(device, 0) + mib
    return used


def _evictions(model: ModelState, holding: list[ModelState], budget: Budget) -> list[str] | None:
    """The models to evict (idle first, least recently used first) for `model` to fit, none that is not
    needed; None when even evicting every evictable one is not enough (models still loading hold the
    rest). With a budget per device, only a model that frees a device the new one lacks room on (or a
    place under max_loaded) is evicted."""
    candidates = sorted((m for m in holding if m.status == LOADED and not m.pinned), key=lambda m: (m.in_flight > 0, m.last_used))
    evict: list[str] = []
    for candidate in candidates:
        short = _short_of(model, [m for m in holding if m.name not in evict], budget)
        if not short:
            break
        if "count" in short or short & {d for d, mib in budget.needs(candidate).items() if mib > 0}:
            evict.append(candidate.name)
    if _short_of(model, [m for m in holding if m.name not in evict], budget):
        return None
    for name in list(evict):  # one evicted early may not be needed once later ones are gone
        others = set(evict) - {name}
        if not _short_of(model, [m for m in holding if m.name not in others], budget):
            evict.remove(name)
    return evict


def _short_of(model: ModelState, holding: list[ModelState], budget: Budget) -> set[str]:
    """The devices `model` does not fit on beside `holding`, and "count" if max_loaded is reached."""
    limits, used = budget.limits(), device_use(holding, budget)
    short = {device for device, need in budget.needs(model).items() if used.get(device, 0) + need > limits.get(device, 0)}
    if budget.max_loaded is not None and len(holding) >= budget.max_loaded:
        short.add("count")
    return short
