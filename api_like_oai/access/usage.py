"""Usage per key (pure: no I/O): what one answered request cost, and sums of it for reading.

A request's usage is written as llama.cpp reports its tokens: what came since the last write, every
second or so while it runs (`progress_entry`), and the rest when it ends (its record closes; a stream
the client dropped counts what was generated until then). Each write adds to the key's row for
(day, model, API); the request itself is counted with the first.
"""

from __future__ import annotations

import csv
import io
import math
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields, replace
from datetime import UTC, datetime

from .limits import day_of

COUNTERS = ("requests", "prompt_tokens", "cached_tokens", "completion_tokens", "errors", "seconds", "audio_seconds")
FLOAT_COUNTERS = ("seconds", "audio_seconds")
GROUPS = ("key", "model", "api", "day")
TRANSCRIPTION_APIS = ("/audio/transcriptions", "/audio/translations")  # speech to text's routes (and /v1/...)
BATCH_API = "batch "  # what starts the api of a batch's line ("batch /v1/chat/completions"): its tokens apart


@dataclass(frozen=True)
class UsageEntry:
    """One row of usage: a key's requests on one model and API on one UTC day."""

    day: str
    key: str
    model: str
    api: str
    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    errors: int = 0
    seconds: float = 0.0
    audio_seconds: float = 0.0  # of the audio it sent (a file transcribed, input_audio in chat), read from its header

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def counters(self) -> tuple:
        return tuple(getattr(self, name) for name in COUNTERS)

    def plus(self, other: UsageEntry) -> UsageEntry:
        return replace(self, **{name: getattr(self, name) + getattr(other, name) for name in COUNTERS})

    def minus(self, written: UsageEntry) -> UsageEntry:
        """What this (a request's whole usage) adds to what was `written` of it already (never below 0:
        llama.cpp's counts only grow)."""
        return replace(self, **{name: max(getattr(self, name) - getattr(written, name), 0) for name in COUNTERS})


def entry_of(record, key_name: str, now: float, seconds: float) -> UsageEntry:
    """The entry of one finished request from its access record (observability.RequestRecord)."""
    return UsageEntry(
        day_of(now),
        key_name,
        record.model,
        record.endpoint,
        1,
        record.prompt_tokens,
        record.cached_tokens,
        record.completion_tokens,
        1 if record.status >= 400 else 0,
        round(seconds, 6),
        _audio_seconds(record),
    )


def progress_entry(
    written: UsageEntry | None, record, key_name: str, now: float, prompt_tokens: int, cached_tokens: int, completion_tokens: int
) -> UsageEntry:
    """What a running request adds to its usage since `written` (None: nothing yet; then the request
    itself is counted), from llama.cpp's latest counts: the checkpoint of Ticket._checkpoint."""
    so_far = UsageEntry(
        day_of(now),
        key_name,
        record.model,
        record.endpoint,
        1,
        prompt_tokens,
        cached_tokens,
        completion_tokens,
        0,
        round(time.perf_counter() - record.started, 6),
        _audio_seconds(record),
    )
    return so_far.minus(written) if written is not None else so_far


def _audio_seconds(record) -> float:
    return round(getattr(record, "audio_seconds", 0.0) or 0.0, 6)


def summed(entries: Iterable[UsageEntry], by: tuple[str, ...] = ("key",)) -> list[UsageEntry]:
    """The entries summed per distinct value of the `by` fields (the others shown as "*"), sorted."""
    sums: dict[tuple, list] = {}
    for entry in entries:
        group = tuple(getattr(entry, name) if name in by else "*" for name in ("day", "key", "model", "api"))
        totals = sums.setdefault(group, [0] * len(COUNTERS))
        for index, value in enumerate(entry.counters()):
            totals[index] += value
    return [UsageEntry(*group, *totals) for group, totals in sorted(sums.items())]


def as_csv(entries: Iterable[UsageEntry]) -> str:
    output = io.StringIO()
    writer = csv.writer(output, lineterminator="\n")
    writer.writerow([f.name for f in fields(UsageEntry)])
    writer.writerows([astuple_row(entry) for entry in entries])
    return output.getvalue()


def astuple_row(entry: UsageEntry) -> list:
    return list(asdict(entry).values())


def as_json(entry: UsageEntry) -> dict:
    return asdict(entry) | {"total_tokens": entry.tokens}


def openai_buckets(
    entries: Iterable[UsageEntry], days: list[str], group_by: tuple[str, ...], kind: str = "completions"
) -> list[dict]:
    """OpenAI's usage API page data: a daily bucket per day of `days` (UTC, YYYY-MM-DD), each with one
    result per distinct value of `group_by` ("api_key_id": the key's name; "model"). `kind`:
    "completions" (every row) or "audio_transcriptions" (the rows of speech to text: their seconds)."""
    if "batch" in group_by:  # OpenAI's `batch` group: a batch's lines apart from the rest
        entries = (replace(entry, api="batch" if entry.api.startswith(BATCH_API) else "") for entry in entries)
    by = tuple({"api_key_id": "key", "batch": "api"}.get(name, name) for name in group_by)
    per_day: dict[str, list[UsageEntry]] = {day: [] for day in days}
    for entry in entries:
        if entry.day in per_day and (kind == "completions" or entry.api.endswith(TRANSCRIPTION_APIS)):
            per_day[entry.day].append(entry)
    result = _openai_result if kind == "completions" else _openai_audio_result
    return [
        {
            "object": "bucket",
            "start_time": _epoch(day),
            "end_time": _epoch(day) + 86400,
            "results": [result(row, by) for row in summed(per_day[day], by)],
        }
        for day in days
    ]


def _openai_result(row: UsageEntry, by: tuple[str, ...]) -> dict:
    return {
        "object": "organization.usage.completions.result",
        "input_tokens": row.prompt_tokens,
        "output_tokens": row.completion_tokens,
        "input_cached_tokens": row.cached_tokens,
        "input_audio_tokens": 0,
        "output_audio_tokens": 0,
        "num_model_requests": row.requests,
        **_grouped(row, by),
        "batch": row.api == "batch" if "api" in by else None,
        "service_tier": None,
    }


def _openai_audio_result(row: UsageEntry, by: tuple[str, ...]) -> dict:
    """OpenAI counts whole seconds of audio transcribed."""
    return {
        "object": "organization.usage.audio_transcriptions.result",
        "seconds": math.ceil(row.audio_seconds),
        "num_model_requests": row.requests,
        **_grouped(row, by),
    }


def _grouped(row: UsageEntry, by: tuple[str, ...]) -> dict:
    return {
        "project_id": None,
        "user_id": None,
        "api_key_id": row.key if "key" in by else None,
        "model": row.model if "model" in by else None,
    }


def _epoch(day: str) -> int:
    return int(datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=UTC).timestamp())
