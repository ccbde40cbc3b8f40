"""Per-key priority at the upstream's door: when every slot of a model's servers is busy, the requests
waiting for one are let in highest priority first, and in arrival order within a priority.

llama-server queues what it cannot start in arrival order, so the order must be decided before a
request is sent: each model holds its generations to the slots its servers have (/props' total_slots,
summed) with one `SlotQueue`, where the request's door (services/door.py) takes a place. Under the slot
count nothing waits and the cost is a lock; a pool whose slot count is not known yet does not hold anything back, and neither does
one that has only seen requests of one priority (normal): until a high or low one comes, holding the
others would only repeat llama-server's own arrival order, one hop earlier.

The queue is per process: with --workers N, each worker orders its own waiters and the N together
may still send more than the slots (llama-server then queues those in arrival order). Preemption
reaches across them: a generation of a key's priority let in here is told to the other workers
(`SlotQueue.elsewhere`, over siblings.py, while one of them runs background generations: its
`on_background` keeps siblings.LaneMark's file), and one that runs background generations preempts one when
its running ones and the teller's together pass the slots (`heard`). The teller tells again when its
generation ends, and until then the slots it holds count against background generations here too: the
stopped line, run again at once, would otherwise reach llama-server before the teller's request and
take back the slot it was stopped for.

Below every key's priority is BACKGROUND, a batch's lines (batch/runner.py): they take what the others
leave, and a request of any key's priority that finds every slot busy while one of them runs a
background generation preempts it (`Place.preempted` is set; the door stops that generation, which
frees its slot for the waiter, and the batch runner runs the line again).

While people use a model (a generation of a key's priority ran here, or another worker said it ran one,
within PEOPLE_ACTIVE_SECONDS), background generations leave `free_for_people` of its slots free
(--batch-free-slots, default KEPT_FREE, or all but one while yielding; never every slot, so a one-slot
model keeps none): a person's next request finds a slot at once instead of waiting for a preempted line's.
Preempting costs a person
llama-server's notice of the hang-up (it frees the slot after the decoding step under way, at the
line's next token write: 20 to 70 ms on the bench's 2 cores); a free slot costs nothing. Preemption
remains for the first request after a quiet spell, a second person at once, and a one-slot model.
What a free slot does not remove is the compute that the lines still decoding share with the person's
prompt: llama-server decodes their tokens in the same steps. On a CPU every decoding slot shares the same
cores, and that, not the slot, is most of what a person waits for beside a batch (straight to llama-server
on the bench's 2 cores, one thread: a chat's first token 1.37 to 1.76x the idle box's beside three lines
decoding, 1.0x beside one). So a queue that is `yielding` (--batch-yield; by default on a model whose
llama-servers run on a machine with no GPU, app.yields_to_people) stops every background generation when a
generation of a key's priority comes, not one, and lets none start again until that one's first token is
passed on (`Place.answer_began`, or its end): its prompt is read alone. Hung up, a line's slot is freed at
llama-server's next token write, after the step under way; the person's request goes at once to the slot
kept free, and llama-server starts it with the lines' cancellations mostly already in (1.14 to 1.18x the
idle box straight to llama-server, against 1.37 to 1.76x without yielding; with no slot free, llama-server
defers it until one is, a step later: 1.17 to 1.62x). The batch runner prepares a stopped line again only
once that first token came (`until_answered`): its CPU would delay it too. The cost is the stopped lines'
progress (each runs again from its prompt, which llama-server still has cached), once per person's request:
on a GPU, where lines beside a prompt cost it little, that is a loss for nothing, so it is off there. With
--workers N, the teller says how many of its generations are starting (`heard`'s `starting`), and the
others hold their lines back until it says its first token came. The hung-up lines' cancellations race
the person's prompt in llama-server (they are noticed as the step under way ends; a prompt already
queued may start beside them), so a yielding model keeps all but one slot free by default
(KEPT_FREE_YIELDING, app._wire_slot_queues): the step they share then carries one line's token, not three
(through the proxy, 2g: 1.07 to 1.22x the idle box's, against 1.25 to 1.52x beside three lines).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .keys import NORMAL, PRIORITIES

BACKGROUND = "background"  # a batch's lines: after every key's requests, and preempted by them
RANK = {name: rank for rank, name in enumerate((*PRIORITIES, BACKGROUND))}
# A request may ask for a priority: OpenAI's service_tier, or a `priority` header (for clients that set
# no field); "default" and "auto" ask for the key's own. Browsers send RFC 9218's `priority: u=3, i`,
# which names none of these and is set aside.
# How long a worker's word that it holds slots counts without its word that they were freed (a datagram
# lost to a full queue, a worker killed): background generations wait at most this long for a lost word.
HELD_ELSEWHERE_FOR = 30.0
# People are using a model while a key's generation ran on it within this many seconds: an agent's next
# turn follows its last answer within seconds (its tools run between), a person's next message within tens
# of seconds; longer only keeps a slot idle for someone who left. Background generations keep KEPT_FREE
# of its slots free meanwhile by default (one is a person's next request; a second at once still preempts).
PEOPLE_ACTIVE_SECONDS = 20.0
KEPT_FREE = 1
# ... and by default all but one while they yield to people (a CPU box): the race below is lost beside one line
# for the cost of its token, not of three.
KEPT_FREE_YIELDING = 1 << 16
ASKED = {"flex": "low", "priority": "high", "scale": "high", "high": "high", "normal": "normal", "low": "low"}


def asked(value: str | None) -> str | None:
    """The priority a service_tier or a priority header asks for; None: the key's own."""
    return ASKED.get(value.strip().lower()) if isinstance(value, str) else None


def capped(asked_priority: str | None, key_priority: str) -> str:
    """The priority a request gets: what it asked, never above its key's (a key's own is its ceiling)."""
    if asked_priority is None or RANK[asked_priority] < RANK.get(key_priority, RANK[NORMAL]):
        return key_priority
    return asked_priority


@dataclass(order=True)
class _Waiter:
    rank: int
    arrival: int
    granted: threading.Event = field(default_factory=threading.Event, compare=False)


class Place:
    """A generation's slot, held until `release` (once; later calls do nothing). A background one has
    `preempted`, set when a waiter of a key's priority needs its slot."""

    __slots__ = ("queue", "held", "preempted", "exchanges", "answering", "told", "starting")

    def __init__(self, queue: SlotQueue, background: bool = False, starting: bool = False):
        self.queue, self.held = queue, True
        self.told = False  # the other workers were told of it, and are told of its end
        self.starting = starting  # a key's generation the background ones yield to until its first token
        self.preempted = threading.Event() if background else None
        self.exchanges: list = []  # a background generation's upstream exchanges (backends.http.Exchange)
        # Its answer began (a token came): only then is a hang-up a preemption to its pool, not a server
        # lost while reading the prompt (which the pool would mark down and start elsewhere).
        self.answering = False

    def opened(self, exchange) -> None:
        """A background generation's exchange with its upstream (hung up if it is preempted once answering)."""
        self.exchanges.append(exchange)

    def answer_began(self) -> None:
        """Its first token came: a background generation preempted meanwhile is hung up now; one of a key's
        priority no longer holds the background ones back (`SlotQueue.yielding`)."""
        self.answering = True
        if self.preempted is None:
            if self.starting:
                self.queue._started(self)
        elif self.preempted.is_set():
            self.stop()

    def stop(self) -> None:
        """Preempted: the flag set and, once its answer began, its upstream exchanges hung up (its reader
        wakes now, not at its next token, and the server frees the slot at its next write)."""
        self.preempted.set()
        if self.answering:
            for exchange in self.exchanges:
                exchange.hang_up()

    def release(self) -> None:
        if self.held:
            self.held = False
            self.exchanges = []
            self.queue._release(self)


class SlotQueue:
    """The generations one pool runs at once, at most `capacity` (given with each `take`, as the servers
    tell it; None: not known, nobody waits), the others waiting in priority order."""

    def __init__(self, on_wait=None, elsewhere=None, free_for_people: int = KEPT_FREE, yielding: bool = False):
        self.running = 0
        self.free_for_people = free_for_people  # slots background generations leave while people are about
        # a key's generation starting stops every background one, held back until its first token (--batch-yield)
        self.yielding = yielding
        self._starting = 0  # the key's generations let in or waiting here whose first token has not come
        self._none_starting = threading.Event()  # set while _starting is 0 (until_answered)
        self._none_starting.set()
        self.capacity: int | None = None
        self.ordering = False  # a high or low request came: from now on requests wait here for a slot
        self._waiting: list[_Waiter] = []
        self._arrivals = itertools.count()
        self._lock = threading.Lock()
        self._background: list[Place] = []  # the background generations running, oldest first
        self.preemptions = 0
        self.on_wait = on_wait  # on_wait(priority, +1 | -1): a request begins or ends waiting (a gauge)
        # elsewhere(running here, came, starting here) -> told: a generation of a key's priority was let in
        # (came), began answering or ended; told to the other workers (--workers N), whose background
        # generations make room (heard)
        self.elsewhere = elsewhere
        self._held_elsewhere: dict[object, tuple[int, int, float]] = {}  # by teller: slots held, starting, since
        self._people_until = 0.0  # monotonic: people use the model until then (PEOPLE_ACTIVE_SECONDS)
        self.on_background: Callable[[int], None] | None = None  # (+1 | -1): a background generation starts or ends

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
            rank = RANK.get(priority, RANK[NORMAL])
            starting = priority != BACKGROUND and self.yielding
            if priority != BACKGROUND:
                self._people_came()
            if starting:
                self._count_starting(+1)
                self._preempt_all()
            if capacity is None or not self.ordering or (self._free(priority == BACKGROUND) and not self._ahead(rank)):
                self.running += 1
                return self._told(self._placed(priority, starting), priority)
            waiter = _Waiter(rank, next(self._arrivals))
            heapq.heappush(self._waiting, waiter)
            if priority != BACKGROUND:
                self._preempt_one()
        note = on_wait or self.on_wait or _unnoted
        note(priority, +1)
        try:
            # a lost word of slots freed elsewhere expires, and so does the slot kept for people gone
            while not waiter.granted.wait(self._recheck_in()):
                with self._lock:
                    self._grant()
        except BaseException:  # the request ended while it waited (a timeout, the client gone, shut-down)
            self._abandon(waiter, starting)
            raise
        finally:
            note(priority, -1)
        with self._lock:
            place = self._placed(priority, starting)
        return self._told(place, priority)

    def _told(self, place: Place, priority: str) -> Place:
        """`place`, once the other workers were told of it if it is of a key's priority, or noted if it is
        a background one (outside the lock)."""
        if priority == BACKGROUND:
            if self.on_background is not None:
                self.on_background(+1)
        elif self.elsewhere is not None:
            place.told = self.elsewhere(self.running, True, self._starting)
        return place

    def heard(self, teller: object, held: int, came: bool, starting: int = 0) -> bool:
        """Another worker (`teller`) let in (`came`), began answering or ended a generation of a key's
        priority and now holds `held` of this pool's slots, `starting` of them not answering yet, which
        background generations here leave to it until it says they are free (yielding: none runs while
        one starts). When one came and the slots are past full (yielding: at all), the oldest background
        generation here not asked yet (yielding: every one) is asked to stop. Whether one was."""
        with self._lock:
            self._people_came()
            if held > 0 or starting > 0:
                self._held_elsewhere[teller] = (held, starting, time.monotonic())
            else:
                self._held_elsewhere.pop(teller, None)
            if not came:
                self._grant()
                return False
            if self.yielding:
                return self._preempt_all()
            if self.capacity is None or self.running + held <= self.capacity:
                return False
            return self._preempt_one()

    def _free(self, background: bool) -> bool:
        """Whether a generation may start now (under the lock): a slot is free, and for a background one
        not held by another worker's generations either, nor kept free for people (`kept_free`)."""
        if self.capacity is None:
            return True
        if not background:
            return self.running < self.capacity
        held_elsewhere, starting_elsewhere = self._elsewhere_now()
        if self.yielding and (self._starting or starting_elsewhere):
            return False
        return self.running + held_elsewhere + self.kept_free() < self.capacity

    def kept_free(self) -> int:
        """The slots background generations leave free now: `free_for_people` while people use the model
        (never every slot: a one-slot model keeps none), else none."""
        if self.capacity is None or time.monotonic() >= self._people_until:
            return 0
        return max(0, min(self.free_for_people, self.capacity - 1))

    def _people_came(self) -> None:
        """A key's generation came or ended, here or in another worker (under the lock)."""
        self._people_until = time.monotonic() + PEOPLE_ACTIVE_SECONDS

    def _recheck_in(self) -> float:
        """How long a waiter waits before its grant is looked at again without being told: until the slot
        kept for people is no longer kept, or a word of slots held elsewhere expires."""
        people_left_in = self._people_until - time.monotonic()
        return min(HELD_ELSEWHERE_FOR, people_left_in + 0.01) if people_left_in > 0 else HELD_ELSEWHERE_FOR

    def _ahead(self, rank: int) -> bool:
        """Whether a waiter goes before a request of `rank` (under the lock): one of its rank or higher
        (a background one waits for slots another worker holds, which a key's request may take)."""
        return bool(self._waiting) and self._waiting[0].rank <= rank

    def _elsewhere_now(self) -> tuple[int, int]:
        """(slots held, generations starting) of the other workers, as they last said within HELD_ELSEWHERE_FOR."""
        now = time.monotonic()
        for teller, (*_, said_at) in list(self._held_elsewhere.items()):
            if now - said_at > HELD_ELSEWHERE_FOR:
                del self._held_elsewhere[teller]
        told = self._held_elsewhere.values()
        return sum(held for held, _, _ in told), sum(starting for _, starting, _ in told)

    def _placed(self, priority: str, starting: bool = False) -> Place:
        """The place of a generation let in (under the lock)."""
        place = Place(self, background=priority == BACKGROUND, starting=starting)
        if place.preempted is not None:
            self._background.append(place)
        return place

    def _preempt_all(self) -> bool:
        """A key's generation starts while yielding: every background generation is asked to stop (under
        the lock); whether one was."""
        stopped = False
        while self._preempt_one():
            stopped = True
        return stopped

    def until_answered(self, timeout: float) -> None:
        """Wait (at most `timeout` seconds) until no key's generation here waits for its first token: a
        stopped background generation is prepared again after that, not while its CPU would delay one."""
        self._none_starting.wait(timeout)

    def _count_starting(self, delta: int) -> None:
        """One more or one fewer key's generation waiting for its first token (under the lock)."""
        self._starting += delta
        if self._starting:
            self._none_starting.clear()
        else:
            self._none_starting.set()

    def _started(self, place: Place) -> None:
        """A key's generation that held the background ones back began answering, or ended: they may run
        again once no other starts (here or, as told, elsewhere)."""
        with self._lock:
            if not place.starting:
                return
            place.starting = False
            self._count_starting(-1)
            self._grant()
        if place.told:
            self.elsewhere(self.running, False, self._starting)

    def _preempt_one(self) -> bool:
        """A waiter of a key's priority came while every slot is busy: the oldest background generation
        not asked yet is asked to stop (under the lock); whether there was one."""
        for place in self._background:
            if not place.preempted.is_set():
                place.stop()
                self.preemptions += 1
                return True
        return False

    def _abandon(self, waiter: _Waiter, starting: bool) -> None:
        with self._lock:
            if starting:
                self._count_starting(-1)
            if waiter in self._waiting:
                self._waiting.remove(waiter)
                heapq.heapify(self._waiting)
                self._grant()  # (a background waiter it held back)
                return
        self._release()  # granted just as it gave up: the place goes to the next one

    def _release(self, place: Place | None = None) -> None:
        background = place is not None and place.preempted is not None
        with self._lock:
            if background:
                self._background.remove(place)
            elif place is not None:
                self._people_came()  # its end: people are counted from their last answer
                if place.starting:  # ended before its first token
                    place.starting = False
                    self._count_starting(-1)
            self.running -= 1
            self._grant()
        if background and self.on_background is not None:
            self.on_background(-1)
        elif place is not None and place.told:
            self.elsewhere(self.running, False, self._starting)

    def _grant(self) -> None:
        """Let in the waiters the free slots allow, first first (under the lock)."""
        while self._waiting and self._free(self._waiting[0].rank == RANK[BACKGROUND]):
            self.running += 1
            heapq.heappop(self._waiting).granted.set()


def _unnoted(priority: str, delta: int) -> None:
    """No one counts the waiters."""
