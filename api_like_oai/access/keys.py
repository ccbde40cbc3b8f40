"""Managed API keys as records (pure: no I/O): what a key may use and how much, and who a caller is.

A managed key is stored only as its keyed hash (store/keys.owner_digest: HMAC-SHA256 under the
store's secret), the same digest that owns the key's stored responses; the key itself is shown once,
when it is made. A record says which models the key may use (None: all) and its limits (None: none).
"""

from __future__ import annotations

import hmac
import re
import secrets
import time
from dataclasses import asdict, dataclass, field, fields, replace

import orjson

KEY_PREFIX = "sk-alo-"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
LIMIT_FIELDS = ("rpm", "tpm", "tokens_per_day", "max_parallel", "audio_seconds_per_day")
PRIORITIES = ("high", "normal", "low")  # who goes first to a free upstream slot (access/priority.py)
NORMAL = "normal"
CONFIG_KEY_NAME = "config-key"  # the name usage and logs give a key from --api-key / the config file
ADMIN_NAME = "admin"


class KeyProblem(ValueError):
    """A key operation that cannot be done (a bad name, a bad value); its message is one line for the
    CLI and the HTTP API."""


class UnknownKey(KeyProblem):
    """No managed key has the name."""


class NameTaken(KeyProblem):
    """A managed key has the name already."""


@dataclass(frozen=True)
class KeyRecord:
    """One managed key: its name (unique), its digest, and what it may do."""

    name: str
    digest: str
    models: tuple[str, ...] | None = None  # None: every model
    rpm: int | None = None  # requests per minute
    tpm: int | None = None  # tokens (prompt + completion) per minute
    tokens_per_day: int | None = None  # tokens per UTC day
    max_parallel: int | None = None  # requests in flight at once
    audio_seconds_per_day: int | None = None  # seconds of audio sent (transcribed, or in chat) per UTC day
    max_stored_mib: int | None = None  # its stored responses and conversations (None: --max-stored-mib)
    expires_at: float | None = None  # epoch seconds; None: never
    priority: str = NORMAL  # of PRIORITIES: its place among requests waiting for a slot
    mcp_servers: tuple[str, ...] | None = None  # MCP servers of the config ("name", or "name.tool") it may use
    revoked: bool = False
    created_at: float = field(default_factory=time.time)

    def usable(self, now: float) -> bool:
        return not self.revoked and (self.expires_at is None or now < self.expires_at)

    @property
    def has_limits(self) -> bool:
        return any(getattr(self, name) is not None for name in LIMIT_FIELDS)

    @property
    def has_token_limits(self) -> bool:
        return self.tpm is not None or self.tokens_per_day is not None

    def to_json(self) -> dict:
        """The record as stored (the digest included; never the key)."""
        record = asdict(self)
        record["models"] = list(self.models) if self.models is not None else None
        record["mcp_servers"] = list(self.mcp_servers) if self.mcp_servers is not None else None
        return record

    @classmethod
    def from_json(cls, stored: dict) -> KeyRecord:
        known = {f.name for f in fields(cls)}
        record = {name: value for name, value in stored.items() if name in known}
        for listed in ("models", "mcp_servers"):
            if record.get(listed) is not None:
                record[listed] = tuple(record[listed])
        return cls(**record)

    def encode(self) -> bytes:
        return orjson.dumps(self.to_json())

    @classmethod
    def decode(cls, stored: bytes) -> KeyRecord:
        return cls.from_json(orjson.loads(stored))

    def public(self) -> dict:
        """What the CLI and the HTTP API show: everything but the digest."""
        shown = self.to_json()
        del shown["digest"]
        return shown


@dataclass(frozen=True)
class Caller:
    """Who sent a request: a managed key's record, a key from the configuration, or no key at all."""

    name: str | None = None  # the managed key's name, CONFIG_KEY_NAME, ADMIN_NAME or None
    record: KeyRecord | None = None  # for a managed key
    admin: bool = False
    given_priority: str = NORMAL  # a key from the flags: --api-key-priority

    @property
    def priority(self) -> str:
        return self.record.priority if self.record is not None else self.given_priority

    @property
    def models(self) -> tuple[str, ...] | None:
        return self.record.models if self.record is not None else None

    def allows(self, *names: str) -> bool:
        """Whether the caller may use a model known by any of `names` (its name and the alias asked for)."""
        allowed = self.models
        return allowed is None or any(name in allowed for name in names)

    @property
    def limited(self) -> bool:
        return self.record is not None and self.record.has_limits


ANONYMOUS = Caller()


def new_key() -> str:
    """A new key: the prefix and 256 random bits, URL-safe."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def check_name(name: str) -> str:
    if not NAME_PATTERN.match(name or ""):
        raise KeyProblem(f"key name {name!r}: use 1-64 letters, digits, '.', '_', '@' or '-', starting with a letter or digit")
    return name


def matching(offered: str, keys: tuple[str, ...]) -> bool:
    """Whether `offered` is one of `keys`, compared with every key in constant time, so timing says
    nothing about which matched or how much of one."""
    encoded = offered.encode()
    return any([hmac.compare_digest(encoded, key.encode()) for key in keys])  # a list: no short cut


def updated(record: KeyRecord, changes: dict) -> KeyRecord:
    """`record` with `changes` (models, MCP servers, the limits, expires_at, priority); a value of 0 or "" clears a limit
    (and sets the priority back to normal)."""
    cleared = {name: (None if value in (0, "", ()) else value) for name, value in changes.items()}
    if "priority" in cleared:
        cleared["priority"] = cleared["priority"] or NORMAL
    return replace(record, **cleared)


def models_list(text: str | None) -> tuple[str, ...] | None:
    """`--models a,b` as a tuple; None (every model) for no value or `*`."""
    if text is None or text.strip() in ("", "*"):
        return None
    return tuple(name.strip() for name in text.split(",") if name.strip())
