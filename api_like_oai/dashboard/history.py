"""The dashboard's history: requests, tokens, time to first token, errors and usage by key, per
minute and per hour, and the last failed requests, kept in the proxy's store (buckets.py) so that
the 7-day charts survive a restart.

A request adds its numbers when its record closes: a few dict increments in this process's pending
counts, nothing on the token path. A background thread (a greenlet under gevent) adds the pending
counts to the store every FLUSH_SECONDS, where they add up: every worker and every instance sharing
a Redis count into the same buckets. Reading merges the store's buckets with this process's pending
ones, so this process's own requests show at once.
"""

from __future__ import annotations

import atexit
import bisect
import logging
import os
import threading
import time
from collections import Counter

from ..errors import StoreUnavailable

log = logging.getLogger("api_like_oai")

MINUTE, HOUR = 60, 3600
SHOWN = {MINUTE: 15, HOUR: 7 * 24}  # buckets a chart shows: 15 minutes, 7 days
KEEP_SECONDS = {MINUTE: 2 * 3600, HOUR: 8 * 86400}  # how long the store keeps them
FLUSH_SECONDS = 5.0
KEPT_ERRORS = 100
REASON_CHARS = 300
# Time to first token is kept as counts per bucket (merged by adding, unlike percentiles): bounds grow
# by 1.25, so a percentile read back is within 25% of the real one, from 10 ms to about 10 minutes.
TTFT_BOUNDS = tuple(0.01 * 1.25**index for index in range(50))
# The dashboard's stream is not charted: it is one long request per open page, not traffic.
UNCHARTED = frozenset({"/v1/internal/events"})


def bucket_start(now: float, resolution: int) -> int:
    return int(now // resolution) * resolution


def request_counts(record) -> dict[str, float]:
    """What one closed request (observability.RequestRecord) adds to its minute's and hour's bucket."""
    counts: dict[str, float] = {
        "requests": 1,
        "prompt_tokens": record.prompt_tokens,
        "completion_tokens": record.completion_tokens,
        "cached_tokens": record.cached_tokens,
    }
    if record.status >= 400:
        counts["errors"] = 1
    if record.first_token is not None:
        bound = bisect.bisect_left(TTFT_BOUNDS, record.first_token - record.started)
        counts[f"ttft:{bound}"] = 1
    key = getattr(record, "key_name", None)
    if key:
        counts[f"key_requests:{key}"] = 1
        counts[f"key_tokens:{key}"] = record.prompt_tokens + record.completion_tokens
    if record.upstream != "-" and record.prompt_tokens:
        counts[f"upstream_prompt:{record.upstream}"] = record.prompt_tokens
        counts[f"upstream_cached:{record.upstream}"] = record.cached_tokens
    return counts


def error_entry(record, reason: str | None, now: float) -> dict:
    """A failed or refused request as the recent errors list shows it: never its prompt, only what
    the proxy said of it (its error code and message, cut short) and the MCP steps it ran."""
    return {
        "time": round(now, 3),
        "request_id": record.request_id,
        "endpoint": record.endpoint,
        "model": record.model,
        "key": getattr(record, "key_name", None),
        "status": record.status,
        "code": record.error_code,
        "reason": (reason or record.error_code or "")[:REASON_CHARS],
        **(record.shown_steps() if hasattr(record, "shown_steps") else {}),
    }  # its MCP steps, if any


def percentile(histogram: dict[int, float], fraction: float) -> float | None:
    """The `fraction` percentile of a TTFT histogram (bound index -> count), interpolated in its bucket."""
    total = sum(histogram.values())
    if total <= 0:
        return None
    wanted, seen = fraction * total, 0.0
    for index in sorted(histogram):
        count = histogram[index]
        if seen + count >= wanted:
            low = TTFT_BOUNDS[index - 1] if index > 0 else 0.0
            high = TTFT_BOUNDS[index] if index < len(TTFT_BOUNDS) else low * 1.25
            return round(low + (high - low) * (wanted - seen) / count, 3)
        seen += count
    return None


def chart(resolution: int, now: float, buckets: dict[int, dict[str, float]]) -> dict:
    """The series of one chart window (the last SHOWN[resolution] buckets, the current one last):
    bucket starts, requests, errors, prompt and generated tokens per second, TTFT p50/p95 and tokens
    by key. A bucket with nothing in it counts zero (TTFT: none)."""
    last = bucket_start(now, resolution)
    starts = [last - resolution * back for back in range(SHOWN[resolution] - 1, -1, -1)]
    empty = [0] * len(starts)
    series: dict = {
        "resolution": resolution,
        "time": starts,
        "requests": list(empty),
        "errors": list(empty),
        "prompt_tps": list(empty),
        "generated_tps": list(empty),
        "ttft_p50": [None] * len(starts),
        "ttft_p95": [None] * len(starts),
        "keys": {},
    }
    for position, start in enumerate(starts):
        bucket = buckets.get(start)
        if not bucket:  # most of a 7-day window: left at its zeros
            continue
        seconds = min(resolution, max(now - start, 1.0))  # the current bucket has run this long
        series["requests"][position] = bucket.get("requests", 0)
        series["errors"][position] = bucket.get("errors", 0)
        series["prompt_tps"][position] = round(bucket.get("prompt_tokens", 0) / seconds, 2)
        series["generated_tps"][position] = round(bucket.get("completion_tokens", 0) / seconds, 2)
        histogram = {int(field[5:]): count for field, count in bucket.items() if field.startswith("ttft:")}
        series["ttft_p50"][position] = percentile(histogram, 0.5)
        series["ttft_p95"][position] = percentile(histogram, 0.95)
        for field, count in bucket.items():
            if field.startswith("key_tokens:"):
                series["keys"].setdefault(field[11:], list(empty))[position] = count
    return series


def cache_shares(buckets: dict[int, dict[str, float]]) -> dict[str, float]:
    """By upstream URL: the share of its prompt tokens that came from llama.cpp's cache, over `buckets`."""
    totals: Counter = Counter()
    for bucket in buckets.values():
        totals.update({field: count for field, count in bucket.items() if field.startswith("upstream_")})
    return {
        field[16:]: round(totals[f"upstream_cached:{field[16:]}"] / count, 3)
        for field, count in totals.items()
        if field.startswith("upstream_prompt:") and count > 0
    }


class History:
    """This process's pending counts and errors, flushed to `buckets` (buckets.py) in the background."""

    def __init__(self, buckets, flush_seconds: float = FLUSH_SECONDS):
        self.buckets = buckets
        self.flush_seconds = flush_seconds
        self._pending: dict[tuple[int, int], Counter] = {}
        self._errors: list[dict] = []
        self._lock = threading.Lock()
        self._flusher_pid: int | None = None

    def add(self, record, reason: str | None = None) -> None:
        """One closed request (a RequestRecord.on_close callback)."""
        if record.endpoint in UNCHARTED:
            return
        now = time.time()
        counts = request_counts(record)
        with self._lock:
            for resolution in (MINUTE, HOUR):
                self._pending.setdefault((resolution, bucket_start(now, resolution)), Counter()).update(counts)
            if record.status >= 400:
                self._errors.append(error_entry(record, reason or getattr(record, "error_reason", None), now))
        self._start_flusher()

    def flush(self) -> None:
        """Add the pending counts and errors to the store; kept for the next flush if it fails."""
        with self._lock:
            pending, errors = self._pending, self._errors
            self._pending, self._errors = {}, []
        if not pending and not errors:
            return
        try:
            self.buckets.add({key: dict(counts) for key, counts in pending.items()}, errors)
        except StoreUnavailable as exc:
            log.warning("dashboard history not saved, kept for the next try: %s", exc)
            with self._lock:
                for key, counts in pending.items():
                    self._pending.setdefault(key, Counter()).update(counts)
                self._errors[:0] = errors

    def window(self, resolution: int, now: float) -> dict[int, dict[str, float]]:
        """The buckets of the chart window at `resolution`: the store's, with this process's pending added."""
        since = bucket_start(now, resolution) - resolution * (SHOWN[resolution] - 1)
        try:
            stored = self.buckets.read(resolution, since)
        except StoreUnavailable as exc:
            log.warning("dashboard history not read: %s", exc)
            stored = {}
        with self._lock:
            for (pending_resolution, start), counts in self._pending.items():
                if pending_resolution == resolution and start >= since:
                    merged = Counter(stored.get(start, {}))
                    merged.update(counts)
                    stored[start] = dict(merged)
        return stored

    def charts(self, now: float | None = None) -> dict:
        """The two chart windows, the last 15 minutes' cache share by upstream and the recent errors."""
        now = time.time() if now is None else now
        minutes = self.window(MINUTE, now)
        return {
            "minute": chart(MINUTE, now, minutes),
            "hour": chart(HOUR, now, self.window(HOUR, now)),
            "cache_shares": cache_shares(minutes),
            "errors": self.recent_errors(),
        }

    def recent_errors(self) -> list[dict]:
        """The last KEPT_ERRORS failed or refused requests, newest first."""
        try:
            stored = self.buckets.errors(KEPT_ERRORS)
        except StoreUnavailable:
            stored = []
        with self._lock:
            pending = list(reversed(self._errors))
        return (pending + stored)[:KEPT_ERRORS]

    def _start_flusher(self) -> None:
        if self._flusher_pid == os.getpid():
            return
        self._flusher_pid = os.getpid()  # a forked worker starts its own
        threading.Thread(target=self._flush_forever, name="dashboard-history", daemon=True).start()
        atexit.register(self.flush)

    def _flush_forever(self) -> None:
        while True:
            time.sleep(self.flush_seconds)
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - the loop must outlive one bad flush
                log.exception("dashboard history flush failed")
