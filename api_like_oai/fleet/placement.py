"""Which boxes of the fleet a request for a model goes to, best first (pure: the boxes' records and the
request's session in, an ordered list of candidates out; no I/O, no clock), like supervisor/plan.py.

The order (issue 37, section 2):
1. prefix:   a box where the model is loaded, picked by the session's rendezvous hash among those
             boxes: every front computes the same box without asking Redis, so a session's turns find
             their KV cache wherever they come in (llama-server publishes no KV events to do better);
2. loaded:   the other boxes where it is loaded and not overloaded, least busy first;
3. loading:  a box already starting it (the one the cold-start lock named first): the request joins
             that load instead of starting a second copy;
4. restored: a box holding a saved KV slot of it (its supervisor restores the slot when it starts it);
5. fits:     a box whose free budget fits it without eviction, most free first;
6. evict:    a box where stopping only idle, unpinned models makes room, least memory evicted first;
7. busy:     the boxes where it is loaded but overloaded, least busy first: better queued than refused;
8. wait:     a box where it fits once the requests of its busy, unpinned models are done, least busy
             first: the request waits in that box's queue (keep-alives, its queue bound, a 429 with
             Retry-After), as it would on one box, rather than being refused;
9. rpc:      none of those: a model larger than any one box's room, pooled over llama.cpp's RPC backend
             (`pool`): a host's llama-server with `--rpc` to other boxes' rpc-servers, which lend memory.
A box stays the arbiter of its own memory: it may refuse, and the front tries the next candidate.

Replicas spanning boxes (a model's `boxes: N`): while fewer than N boxes hold a model that is loaded
somewhere, `replica_start` names the box to start one more copy on (a box with a saved slot of it
first, then the most free; never by evicting: a replica is not worth another model's place); once
loaded there it joins the boxes `prefix` spreads sessions over.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..backends.routing import rendezvous

PREFIX, LOADED, LOADING, RESTORED, FITS, EVICT, BUSY = "prefix", "loaded", "loading", "restored", "fits", "evict", "busy"
WAIT = "wait"
RPC, REPLICA = "rpc", "replica"
COLD_ROUTES = (LOADING, RESTORED, FITS, EVICT)  # routes on which the box starts the model
OVERLOAD_IN_FLIGHT = 8  # requests in flight on one model of one box beyond which another box is better


@dataclass(frozen=True)
class ModelOnBox:
    """One model a box can run, as its heartbeat says (the supervisor's status of it)."""

    state: str = "unloaded"  # unloaded, loading, loaded, failed
    memory_mib: int = 0
    in_flight: int = 0
    queued: int = 0
    pinned: bool = False
    borrows: tuple[str, ...] = ()  # the rpc-servers it was started with, pooled (their loans are taken)
    boxes: int = 1  # on how many boxes its config keeps it (`boxes:`, replicas spanning boxes)

    @property
    def holds_memory(self) -> bool:
        return self.state in ("loading", "loaded")


@dataclass(frozen=True)
class Box:
    """One box's record in Redis: where it is reached, its budget and its models."""

    address: str
    budget_mib: int
    models: Mapping[str, ModelOnBox] = field(default_factory=dict)
    saved: frozenset[str] = frozenset()  # models with a KV slot saved on this box
    rpc_endpoint: str | None = None  # its rpc-server (host:port), when it lends memory to a pool
    rpc_lend_mib: int = 0

    @property
    def used_mib(self) -> int:
        return sum(model.memory_mib for model in self.models.values() if model.holds_memory)

    @property
    def free_mib(self) -> int:
        return self.budget_mib - self.used_mib

    @property
    def in_flight(self) -> int:
        return sum(model.in_flight for model in self.models.values())

    def evictable_mib(self) -> int:
        """Memory the box's supervisor could free by stopping its idle, unpinned, loaded models."""
        return sum(
            model.memory_mib
            for model in self.models.values()
            if model.state == "loaded" and not model.pinned and model.in_flight == 0
        )


@dataclass(frozen=True)
class Candidate:
    address: str
    route: str  # why: prefix, loaded, loading, restored, fits, evict, busy


def place(
    model: str,
    boxes: list[Box],
    *,
    session: str | None = None,
    starting_on: str | None = None,
    overload: int = OVERLOAD_IN_FLIGHT,
) -> list[Candidate]:
    """The boxes to try for `model`, best first (each once); [] when no box can run it. `session` is the
    request's session key (affinity.session_key); `starting_on` the box the cold-start lock names."""
    serving = [box for box in boxes if model in box.models]
    loaded = [box for box in serving if box.models[model].state == "loaded"]
    ready = [box for box in loaded if box.models[model].in_flight < overload]
    candidates = _warm(model, ready, session)
    loading = [box for box in serving if box.models[model].state == "loading" or box.address == starting_on]
    candidates += [Candidate(box.address, LOADING) for box in sorted(loading, key=lambda b: b.address != starting_on)]
    cold = [box for box in serving if not box.models[model].holds_memory]
    candidates += _cold(model, cold)
    candidates += [Candidate(box.address, BUSY) for box in _least_busy(model, loaded) if box not in ready]
    candidates += [Candidate(box.address, WAIT) for box in _once_idle(model, cold)]
    return _first_of_each(candidates)


def _warm(model: str, ready: list[Box], session: str | None) -> list[Candidate]:
    """The boxes where `model` is loaded and not overloaded: the session's box first."""
    if not ready:
        return []
    if session is None:
        return [Candidate(box.address, LOADED) for box in _least_busy(model, ready)]
    chosen = rendezvous(session, [box.address for box in ready])[0]
    rest = [box for box in _least_busy(model, ready) if box.address != chosen]
    return [Candidate(chosen, PREFIX), *(Candidate(box.address, LOADED) for box in rest)]


def _cold(model: str, boxes: list[Box]) -> list[Candidate]:
    """Boxes that would start `model`: with its saved slot, then those it fits, then those where
    evicting idle models makes room."""
    need = {box.address: box.models[model].memory_mib for box in boxes}
    restored = [box for box in boxes if model in box.saved and _can_make_room(box, need[box.address])]
    spread = {address: rank for rank, address in enumerate(rendezvous(model, [box.address for box in boxes]))}
    # most free first; between equals, the model's own hash order: two cold models go to two empty boxes
    fits = sorted((box for box in boxes if box.free_mib >= need[box.address]), key=lambda b: (-b.free_mib, spread[b.address]))
    evict = sorted(
        (box for box in boxes if box.free_mib < need[box.address] and _can_make_room(box, need[box.address])),
        key=lambda b: need[b.address] - b.free_mib,
    )
    return [
        *(Candidate(box.address, RESTORED) for box in restored),
        *(Candidate(box.address, FITS) for box in fits),
        *(Candidate(box.address, EVICT) for box in evict),
    ]


def replica_start(model: str, boxes: list[Box]) -> Candidate | None:
    """The box to start one more copy of `model` on, when it is loaded somewhere and held by fewer boxes
    than its `boxes:` (the most any box serving it asks): one whose free budget fits it, a box with its
    saved slot first, then the most free; None when it is held by enough boxes, or nowhere, or fits none."""
    serving = [box for box in boxes if model in box.models]
    held = [box for box in serving if box.models[model].holds_memory]
    wanted = max((box.models[model].boxes for box in serving), default=1)
    if not any(box.models[model].state == "loaded" for box in held) or len(held) >= wanted:
        return None
    room = [box for box in serving if box not in held and box.free_mib >= box.models[model].memory_mib]
    room.sort(key=lambda box: (model not in box.saved, -box.free_mib, box.address))
    return Candidate(room[0].address, REPLICA) if room else None


def _once_idle(model: str, boxes: list[Box]) -> list[Box]:
    """Boxes whose budget fits `model` once their unpinned models stop (when their requests are done),
    least busy first."""

    def pinned_mib(box: Box) -> int:
        return sum(on_box.memory_mib for on_box in box.models.values() if on_box.holds_memory and on_box.pinned)

    fit = [box for box in boxes if box.budget_mib - pinned_mib(box) >= box.models[model].memory_mib]
    return sorted(fit, key=lambda box: (box.in_flight, box.address))


def _can_make_room(box: Box, need_mib: int) -> bool:
    return box.free_mib + box.evictable_mib() >= need_mib


def _least_busy(model: str, boxes: list[Box]) -> list[Box]:
    return sorted(boxes, key=lambda box: (box.models[model].in_flight, box.in_flight, box.address))


def _first_of_each(candidates: list[Candidate]) -> list[Candidate]:
    seen: set[str] = set()
    unique = []
    for candidate in candidates:
        if candidate.address not in seen:
            seen.add(candidate.address)
            unique.append(candidate)
    return unique


@dataclass(frozen=True)
class Pool:
    """A model larger than any one box's room, run by `host`'s llama-server with the memory of the
    helpers' rpc-servers (`llama-server --rpc endpoint,...`): `lent_mib` of it on them, the rest on the host."""

    host: str
    endpoints: tuple[str, ...]
    lent_mib: int


def pool(model: str, boxes: list[Box]) -> Pool | None:
    """Rule 6: the host where `model` would take the least help (the most free memory first), and the
    fewest lending boxes (largest loans first) whose loans make up the rest; None if none can."""
    hosts = sorted(
        (box for box in boxes if model in box.models and not box.models[model].holds_memory),
        key=lambda box: (-box.free_mib, box.address),
    )
    taken = {endpoint for box in boxes for on_box in box.models.values() if on_box.holds_memory for endpoint in on_box.borrows}
    for host in hosts:
        need = host.models[model].memory_mib - max(host.free_mib, 0)
        helpers = sorted(
            (box for box in boxes if box.address != host.address and box.rpc_endpoint and box.rpc_endpoint not in taken),
            key=lambda box: (-box.rpc_lend_mib, box.address),
        )
        endpoints, lent = [], 0
        for helper in helpers:
            if lent >= need:
                break
            endpoints.append(helper.rpc_endpoint)
            lent += helper.rpc_lend_mib
        if need > 0 and lent >= need:
            return Pool(host.address, tuple(endpoints), min(lent, host.models[model].memory_mib))
    return None


def fleet_models(boxes: list[Box]) -> dict[str, list[tuple[str, ModelOnBox]]]:
    """Every model some box can run, with (box address, its state there) for each such box."""
    found: dict[str, list[tuple[str, ModelOnBox]]] = {}
    for box in sorted(boxes, key=lambda b: b.address):
        for name, on_box in box.models.items():
            found.setdefault(name, []).append((box.address, on_box))
    return found
