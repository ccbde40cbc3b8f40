"""The access check of each request: who the caller is (`Gate.identify`), and the request's `Ticket`,
which admission asks before any upstream work, the request's door (services/door.py) asks again
before each generation (its prompt's tokens), and which writes the request's usage as llama.cpp reports it and when it ends."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..errors import AuthenticationFailed, InvalidRequest, RateLimited, StoreUnavailable
from .book import KeyBook
from .keys import ADMIN_NAME, ANONYMOUS, CONFIG_KEY_NAME, NORMAL, Caller, KeyRecord, matching
from .limits import Decision, anthropic_headers, audio_ms, day_of, needed_tokens, openai_headers, retry_after_header
from .usage import UsageEntry, entry_of, progress_entry

log = logging.getLogger("api_like_oai")

OPEN, CLOSED = "open", "closed"
LAST_READ_BOUND = 10_000
CHECKPOINT_SECONDS = 1.0  # a running request's reported tokens are written at most this often


@dataclass(frozen=True)
class Gate:
    """The keys a request may bring: --api-key (and the config file's), --admin-key, and the managed
    keys in the key book (found by their digest, never cached: a revoked key is refused at once)."""

    api_keys: tuple[str, ...] = ()
    admin_keys: tuple[str, ...] = ()
    book: KeyBook | None = None
    on_store_error: str = CLOSED  # --limits-on-store-error
    metrics_per_key: bool = False  # --metrics-per-key: /metrics counts each managed key by name
    api_key_priority: str = NORMAL  # --api-key-priority: of the keys from the flags (and of no key)
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


@dataclass
class Ticket:
    """One request's passage: its caller's limits checked once (`admit`, when it names a model), its
    usage written when it ends (`finish`, called by the access record as it closes) if it was admitted:
    usage is of the requests for a model, not of listing models or reading usage."""

    caller: Caller
    gate: Gate = Gate()
    metrics: object | None = None  # observability.Metrics
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    decision: Decision | None = None
    for_model: bool = False  # admission looked a model up for it: its usage is recorded
    record: object | None = None  # observability.RequestRecord: its model and API name the usage
    max_tokens: int | None = None  # as admission saw it: what each generation may add to its prompt
    prompts: int = 0  # the tokens of its generations' prompts (or their bound), as far as known
    reserved: int = 0  # what it holds in the key book (limits.needed_tokens)
    generations: int = 0  # generations started (n > 1: one per choice)
    leased: bool = False  # admitted: it holds a place in flight until `finish`
    # llama.cpp's latest counts per generation and choice, and what checkpoints wrote of them
    live: list = field(default_factory=list, repr=False)
    written: UsageEntry | None = None
    last_write: float = field(default_factory=time.monotonic)
    _writing: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def admit(self, max_tokens: int | None = None, audio_seconds: float | None = 0.0) -> None:
        """Count the request against its key's limits; RateLimited if it is over one. Once per request.
        Its max_tokens are reserved, the `audio_seconds` it carries counted (None: audio whose header
        does not say its length, refused for a key limited in audio seconds: it could not be counted)."""
        self.for_model = True
        if not self.caller.limited or self.decision is not None:
            return
        if audio_seconds is None and self.caller.record.audio_seconds_per_day is not None:
            raise InvalidRequest(
                f"the audio's length cannot be read from its header, and key {self.caller.name!r} "
                "is limited in audio seconds per day: send wav, mp3 or flac that says its length",
                code="audio_length_unknown",
            )
        self.max_tokens = max_tokens
        try:
            decision = self.gate.book.admit(self.caller.record, self.request_id, time.time(), max_tokens, audio_ms(audio_seconds))
        except StoreUnavailable as exc:
            self._store_failed(exc)
            return
        self._decided(decision)
        self.leased, self.reserved = True, decision.reserved_tokens

    def admit_action(self) -> None:
        """Count a request that names no model (a store write, a usage read) against its key's request
        limits (`--rpm`, `--max-parallel`); RateLimited if it is over one. Its usage is not recorded
        (usage is of the requests for a model); its place in flight is freed by `finish`."""
        if not self.caller.limited or self.decision is not None:
            return
        try:
            decision = self.gate.book.admit(self.caller.record, self.request_id, time.time(), None)
        except StoreUnavailable as exc:
            self._store_failed(exc)
            return
        self._decided(decision)
        self.leased = True

    def _decided(self, decision: Decision) -> None:
        self.decision = decision
        if not decision.allowed:
            if self.metrics is not None:
                self.metrics.limit_refusals.labels(decision.refused_by).inc()
            raise RateLimited(
                decision.message(),
                retry_after=retry_after_header(decision.retry_after),
                of_tokens=decision.refused_by in ("tpm", "tokens_per_day"),
            )

    def before_generation(self, prompt_bytes: int, count_prompt: Callable[[], int]) -> None:
        """One generation of the request is about to be sent (the request's door asks): its prompt's tokens,
        and for a second choice its max_tokens too, must fit what is left of the key's token limits, and
        are reserved; RateLimited (a 429 before any token) if not. The prompt's byte length bounds its
        tokens; `count_prompt()` (llama.cpp's /tokenize) is asked only when that bound does not fit."""
        if not self.leased or not self.caller.record.has_token_limits:
            return
        self.generations += 1
        decision = self._reserve(self.prompts + prompt_bytes)
        if not decision.allowed:
            decision = self._reserve(self.prompts + count_prompt())
        if not decision.allowed:  # else the headers stay admission's: what was left before this request
            self._decided(decision)

    def _reserve(self, prompts: int) -> Decision:
        """The key book's decision on holding what the request's generations need with `prompts` tokens
        of prompts (each generation's max_tokens capped as limits.needed_tokens says)."""
        need = needed_tokens(self.caller.record, (self.max_tokens or 0) * self.generations, prompts)
        more = need - self.reserved
        decision = self.decision
        if more > 0:
            try:
                decision = self.gate.book.reserve(self.caller.record, self.request_id, time.time(), more)
            except StoreUnavailable as exc:
                self._store_failed(exc)
                return self.decision
        if decision.allowed:
            self.prompts, self.reserved = prompts, max(need, self.reserved)
        return decision

    def observer(self) -> Callable | None:
        """For one generation: a callable the door gives each of its events, so that llama.cpp's counts
        are written as they arrive (every CHECKPOINT_SECONDS); None when the request's usage is not kept."""
        if self.caller.record is None or self.gate.book is None or not self.for_model or self.record is None:
            return None
        counts: dict[int, list[int]] = {}
        self.live.append(counts)

        def observe(event) -> None:
            prompt, completion = getattr(event, "prompt_tokens", None), getattr(event, "completion_tokens", None)
            if prompt is None and completion is None:
                return
            latest = counts.setdefault(event.index, [0, 0, 0])
            for position, value in enumerate((prompt, event.cached_tokens, completion)):
                if value is not None:
                    latest[position] = value
            if time.monotonic() - self.last_write >= CHECKPOINT_SECONDS:
                self._checkpoint()

        return observe

    def _checkpoint(self) -> None:
        """Write what llama.cpp reported since the last write (one request's checkpoint at a time)."""
        if not self._writing.acquire(blocking=False):
            return
        try:
            self.last_write = time.monotonic()
            totals = [sum(latest[position] for counts in self.live for latest in counts.values()) for position in range(3)]
            entry = progress_entry(self.written, self.record, self.caller.name, time.time(), *totals)
            if entry.tokens <= 0 and self.written is not None:
                return
            self.gate.book.checkpoint(self.caller.record, self.request_id if self.leased else None, time.time(), entry)
            self.written = entry if self.written is None else self.written.plus(entry)
        except StoreUnavailable as exc:
            log.warning("usage of key %r not written as it came: %s", self.caller.name, exc.message)
        finally:
            self._writing.release()

    def _store_failed(self, exc: StoreUnavailable) -> None:
        """The store cannot count the request: refuse it (503, closed) or let it run unchecked (open)."""
        outcome = self.gate.on_store_error
        if self.metrics is not None:
            self.metrics.limits_unchecked.labels(outcome).inc()
        log.warning(
            "limits of key %r not checked, the key store failed (%s): request %s by --limits-on-store-error %s",
            self.caller.name,
            exc.message,
            "refused" if outcome == CLOSED else "let run",
            outcome,
        )
        if outcome == CLOSED:
            raise exc

    def finish(self, record) -> None:
        """Free the request's place and write its usage (tokens from llama.cpp's numbers on `record`,
        an observability.RequestRecord); a store failure is logged, never raised into the answer."""
        if self.caller.record is None or self.gate.book is None:
            return
        if not self.for_model:
            self._release()
            return
        now = time.time()
        entry = entry_of(record, self.caller.name, now, time.perf_counter() - record.started)
        if self.gate.metrics_per_key and self.metrics is not None:
            self.metrics.count_key(entry)
        with self._writing:  # after any checkpoint under way: the last write is the rest
            rest = entry.minus(self.written) if self.written is not None else entry
            self.written = entry
        try:
            self.gate.book.finish(self.caller.record, self.request_id if self.leased else None, now, rest)
        except StoreUnavailable as exc:
            log.warning("usage of key %r not recorded: %s", self.caller.name, exc.message)

    def _release(self) -> None:
        """An action's place in flight freed, nothing written to the usage."""
        if not self.leased:
            return
        now = time.time()
        try:
            self.gate.book.finish(self.caller.record, self.request_id, now, UsageEntry(day_of(now), self.caller.name, "", ""))
        except StoreUnavailable as exc:
            log.warning("place in flight of key %r not freed: %s", self.caller.name, exc.message)

    def headers(self, anthropic: bool) -> dict[str, str]:
        """The rate-limit headers of the answer (OpenAI's, or Anthropic's on its API); none without limits."""
        if self.decision is None:
            return {}
        return anthropic_headers(self.decision) if anthropic else openai_headers(self.decision)
