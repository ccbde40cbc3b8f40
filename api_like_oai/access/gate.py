"""The access check of each request: who the caller is (`Gate.identify`), and the request's `Ticket`,
which admission asks before any upstream work and which records the request's usage when it ends."""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field

from ..errors import AuthenticationFailed, RateLimited, StoreUnavailable
from .book import KeyBook
from .keys import ADMIN_NAME, ANONYMOUS, CONFIG_KEY_NAME, Caller, matching
from .limits import Decision, anthropic_headers, openai_headers, retry_after_header
from .usage import entry_of

log = logging.getLogger("api_like_oai")

OPEN, CLOSED = "open", "closed"


@dataclass(frozen=True)
class Gate:
    """The keys a request may bring: --api-key (and the config file's), --admin-key, and the managed
    keys in the key book (found by their digest, never cached: a revoked key is refused at once)."""

    api_keys: tuple[str, ...] = ()
    admin_keys: tuple[str, ...] = ()
    book: KeyBook | None = None

    @property
    def required(self) -> bool:
        """Whether requests need a key: when the proxy was given any (then managed keys count too)."""
        return bool(self.api_keys or self.admin_keys)

    def identify(self, offered: str) -> Caller:
        """The caller `offered` (the request's key) stands for; AuthenticationFailed if none."""
        if not self.required:
            return ANONYMOUS
        if self.admin_keys and matching(offered, self.admin_keys):
            return Caller(ADMIN_NAME, admin=True)
        if self.api_keys and matching(offered, self.api_keys):
            return Caller(CONFIG_KEY_NAME)
        record = self.book.by_digest(self.book.digest(offered)) if offered and self.book is not None else None
        if record is None:
            raise AuthenticationFailed("missing or invalid API key; send 'Authorization: Bearer <key>'")
        if not record.usable(time.time()):
            raise AuthenticationFailed(f"the API key {record.name!r} was revoked or has expired")
        return Caller(record.name, record)


@dataclass
class Ticket:
    """One request's passage: its caller's limits checked once (`admit`, when it names a model), its
    usage written when it ends (`finish`, called by the access record as it closes) if it was admitted:
    usage is of the requests for a model, not of listing models or reading usage."""

    caller: Caller
    book: KeyBook | None = None
    on_store_error: str = CLOSED
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    decision: Decision | None = None
    for_model: bool = False          # admission looked a model up for it: its usage is recorded

    def admit(self, max_tokens: int | None = None) -> None:
        """Count the request against its key's limits; RateLimited if it is over one. Once per request."""
        self.for_model = True
        if not self.caller.limited or self.decision is not None:
            return
        try:
            decision = self.book.admit(self.caller.record, self.request_id, time.time(), max_tokens)
        except StoreUnavailable:
            if self.on_store_error == CLOSED:
                raise
            log.warning("limits not checked for key %r: the key store is unreachable (--limits-on-store-error open)",
                        self.caller.name)
            return
        self.decision = decision
        if not decision.allowed:
            raise RateLimited(decision.message(), retry_after=retry_after_header(decision.retry_after),
                              of_tokens=decision.refused_by in ("tpm", "tokens_per_day"))

    def finish(self, record) -> None:
        """Free the request's place and write its usage (tokens from llama.cpp's numbers on `record`,
        an observability.RequestRecord); a store failure is logged, never raised into the answer."""
        if self.caller.record is None or self.book is None or not self.for_model:
            return
        now = time.time()
        admitted = self.decision is not None and self.decision.allowed
        entry = entry_of(record, self.caller.name, now, time.perf_counter() - record.started)
        try:
            self.book.finish(self.caller.record, self.request_id if admitted else None, now, entry)
        except StoreUnavailable as exc:
            log.warning("usage of key %r not recorded: %s", self.caller.name, exc)

    def headers(self, anthropic: bool) -> dict[str, str]:
        """The rate-limit headers of the answer (OpenAI's, or Anthropic's on its API); none without limits."""
        if self.decision is None:
            return {}
        return anthropic_headers(self.decision) if anthropic else openai_headers(self.decision)
