"""Managing keys: create, update, revoke, list, and usage; the same operations for the CLI
(`api-like-oai keys ...`) and the HTTP API (/v1/internal/keys), on one schema of what may change."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..store.settings import duration
from .book import KeyBook
from .keys import KeyRecord, NameTaken, UnknownKey, check_name, new_key, updated
from .limits import DAY_SECONDS, day_of
from .usage import UsageEntry

LIMIT_MAX = 2**53  # what SQLite's integers, Redis's Lua numbers and JSON clients all hold exactly
LAST_SECOND = 253402300799  # 9999-12-31T23:59:59Z: the last second a UTC date names
USAGE_SPAN_MAX = 400 * DAY_SECONDS  # how far back /v1/internal/usage reads (usage is kept 400 days)


class KeyChanges(BaseModel):
    """What a key may use: its models (None: every model) and limits (0 clears one on an update)."""

    model_config = ConfigDict(extra="forbid")

    models: list[str] | None = None
    mcp_servers: list[str] | None = Field(
        None, description="MCP servers of the config it may use: a name (every tool), or name.tool (that tool); none by default"
    )
    rpm: int | None = Field(None, ge=0, le=LIMIT_MAX)
    tpm: int | None = Field(None, ge=0, le=LIMIT_MAX)
    tokens_per_day: int | None = Field(None, ge=0, le=LIMIT_MAX)
    max_parallel: int | None = Field(None, ge=0, le=LIMIT_MAX)
    audio_seconds_per_day: int | None = Field(
        None, ge=0, le=LIMIT_MAX // 1000, description="seconds of audio (transcribed, or in chat) per UTC day"
    )
    max_stored_mib: int | None = Field(
        None, ge=0, le=LIMIT_MAX, description="MiB its stored responses and conversations may hold"
    )
    priority: Literal["high", "normal", "low"] | None = Field(
        None, description="when every upstream slot is busy, waiting requests of a higher priority go first"
    )
    expires: str | None = Field(None, description="a duration from now: seconds, or 90m, 12h, 30d; '' or 'never' clears it")

    @field_validator("expires")
    @classmethod
    def a_duration(cls, value: str | None) -> str | None:
        if value not in (None, "", "never"):
            duration(value)
        return value

    def record_fields(self, now: float) -> dict:
        """The changes as KeyRecord fields: only those set."""
        fields = self.model_dump(exclude_unset=True, exclude={"expires"})
        if fields.get("priority", "") is None:  # an explicit null leaves it as it is
            del fields["priority"]
        for listed in ("models", "mcp_servers"):
            if listed in fields and fields[listed] is not None:
                fields[listed] = tuple(fields[listed]) or None
        if "expires" in self.model_fields_set:
            fields["expires_at"] = now + duration(self.expires) if self.expires not in (None, "", "never") else None
        return fields


class NewKey(KeyChanges):
    name: str = Field(description="unique; shown in usage and logs (1-64 letters, digits, '.', '_', '@', '-')")


class KeyView(BaseModel):
    """A managed key as the HTTP API shows it: never the key, never its digest."""

    name: str
    models: list[str] | None
    mcp_servers: list[str] | None = Field(None, description="MCP servers of the config it is granted (name, name.tool)")
    rpm: int | None
    tpm: int | None
    tokens_per_day: int | None
    max_parallel: int | None
    audio_seconds_per_day: int | None
    max_stored_mib: int | None
    priority: str
    expires_at: float | None
    revoked: bool
    created_at: float


class CreatedKey(KeyView):
    key: str = Field(description="the key; shown only in this answer")


class KeyList(BaseModel):
    object: str = "list"
    data: list[KeyView]


class UsageRow(BaseModel):
    day: str
    key: str
    model: str
    api: str
    requests: int
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    errors: int
    seconds: float
    total_tokens: int


class UsageList(BaseModel):
    object: str = "list"
    data: list[UsageRow]


class OpenAIUsageResult(BaseModel):
    object: Literal["organization.usage.completions.result"]
    input_tokens: int
    output_tokens: int
    input_cached_tokens: int
    input_audio_tokens: int
    output_audio_tokens: int
    num_model_requests: int
    project_id: str | None
    user_id: str | None
    api_key_id: str | None
    model: str | None
    batch: bool | None
    service_tier: str | None


class OpenAIUsageBucket(BaseModel):
    object: Literal["bucket"]
    start_time: int
    end_time: int
    results: list[OpenAIUsageResult]


class OpenAIAudioUsageResult(BaseModel):
    object: Literal["organization.usage.audio_transcriptions.result"]
    seconds: int
    num_model_requests: int
    project_id: str | None
    user_id: str | None
    api_key_id: str | None
    model: str | None


class OpenAIAudioUsageBucket(OpenAIUsageBucket):
    results: list[OpenAIAudioUsageResult]


class OpenAIAudioUsagePage(BaseModel):
    """OpenAI's usage API answer for speech to text."""

    object: Literal["page"]
    data: list[OpenAIAudioUsageBucket]
    has_more: bool
    next_page: str | None


class OpenAIUsagePage(BaseModel):
    """OpenAI's usage API answer: daily buckets, all in one page."""

    object: Literal["page"]
    data: list[OpenAIUsageBucket]
    has_more: bool
    next_page: str | None


class OpenAIUsageQuery(BaseModel):
    """The query of GET /v1/organization/usage/completions (OpenAI's usage API; daily buckets only)."""

    model_config = ConfigDict(extra="ignore")

    start_time: int = Field(ge=0, le=LAST_SECOND, description="Unix seconds; the bucket of its UTC day is the first")
    end_time: int | None = Field(None, ge=0, le=LAST_SECOND, description="Unix seconds, exclusive (default: now)")
    bucket_width: Literal["1d"] = "1d"
    group_by: list[Literal["api_key_id", "model", "batch"]] = []
    limit: int = Field(7, ge=1, le=31)
    page: str | None = Field(
        None, pattern=r"^[0-9]{1,12}$", description="the `next_page` of the page before: where this page starts"
    )

    def page_days(self, now: float) -> tuple[list[str], int | None]:
        """(the UTC days of this page's buckets, at most `limit`; the start of the next page, or None
        when the range ends within this one). Only the page's days are made, however long the range."""
        start = int(self.page) if self.page is not None else self.start_time
        end = min(self.end_time if self.end_time is not None else int(now), LAST_SECOND + 1)
        first = start - start % DAY_SECONDS
        in_range = max(0, -(-(end - first) // DAY_SECONDS))
        shown = min(in_range, self.limit)
        days = [day_of(first + n * DAY_SECONDS) for n in range(shown)]
        return days, (first + shown * DAY_SECONDS if in_range > shown else None)


class UsageQuery(BaseModel):
    """The query of GET /v1/internal/usage."""

    since: str = Field(
        "7d", pattern=r"^\s*(\d*[1-9]\d*(\.\d+)?|\d+\.\d*[1-9]\d*)\s*[smhd]?\s*$", description="how far back: seconds, or 12h, 7d"
    )
    by: str | None = Field(
        None,
        pattern=r"^\s*(key|model|api|day)\s*(,\s*(key|model|api|day)\s*)*$",
        description="sum by these, comma-separated, of key, model, api, day",
    )
    key: str | None = Field(None, description="an admin key: only this key's usage")


def create_key(book: KeyBook, name: str, changes: KeyChanges) -> tuple[str, KeyRecord]:
    """(the new key, its record); KeyProblem if the name is bad or taken. The key is not kept."""
    key = new_key()
    now = time.time()
    record = updated(KeyRecord(check_name(name), book.digest(key), created_at=now), changes.record_fields(now))
    if not book.create(record):
        raise NameTaken(f"a key named {name!r} exists already")
    return key, record


def update_key(book: KeyBook, name: str, changes: KeyChanges) -> KeyRecord:
    record = updated(existing(book, name), changes.record_fields(time.time()))
    book.save(record)
    return record


def revoke_key(book: KeyBook, name: str) -> KeyRecord:
    """The key refused from now on, by every instance reading the store (its usage kept)."""
    record = replace(existing(book, name), revoked=True)
    book.save(record)
    return record


def existing(book: KeyBook, name: str) -> KeyRecord:
    record = book.by_name(name)
    if record is None:
        raise UnknownKey(f"no key named {name!r}")
    return record


def usage_of_days(book: KeyBook, days: list[str], key_name: str | None = None) -> list[UsageEntry]:
    """The usage rows of `days` (UTC, YYYY-MM-DD, in order), of one key or of all."""
    if not days:
        return []
    return [entry for entry in book.usage(days[0], days[-1]) if key_name is None or entry.key == key_name]


def usage_since(book: KeyBook, since_seconds: float, key_name: str | None = None) -> list[UsageEntry]:
    """The usage rows of the last `since_seconds` (whole UTC days), of one key or of all."""
    since_day = day_of(time.time() - max(min(since_seconds, USAGE_SPAN_MAX) - DAY_SECONDS, 0))
    return [entry for entry in book.usage(since_day) if key_name is None or entry.key == key_name]
