"""A front's fleet: the boxes read from Redis, a request placed (placement.place) and relayed to the
first box that takes it (relay.Relay), with the cold-start lock taken when the model is loaded nowhere.
One per worker (AppState.fleet)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

from ..errors import FleetUnavailable, ModelNotFound
from . import lock
from .affinity import session_key
from .membership import Membership
from .placement import LOADING, RPC, Box, Candidate, fleet_models, place, pool, replica_start
from .relay import Relay, Relayed
from .settings import FleetSettings
from .watch import Merge

log = logging.getLogger("api_like_oai.fleet")


CARDS_SECONDS = 10.0  # how long a box's model metadata (context length, capabilities, its /api/tags) is kept
# Ollama's list of the models a box has: what changes only when its models folder does; clients poll it
# (Open WebUI on every page), so a front keeps each box's for CARDS_SECONDS. /api/ps (what is loaded
# now, its expiry) is asked each time.
KEPT_LISTINGS = ("/api/tags",)
GONE_RETRY_AFTER_SECONDS = 5  # a box restarting, or its record's expiry (settings.EXPIRY_SECONDS)


class BoxesGone(FleetUnavailable):
    """A model of the fleet (membership.remembered) whose boxes are all gone now: a 503 to retry."""

    def __init__(self, model: str):
        super().__init__(f"model {model!r} is the fleet's, but none of its boxes is in the fleet now; try again shortly")
        self.headers = {"Retry-After": str(GONE_RETRY_AFTER_SECONDS)}


class FleetFront:
    def __init__(self, settings: FleetSettings, *, connect_timeout: float, read_timeout: float, connection=None):
        self.settings = settings
        self.membership = Membership(settings, connection)
        self.relay = Relay(settings.secret, connect_timeout, read_timeout)
        self.box_cards: dict[str, tuple[float, dict[str, dict]]] = {}  # address: (when read, its cards)
        self.box_listings: dict[tuple[str, str], tuple[float, list[dict]]] = {}  # (address, path): (when read, entries)

    def serves(self, model: str) -> bool:
        """Whether some box of the fleet can run `model` (FleetUnavailable if the fleet is unknown)."""
        return any(model in box.models for box in self.membership.boxes()) or model in self.membership.remembered()

    def known(self) -> set[str]:
        """The fleet's models: on a box now, or on one within membership.REMEMBERED_SECONDS."""
        return set(fleet_models(self.membership.boxes())) | self.membership.remembered()

    def default_model(self, configured: str | None = None) -> str | None:
        """The model of a request that names none, as one proxy picks its own: the front's `default_model`
        if its config names one, else the default the boxes advertise (the first box's, by address, as
        one box's is its first model), else the first of the fleet's models by name; None: no model."""
        if configured:
            return configured
        records = sorted(self.membership.current(), key=lambda record: record["address"])
        advertised = next((record["default"] for record in records if record.get("default") in record["models"]), None)
        return advertised or min(self.known(), default=None)

    def forward(
        self,
        model: str,
        body: dict,
        raw: bytes,
        method: str,
        path: str,
        headers: dict[str, str],
        *,
        caller: str,
        anthropic: bool,
        on_passed_over=lambda address: None,
    ) -> Relayed:
        """The request relayed to the best box for it that takes it; `on_passed_over(address)` for each
        box that refused it or could not be reached."""
        boxes = self.membership.boxes()
        starting_on = self._cold_start(model, boxes)
        candidates = place(model, boxes, session=session_key(body), starting_on=starting_on) or self._pooled(model, boxes)
        if not candidates:
            raise self._unplaceable(model, boxes, ", alone or pooled over RPC")

        def refused(candidate: Candidate) -> None:
            on_passed_over(candidate.address)
            self.membership.forget()
            if candidate.address == starting_on:
                self._release(model, starting_on)

        self._add_replica(model, boxes)
        return self.relay.send(candidates, method, path, raw, headers, caller=caller, anthropic=anthropic, on_refused=refused)

    def load(self, model: str, args: list[str] | None = None) -> dict:
        """An admin's load at a front, as one proxy's: `model` started (with `args`) on the box where it is
        loaded, else on the box placement chooses for it; that box's {"model", "status"} once loaded."""
        boxes = self.membership.boxes()
        candidates = place(model, boxes)
        if not candidates:
            raise self._unplaceable(model, boxes)
        return self.relay.load(candidates[0].address, model, args)

    def unload(self, model: str) -> dict:
        """An admin's unload at a front, as one proxy's: every box's copy of `model` stopped; the last
        box's {"model", "status"} (one with no copy's own when none had one)."""
        boxes = [box for box in self.membership.boxes() if model in box.models]
        if not boxes:
            raise self._unplaceable(model, self.membership.boxes())
        answers = [self.relay.unload(box.address, model) for box in sorted(boxes, key=lambda box: box.address)]
        return answers[-1]

    def logs(self, model: str | None) -> list[str]:
        """An admin's logs at a front, as one proxy's: the last lines of `model`'s llama-servers on every box
        that has it (by address, as one proxy's replicas' one after another); no box: `_unplaceable`'s error."""
        boxes = sorted((box for box in self.membership.boxes() if model in box.models), key=lambda box: box.address)
        if model is None or not boxes:
            raise self._unplaceable(model or "", self.membership.boxes())
        return [line for box in boxes for line in self.relay.logs(box.address, model)]

    def events(self, ended: Callable[[], bool]) -> Iterator[dict]:
        """An open `/v1/internal/models/events` at a front: its boxes' status streams merged (watch.Merge)."""
        return Merge(self.membership, self.relay, ended).events()

    def _unplaceable(self, model: str, boxes: list[Box], tried: str = "") -> Exception:
        """Why `model` has no box (`tried`: how else it was tried): no room (a 503), its boxes gone (a 503 to
        retry), or not the fleet's (a 404 naming the fleet's models)."""
        if model in fleet_models(boxes):
            return FleetUnavailable(f"no box of the fleet has room for model {model!r} now{tried}")
        if model in self.membership.remembered():
            return BoxesGone(model)
        known = ", ".join(sorted(fleet_models(boxes)))
        return ModelNotFound(f"model {model!r} does not exist in the fleet; known models: {known}", param="model")

    def _cold_start(self, model: str, boxes: list[Box]) -> str | None:
        """The box the fleet starts `model` on when no box has it loaded or loading: the lock's (this
        front's first cold candidate, unless another front chose first); None when it is warm."""
        if any(model in box.models and box.models[model].holds_memory for box in boxes):
            return None
        cold = place(model, boxes)
        if not cold:
            return None
        try:
            return lock.claim(self.membership.connection, model, cold[0].address)
        except Exception as exc:  # noqa: BLE001 - Redis down: start where placement says, unlocked
            log.warning("fleet: cold-start lock for %s not taken (%s)", model, exc)
            return None

    def _pooled(self, model: str, boxes: list[Box]) -> list[Candidate]:
        """Rule 6: a model larger than any box's room, started on the pool's host with the helpers'
        rpc-servers (once in the fleet: the cold-start lock names the host); [] when no pool can run it."""
        plan = pool(model, boxes)
        if plan is None:
            return []
        try:
            host = lock.claim(self.membership.connection, model, plan.host)
        except Exception as exc:  # noqa: BLE001 - Redis down: start it unlocked
            log.warning("fleet: cold-start lock for %s not taken (%s)", model, exc)
            host = plan.host
        if host != plan.host:
            return [Candidate(host, LOADING)]  # another front is starting it there
        try:
            self.relay.start_pool(plan, model)
        except BaseException:
            self._release(model, plan.host)
            raise
        return [Candidate(plan.host, RPC)]

    def _add_replica(self, model: str, boxes: list[Box]) -> None:
        """Replicas spanning boxes: when `model` is held by fewer boxes than its `boxes:`, one more copy
        started (once in the fleet: the front that takes the copy's lock) on the box placement names, in
        the background: the request goes on to a box where it is loaded."""
        target = replica_start(model, boxes)
        if target is None:
            return
        copies = sum(1 for box in boxes if model in box.models and box.models[model].holds_memory) + 1
        name = lock.replica_lock(model, copies)
        try:
            if not lock.take(self.membership.connection, name, target.address):
                return
        except Exception as exc:  # noqa: BLE001 - Redis down: no replica started until it is back
            log.warning("fleet: replica lock for %s not taken (%s)", model, exc)
            return
        log.info("fleet: starting copy %d of %s on %s", copies, model, target.address)
        threading.Thread(target=self._start_replica, args=(model, target.address, name), daemon=True).start()

    def _start_replica(self, model: str, address: str, name: str) -> None:
        try:
            self.relay.load(address, model)
        except Exception as exc:  # noqa: BLE001 - refused or unreachable: a later request tries again
            log.warning("fleet: copy of %s not started on %s: %s", model, address, exc)
            self._release(name, address)
        finally:
            self.membership.forget()

    def _release(self, model: str, address: str) -> None:
        try:
            lock.release(self.membership.connection, model, address)
        except Exception as exc:  # noqa: BLE001 - the lock then expires by itself
            log.warning("fleet: cold-start lock for %s not released (%s)", model, exc)

    def cards(self) -> dict[str, dict]:
        """Each fleet model's metadata as a box of it reports it (relay.cards, asked of each box at most
        every CARDS_SECONDS per worker); a card with a known context length preferred."""
        found: dict[str, dict] = {}
        now = time.monotonic()
        for box in self.membership.boxes():
            read_at, cards = self.box_cards.get(box.address, (None, {}))
            if read_at is None or now - read_at > CARDS_SECONDS:
                cards = self.relay.cards(box.address)
                self.box_cards[box.address] = (now, cards)
            for name, card in cards.items():
                if name not in found or (card.get("context_length") and not found[name].get("context_length")):
                    found[name] = card
        return found

    def listing(self, path: str) -> list[dict]:
        """Ollama's list at `path` (/api/tags, /api/ps) over the fleet: each box's own entries (asked of
        every box, relay.listing), one per model name, the first box's by address."""
        found: dict[str, dict] = {}
        for box in sorted(self.membership.boxes(), key=lambda box: box.address):
            for entry in self._box_listing(box.address, path):
                found.setdefault(entry["name"], entry)
        return list(found.values())

    def _box_listing(self, address: str, path: str) -> list[dict]:
        """A box's own list at `path`: asked of it, or for KEPT_LISTINGS as it answered within CARDS_SECONDS."""
        if path not in KEPT_LISTINGS:
            return self.relay.listing(address, path)
        now = time.monotonic()
        read_at, entries = self.box_listings.get((address, path), (None, []))
        if read_at is None or now - read_at > CARDS_SECONDS:
            entries = self.relay.listing(address, path)
            if entries:  # none: a box that did not answer (restarting) is asked again next time
                self.box_listings[(address, path)] = (now, entries)
        return entries

    def models(self) -> dict[str, list[dict]]:
        """Every model of the fleet with where it is: {model: [{box, state, memory_mib, in_flight}]}."""
        return {
            name: [
                {
                    "box": address,
                    "state": on_box.state,
                    "memory_mib": on_box.memory_mib,
                    "in_flight": on_box.in_flight,
                    "queued": on_box.queued,
                }
                for address, on_box in where
            ]
            for name, where in fleet_models(self.membership.boxes()).items()
        }
