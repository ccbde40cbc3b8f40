"""The access check of each request: who the caller is (`Gate.identify`), and the request's `Ticket`,
which admission asks before any upstream work and which records the request's usage when it ends."""

from __future__ import annotations

import contextvars
import logging
import time
import uuid
from dataclasses import dataclass, field, replace

from ..errors import AuthenticationFailed, RateLimited, StoreUnavailable
from .book import KeyBook
from .keys import ADMIN_NAME, ANONYMOUS, CONFIG_KEY_NAME, NORMAL, Caller, KeyRecord, matching
from .limits import Decision, anthropic_headers, openai_headers, retry_after_header
from .usage import entry_of

log = logging.getLogger("api_like_oai")

OPEN, CLOSED = "open", "closed"
LAST_READ_BOUND = 10_000


@dataclass(frozen=True)
class Gate:
    """The keys a request may bring: --api-key (and the config file's), --admin-key, and the managed
    keys in the key book (found by their digest, never cached: a revoked key is refused at once)."""

    api_keys: tuple[str, ...] = ()
    admin_keys: tuple[str, ...] = ()
    book: KeyBook | None = None
    on_store_error: str = CLOSED      # --limits-on-store-error
    metrics_per_key: bool = False     # --metrics-per-key: /metrics counts each managed key by name
    api_key_priority: str = NORMAL    # --api-key-priority: of the keys from the flags (and of no key)
    # With --limits-on-store-error open: the records this process last read, by digest, used only while
    # the store cannot be read (a key revoked meanwhile is refused again once the store answers).
    last_read: dict = field(default_factory=dict, compare=False)

    @property
    def required(self) -> bool:
        """Whether requests need a key: when the proxy was given any (then managed keys count too)."""
        return bool(self.api_keys or self.admin_keys)

    def identify(self, offered: str) -> Caller:
        """The caller `offered` (the request's key) stands for; AuthenticationFailed if none."""
        if not self.required:
            return ANONYMOUS if self.api_key_priority == NORMAL else replace(ANONYMOUS, given_priority=self.api_key_priority)
        if self.admin_keys and matching(offered, self.admin_keys):
            return Caller(ADMIN_NAME, admin=True, given_priority=self.api_key_priority)
        if self.api_keys and matching(offered, self.api_keys):
            return Caller(CONFIG_KEY_NAME, given_priority=self.api_key_priority)
        record = self._managed(offered) if offered and self.book is not None else None
        if record is None:
            raise AuthenticationFailed("missing or invalid API key; send 'Authorization: Bearer <key>'")
        if not record.usable(time.time()):
            raise AuthenticationFailed(f"the API key {record.name!r} was revoked or has expired")
        return Caller(record.name, record)


    def _managed(self, offered: str) -> KeyRecord | None:
        """The managed key's record; while the store fails, with --limits-on-store-error open, the one
        this process read last (closed: the store's error, a 503)."""
        digest = self.book.digest(offered)
        try:
            record = self.book.by_digest(digest)
        except StoreUnavailable:
            if self.on_store_error == CLOSED or digest not in self.last_read:
                raise
            return self.last_read[digest]
        if self.on_store_error == OPEN and record is not None:
            if len(self.last_read) >= LAST_READ_BOUND:
                self.last_read.clear()
            self.last_read[digest] = record
        return record


# The ticket of the request this thread (greenlet) serves: what the upstream pool asks for the
# request's priority without every service passing it down (services/merge.py runs each choice of a
# request in a copy of this context). Set for each request before it reaches a route.
CURRENT: contextvars.ContextVar[Ticket | None] = contextvars.ContextVar("api_like_oai_ticket", default=None)


def current_ticket() -> Ticket | None:
    return CURRENT.get()


@dataclass
class Ticket:
    """One request's passage: its caller's limits checked once (`admit`, when it names a model), its
    usage written when it ends (`finish`, called by the access record as it closes) if it was admitted:
    usage is of the requests for a model, not of listing models or reading usage."""

    caller: Caller
    gate: Gate = Gate()
    metrics: object | None = None    # observability.Metrics
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    decision: Decision | None = None
    for_model: bool = False          # admission looked a model up for it: its usage is recorded

    def admit(self, max_tokens: int | None = None) -> None:
        """Count the request against its key's limits; RateLimited if it is over one. Once per request."""
        self.for_model = True
        if not self.caller.limited or self.decision is not None:
            return
        try:
            decision = self.gate.book.admit(self.caller.record, self.request_id, time.time(), max_tokens)
        except StoreUnavailable as exc:
            self._store_failed(exc)
            return
        self.decision = decision
        if not decision.allowed:
            if self.metrics is not None:
                self.metrics.limit_refusals.labels(decision.refused_by).inc()
            raise RateLimited(decision.message(), retry_after=retry_after_header(decision.retry_after),
                              of_tokens=decision.refused_by in ("tpm", "tokens_per_day"))

    def _store_failed(self, exc: StoreUnavailable) -> None:
        """The store cannot count the request: refuse it (503, closed) or let it run unchecked (open)."""
        outcome = self.gate.on_store_error
        if self.metrics is not None:
            self.metrics.limits_unchecked.labels(outcome).inc()
        log.warning("limits of key %r not checked, the key store failed (%s): request %s by "
                    "--limits-on-store-error %s", self.caller.name, exc.message,
                    "refused" if outcome == CLOSED else "let run", outcome)
        if outcome == CLOSED:
            raise exc

    def finish(self, record) -> None:
        """Free the request's place and write its usage (tokens from llama.cpp's numbers on `record`,
        an observability.RequestRecord); a store failure is logged, never raised into the answer."""
        if self.caller.record is None or self.gate.book is None or not self.for_model:
            return
        now = time.time()
        admitted = self.decision is not None and self.decision.allowed
        entry = entry_of(record, self.caller.name, now, time.perf_counter() - record.started)
        if self.gate.metrics_per_key and self.metrics is not None:
            self.metrics.count_key(entry)
        try:
            self.gate.book.finish(self.caller.record, self.request_id if admitted else None, now, entry)
        except StoreUnavailable as exc:
            log.warning("usage of key %r not recorded: %s", self.caller.name, exc.message)

    def headers(self, anthropic: bool) -> dict[str, str]:
        """The rate-limit headers of the answer (OpenAI's, or Anthropic's on its API); none without limits."""
        if self.decision is None:
            return {}
        return anthropic_headers(self.decision) if anthropic else openai_headers(self.decision)
