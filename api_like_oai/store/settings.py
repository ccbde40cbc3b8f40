"""Where stored responses and conversations live (`--store URL`) and for how long (`--store-ttl`).

Parsed in gunicorn's master with the other settings, so this module imports nothing that does I/O;
the backends are opened in each worker (store/__init__.open_store).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_TTL_SECONDS = 30 * 24 * 3600  # as long as OpenAI keeps responses
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class StoreSettings:
    """`kind` is "sqlite", "redis" or "none"; `location` the SQLite file or the Redis URL."""

    kind: str = "sqlite"
    location: str = ""
    ttl_seconds: float = DEFAULT_TTL_SECONDS
    secret_file: str | None = None  # the key-hashing secret; default: beside the SQLite file, or in Redis

    @property
    def enabled(self) -> bool:
        return self.kind != "none"


def duration(text: str) -> float:
    """Seconds in "90", "90s", "15m", "12h" or "30d"; ValueError otherwise (argparse names the flag)."""
    match = _DURATION.match(str(text))
    if not match or float(match[1]) <= 0:
        raise ValueError(f"not a duration: {text!r} (seconds, or a number with s, m, h or d)")
    return float(match[1]) * _UNIT_SECONDS[match[2]]


def store_settings(url: str | None, ttl_seconds: float, secret_file: str | None) -> StoreSettings:
    """The settings `--store URL` says; ValueError with a one-line reason for a URL it cannot use."""
    url = (url or "").strip()
    if not url:
        return StoreSettings("sqlite", str(default_sqlite_path()), ttl_seconds, secret_file)
    if url == "none":
        return StoreSettings("none", "", ttl_seconds, secret_file)
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        path = url[len("sqlite://") :]
        if not path.startswith("/") or path == "/":
            raise ValueError(f"--store {url!r}: write sqlite:///absolute/path/to/file.sqlite3")
        return StoreSettings("sqlite", path, ttl_seconds, secret_file)
    if parts.scheme in ("redis", "rediss", "unix"):
        if parts.scheme != "unix" and not parts.hostname:
            raise ValueError(f"--store {url!r}: write redis://HOST:PORT/DB")
        return StoreSettings("redis", url, ttl_seconds, secret_file)
    raise ValueError(f"--store {url!r}: expected sqlite:///PATH, redis://HOST:PORT/DB or none")


def default_sqlite_path() -> Path:
    """$XDG_DATA_HOME/api-like-oai/store.sqlite3 (~/.local/share/... when XDG_DATA_HOME is unset)."""
    data_home = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data_home) / "api-like-oai" / "store.sqlite3"
