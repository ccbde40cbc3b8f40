"""Per-key priority at the upstream's door: when every slot of a model's servers is busy, the requests
waiting for one are let in highest priority first, and in arrival order within a priority.

llama-server queues what it cannot start in arrival order, so the order must be decided before a
request is sent: each model holds its generations to the slots its servers have (/props' total_slots,
summed) with one `SlotQueue`, where the request's door (services/door.py) takes a place. Under the slot
count nothing waits and the cost is a lock; a pool whose slot count is not known yet does not hold anything back, and neither does
one that has only seen requests of one priority (normal): until a high or low one comes, holding the
others would only repeat llama-server's own arrival order, one hop earlier.

The queue is per process: with --workers N, each worker orders its own waiters and the N together
may still send more than the slots (llama-server then queues those in arrival order).
"""

from __future__ import annotations

import heapq
import itertools
import threading
from dataclasses import dataclass, field

from .keys import NORMAL, PRIORITIES

RANK = {name: rank for rank, name in enumerate(PRIORITIES)}


@dataclass(order=True)
class _Waiter:
    rank: int
    arrival: int
    granted: threading.Event = field(default_factory=threading.Event, compare=False)


class Place:
    """A generation's slot, held until `release` (once; later calls do nothing)."""

    __slots__ = ("queue", "held")

    def __init__(self, queue: SlotQueue):
        self.queue, self.held = queue, True

    def release(self) -> None:
        if self.held:
            self.held = False
            self.queue._release()


class SlotQueue:
    """The generations one pool runs at once, at most `capacity` (given with each `take`, as the servers
    tell it; None: not known, nobody waits), the others waiting in priority order."""

    def __init__(self, on_wait=None):
        self.running = 0
        self.capacity: int | None = None
        self.ordering = False  # a high or low request came: from now on requests wait here for a slot
        self._waiting: list[_Waiter] = []
        self._arrivals = itertools.count()
        self._lock = threading.Lock()
        self.on_wait = on_wait  # on_wait(priority, +1 | -1): a request begins or ends waiting (a gauge)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def take(self, capacity: int | None, priority: str = NORMAL, on_wait=None) -> Place:
        """A place for one generation: at once if a slot is free and nobody waits, else when every
        waiter of a higher priority, and every earlier one of the same, went first; `on_wait` as the
        queue's, for this request (its metrics)."""
        with self._lock:
            self.capacity = capacity
            self.ordering = self.ordering or priority != NORMAL
            if capacity is None or not self.ordering or (self.running < capacity and not self._waiting):
                self.running += 1
                return Place(self)
            waiter = _Waiter(RANK.get(priority, RANK[NORMAL]), next(self._arrivals))
            heapq.heappush(self._waiting, waiter)
        note = on_wait or self.on_wait or _unnoted
        note(priority, +1)
        try:
            waiter.granted.wait()
        except BaseException:  # the request ended while it waited (a timeout, the client gone, shut-down)
            self._abandon(waiter)
            raise
        finally:
            note(priority, -1)
        return Place(self)

    def _abandon(self, waiter: _Waiter) -> None:
        with self._lock:
            if waiter in self._waiting:
                self._waiting.remove(waiter)
                heapq.heapify(self._waiting)
                return
        self._release()  # granted just as it gave up: the place goes to the next one

    def _release(self) -> None:
        with self._lock:
            self.running -= 1
            while self._waiting and (self.capacity is None or self.running < self.capacity):
                self.running += 1
                heapq.heappop(self._waiting).granted.set()


def _unnoted(priority: str, delta: int) -> None:
    """No one counts the waiters."""
