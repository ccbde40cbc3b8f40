"""Per-key limits (pure: no I/O): what a key has used, whether a request fits, and the headers that say so.

Requests and tokens per minute are counted over a sliding window of the last 60 seconds, in
one-second buckets (a few dozen rows or fields per key, however many requests), so a burst at a
minute's edge gets no more than the limit; tokens per day over the UTC day; requests in flight as leases that end with the
request (or when the lease runs out, if its worker was killed). The backends (sqlite.py, redis.py)
read the counts and apply `decide` in one atomic step, so no two requests take the same last place.

Tokens are reserved before they are generated: a request admitted holds its max_tokens, and once its
prompt is rendered the prompt's tokens too, as a reservation on its lease; the tokens llama.cpp reports
replace the reservation as they arrive (access/gate.Ticket writes them every CHECKPOINT_SECONDS and at
the end). So requests running together cannot all take the same tokens that are left, a stream that
started is never cut for a limit, and a worker killed mid-request leaves its last written tokens and
what is left of its reservation counted (until its lease runs out).

Audio seconds per day are known before anything is sent (read from each file's header), so they are
not reserved but counted when the request is admitted, in whole milliseconds (exact in SQLite, in Redis
and in its Lua script alike); only a request that carries audio is refused by that limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

from .keys import KeyRecord

WINDOW_SECONDS = 60.0
LEASE_SECONDS = 900.0  # a request in flight holds its place this long at most (a worker killed mid-request)
DAY_SECONDS = 86400
# The order limits are checked in, and the index the Redis script answers with (1-based there).
LIMIT_ORDER = ("max_parallel", "rpm", "tpm", "tokens_per_day", "audio_seconds_per_day")
DESCRIPTIONS = {
    "max_parallel": "requests in flight",
    "rpm": "requests per minute",
    "tpm": "tokens per minute",
    "tokens_per_day": "tokens per day",
    "audio_seconds_per_day": "seconds of audio per day",
}
# A limit is compared in these units of what it counts: audio in milliseconds of its seconds.
LIMIT_SCALE = {"audio_seconds_per_day": 1000}


@dataclass(frozen=True)
class Counts:
    """What a key has used: in the window, today, in flight; and when the oldest window events leave it."""

    requests: int = 0
    tokens: int = 0
    tokens_today: int = 0
    in_flight: int = 0
    oldest_request_at: float | None = None
    oldest_tokens_at: float | None = None
    reserved: int = 0  # tokens the requests in flight hold before llama.cpp reports them
    audio_ms_today: int = 0  # milliseconds of audio admitted today

    @property
    def tokens_taken(self) -> int:
        """Of the minute's tokens: those used and those reserved."""
        return self.tokens + self.reserved


@dataclass(frozen=True)
class Decision:
    """Whether a request may run; if not, the limit it is over and the seconds until it may."""

    record: KeyRecord
    counts: Counts
    now: float
    refused_by: str | None = None
    retry_after: float = 0.0
    reserved_tokens: int = 0

    @property
    def allowed(self) -> bool:
        return self.refused_by is None

    def message(self) -> str:
        limit = getattr(self.record, self.refused_by)
        return (
            f"rate limit reached for key {self.record.name!r}: {DESCRIPTIONS[self.refused_by]} "
            f"({self.refused_by}) limit {limit}; retry after {retry_after_header(self.retry_after)} s"
        )


def needed_tokens(record: KeyRecord, max_tokens: int | None, prompt_tokens: int = 0) -> int:
    """The tokens a request must find left before it runs: its prompt's and its max_tokens, the latter
    never more than a whole limit leaves after the prompt (max_tokens is a bound: a request asking for
    more than the key's whole minute or day is let run when nothing is used, rather than refused for
    ever; a prompt is what it is)."""
    generated = max_tokens or 0
    for limit in (record.tpm, record.tokens_per_day):
        if limit is not None:
            generated = min(generated, max(limit - prompt_tokens, 0))
    return prompt_tokens + generated


def audio_ms(seconds: float | None) -> int:
    """Audio seconds as the limit counts them: whole milliseconds, rounded up."""
    return math.ceil(seconds * 1000) if seconds else 0


def decide(record: KeyRecord, counts: Counts, now: float, max_tokens: int | None = None, audio: int = 0) -> Decision:
    """The decision for one request of `record`'s key with `counts` used (checked in LIMIT_ORDER);
    `audio`: the milliseconds of audio it carries (audio_ms)."""
    need = needed_tokens(record, max_tokens)
    checks = {
        "max_parallel": (counts.in_flight + 1, 1.0),
        "rpm": (counts.requests + 1, _window_left(counts.oldest_request_at, now)),
        **_token_checks(counts, now, max(need, 1)),
    }
    if audio > 0:
        checks["audio_seconds_per_day"] = (counts.audio_ms_today + audio, seconds_to_midnight(now))
    return _first_over(record, counts, now, checks, need)


def decide_more(record: KeyRecord, counts: Counts, now: float, more: int) -> Decision:
    """Whether a running request may reserve `more` tokens (its rendered prompt's, its other choices'):
    the token limits only; `counts` include what it holds already."""
    return _first_over(record, counts, now, _token_checks(counts, now, more), more)


def _token_checks(counts: Counts, now: float, need: int) -> dict:
    return {
        "tpm": (counts.tokens_taken + need, _window_left(counts.oldest_tokens_at, now)),
        "tokens_per_day": (counts.tokens_today + counts.reserved + need, seconds_to_midnight(now)),
    }


def _first_over(record: KeyRecord, counts: Counts, now: float, checks: dict, need: int) -> Decision:
    for name in LIMIT_ORDER:
        limit = getattr(record, name)
        if name in checks and limit is not None and checks[name][0] > limit * LIMIT_SCALE.get(name, 1):
            return Decision(record, counts, now, name, checks[name][1])
    return Decision(record, counts, now, reserved_tokens=need)


def _window_left(oldest: float | None, now: float) -> float:
    """Seconds until the oldest event in the window leaves it (a full minute if none is there)."""
    return WINDOW_SECONDS if oldest is None else max(oldest + WINDOW_SECONDS - now, 0.001)


def seconds_to_midnight(now: float) -> float:
    return DAY_SECONDS - (now % DAY_SECONDS)


def day_of(now: float) -> str:
    """The UTC day `now` falls in, as YYYY-MM-DD."""
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d")


def retry_after_header(seconds: float) -> str:
    """Retry-After: whole seconds, rounded up, at least 1."""
    return str(max(1, math.ceil(seconds)))


def minute_limits(decision: Decision) -> list[tuple[str, int, int, float]]:
    """(kind, limit, remaining, seconds until the window frees a place) of the key's per-minute limits;
    kind is "requests" or "tokens". An admitted request is counted in the remaining requests."""
    record, counts = decision.record, decision.counts
    limits = []
    if record.rpm is not None:
        used = counts.requests + (1 if decision.allowed else 0)
        limits.append(("requests", record.rpm, max(record.rpm - used, 0), _window_left(counts.oldest_request_at, decision.now)))
    if record.tpm is not None:
        limits.append(
            ("tokens", record.tpm, max(record.tpm - counts.tokens_taken, 0), _window_left(counts.oldest_tokens_at, decision.now))
        )
    return limits


def openai_headers(decision: Decision) -> dict[str, str]:
    """OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,tokens} headers."""
    headers = {}
    for kind, limit, remaining, reset in minute_limits(decision):
        headers |= {
            f"x-ratelimit-limit-{kind}": str(limit),
            f"x-ratelimit-remaining-{kind}": str(remaining),
            f"x-ratelimit-reset-{kind}": duration_text(reset),
        }
    return headers


def anthropic_headers(decision: Decision) -> dict[str, str]:
    """Anthropic's anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset} (reset: an RFC 3339 time)."""
    headers = {}
    for kind, limit, remaining, reset in minute_limits(decision):
        reset_at = datetime.fromtimestamp(decision.now + reset, UTC).isoformat(timespec="seconds")
        headers |= {
            f"anthropic-ratelimit-{kind}-limit": str(limit),
            f"anthropic-ratelimit-{kind}-remaining": str(remaining),
            f"anthropic-ratelimit-{kind}-reset": reset_at.replace("+00:00", "Z"),
        }
    return headers


def duration_text(seconds: float) -> str:
    """OpenAI's reset format: "850ms", "12s", "1m30s"."""
    if seconds < 1:
        return f"{max(round(seconds * 1000), 1)}ms"
    minutes, rest = divmod(math.ceil(seconds), 60)
    return f"{minutes}m{rest}s" if minutes else f"{rest}s"
