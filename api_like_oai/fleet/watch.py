"""A front's `/v1/internal/models/events` (routes/lifecycle.events): each box's own status stream
(routes/fleet.box_events, a fleet call) read in a thread of its own (a greenlet under the worker), merged
into one stream as one proxy writes it: the fleet's whole status first (`merged_status`), then each box's
changes as they come, naming the box (`"box"`). No Flask; the caller's view is the route's.

Boxes come and go while a stream is open: one that joins (or whose first status came late, or that came
back) is followed, its models' statuses sent as changes; one that leaves the fleet, hangs up (its drain,
its death) or goes silent past relay.EVENTS_SILENCE_SECONDS ends its part quietly, the stream going on.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator

import orjson

from ..backends.http import TransportError
from .membership import Membership
from .relay import Relay

log = logging.getLogger("api_like_oai.fleet")

FIRST_STATUS_SECONDS = 2.0  # how long the first status waits for the boxes' own (a late one comes as changes)
CHECK_SECONDS = 1.0  # how often, without a change to pass on, the stream looks at the boxes and whether to end
REOPEN_SECONDS = 5.0  # a box whose stream ended, still in the fleet (restarting), is asked again after this
RANKS = {"loaded": 0, "loading": 1, "unloaded": 3}  # a model's status across boxes: its best box's (others: 2)
SUMMED = ("replicas", "ready", "in_flight", "queued")  # a model's counts across its boxes
BOX_FIELDS = ("memory_budget_mib", "max_loaded", "devices")  # a box's own, under the merged status' `boxes`


def merged_status(firsts: dict[str, dict]) -> dict:
    """One proxy's whole status made of each box's (by address): every model's status that of its best box
    (loaded, else loading), its counts and upstreams those of all its boxes, `boxes` its value on each;
    the budgets and devices summed, each box's own under `boxes`."""
    on_boxes: dict[str, dict[str, dict]] = {}
    for address in sorted(firsts):
        for name, status in firsts[address].get("models", {}).items():
            on_boxes.setdefault(name, {})[address] = status
    return {
        "models": {name: merged_model(statuses) for name, statuses in on_boxes.items()},
        "memory_budget_mib": _total(first.get("memory_budget_mib") for first in firsts.values()),
        "max_loaded": _total(first.get("max_loaded") for first in firsts.values()),
        "devices": _devices(first.get("devices") or {} for first in firsts.values()),
        "boxes": {address: {field: firsts[address].get(field) for field in BOX_FIELDS} for address in sorted(firsts)},
    }


def merged_model(statuses: dict[str, dict]) -> dict:
    """A model's status over the boxes that have it ({address: its status there})."""
    best = min(statuses, key=lambda address: (RANKS.get(statuses[address].get("value"), 2), address))
    return {
        **statuses[best],
        **{field: sum(status.get(field) or 0 for status in statuses.values()) for field in SUMMED},
        "upstreams": [url for status in statuses.values() for url in status.get("upstreams", ())],
        "boxes": {address: status.get("value") for address, status in statuses.items()},
    }


def _total(values) -> int | None:
    """A sum, or None (no bound) if any box has none."""
    values = list(values)
    return None if any(value is None for value in values) else sum(values)


def _devices(each_boxes) -> dict:
    """Each device's budget and use, summed over the boxes (a box's own: under `boxes`)."""
    summed: dict[str, dict] = {}
    for devices in each_boxes:
        for device, use in devices.items():
            kept = summed.setdefault(device, {})
            for field, value in use.items():
                kept[field] = kept.get(field, 0) + (value or 0)
    return summed


def data_events(pieces: Iterator[bytes]) -> Iterator[dict | None]:
    """The JSON of each `data:` line of an SSE body arriving in `pieces`; None for a frame without one
    (a keep-alive comment)."""
    buffer = b""
    for piece in pieces:
        *frames, buffer = (buffer + piece).split(b"\n\n")
        for frame in frames:
            data = [line[len(b"data: ") :] for line in frame.split(b"\n") if line.startswith(b"data: ")]
            yield orjson.loads(data[0]) if data else None


class BoxStream:
    """One box's status stream, read in a thread of its own into the merge's queue as (address, event);
    (address, None) when it ends. `stop()` has it hang up at its next event or keep-alive."""

    def __init__(self, relay: Relay, address: str, into: queue.Queue):
        self.address, self.stopped, self.opened_at = address, False, time.monotonic()
        threading.Thread(target=self._read, args=(relay, into), daemon=True).start()

    def stop(self) -> None:
        self.stopped = True

    def _read(self, relay: Relay, into: queue.Queue) -> None:
        answer = None
        try:
            answer = relay.box_events(self.address)
            if answer.status != 200:  # a box that starts no models: nothing of it to follow
                log.info("fleet: the box %s has no status stream (%d)", self.address, answer.status)
                return
            for event in data_events(answer.iter_bytes()):
                if self.stopped:
                    return
                if event is not None:
                    into.put((self.address, event))
        except (TransportError, OSError, ValueError) as exc:
            log.info("fleet: the status stream of %s ended: %s", self.address, exc)
        finally:
            if answer is not None:
                answer.close()
            into.put((self.address, None))


class Merge:
    """The boxes' streams as one: what one `events` call of the front holds (front.FleetFront.events)."""

    def __init__(self, membership: Membership, relay: Relay, ended: Callable[[], bool]):
        self.membership, self.relay, self.ended = membership, relay, ended
        self.into: queue.Queue = queue.Queue()
        self.streams: dict[str, BoxStream] = {}  # by address: the boxes followed
        self.started: set[str] = set()  # the boxes whose whole status has been passed on
        self.closed_at: dict[str, float] = {}  # a box's stream that ended: when (reopened after REOPEN_SECONDS)
        self.checked_at = time.monotonic()

    def events(self) -> Iterator[dict]:
        """The fleet's whole status, then each change; ends once `ended()` (the worker draining)."""
        try:
            for box in self.membership.boxes():
                self._follow(box.address)
            firsts, later = self._firsts(time.monotonic() + FIRST_STATUS_SECONDS)
            yield merged_status(firsts)
            for address, event in later:
                yield from self._passed_on(address, event)
            yield from self._changes()
        finally:
            for stream in self.streams.values():
                stream.stop()

    def _follow(self, address: str) -> None:
        self.streams[address] = BoxStream(self.relay, address, self.into)

    def _firsts(self, deadline: float) -> tuple[dict[str, dict], list[tuple[str, dict | None]]]:
        """Each followed box's whole status (those that gave it by `deadline`), and what came after it."""
        firsts: dict[str, dict] = {}
        later: list[tuple[str, dict | None]] = []
        waiting = set(self.streams)
        while waiting and (left := deadline - time.monotonic()) > 0:
            try:
                address, event = self.into.get(timeout=left)
            except queue.Empty:
                break
            if address not in waiting:
                later.append((address, event))
                continue
            waiting.discard(address)
            if event is None:
                self._ended(address)
            else:
                firsts[address] = event
                self.started.add(address)
        return firsts, later

    def _changes(self) -> Iterator[dict]:
        while not self.ended():
            try:
                address, event = self.into.get(timeout=CHECK_SECONDS)
            except queue.Empty:
                address = event = None
            if address is not None:
                yield from self._passed_on(address, event)
            if time.monotonic() - self.checked_at >= CHECK_SECONDS:
                self._look_at_boxes()

    def _passed_on(self, address: str, event: dict | None) -> list[dict]:
        """What one box's event is in the merged stream: a change naming the box; its first status (a box
        followed since the first status) one change per model; its end nothing."""
        stream = self.streams.get(address)
        if stream is None or stream.stopped:
            return []  # a box no longer followed: what it sent before its stream ended
        if event is None:
            self._ended(address)
            return []
        if address in self.started:
            return [{**event, "box": address}]
        self.started.add(address)
        now = time.time()
        return [
            {"model": name, "status": status, "time": now, "box": address} for name, status in event.get("models", {}).items()
        ]

    def _ended(self, address: str) -> None:
        self.streams.pop(address, None)
        self.started.discard(address)
        self.closed_at[address] = time.monotonic()

    def _look_at_boxes(self) -> None:
        """Follow the boxes that joined the fleet (or came back), stop following those that left it."""
        self.checked_at = time.monotonic()
        try:
            present = {box.address for box in self.membership.boxes()}
        except Exception as exc:  # noqa: BLE001 - the fleet unknown for now: the streams open go on
            log.info("fleet: the boxes not read for a status stream: %s", exc)
            return
        for address in present - set(self.streams):
            if self.checked_at - self.closed_at.get(address, float("-inf")) >= REOPEN_SECONDS:
                self._follow(address)
        for address in set(self.streams) - present:
            self.streams[address].stop()
            self._ended(address)
