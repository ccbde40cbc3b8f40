"""What belongs to one installation of the proxy: its data directory and its secret key.

The key signs what the proxy hands out and must recognise when it comes back (a thought's
`signature`, a reasoning item's `encrypted_content`), so no server state is needed for it. Every
worker and every restart must use the same key: it is read from API_LIKE_OAI_SECRET (give the same
value to several instances behind one load balancer) or from a file in the data directory, created
once with 32 random bytes, readable by its owner only."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

SECRET_ENV = "API_LIKE_OAI_SECRET"  # noqa: S105 - the variable's name, not a key


def data_dir() -> Path:
    """$XDG_DATA_HOME/api-like-oai, or ~/.local/share/api-like-oai where XDG_DATA_HOME is not set."""
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "api-like-oai"


def secret() -> bytes:
    """The installation's key: from API_LIKE_OAI_SECRET, else the data directory's `secret` file."""
    given = os.environ.get(SECRET_ENV)
    if given:
        return given.encode()
    path = data_dir() / "secret"
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return _create(path)


def _create(path: Path) -> bytes:
    """Write a new key; if another worker wrote one first (O_EXCL), use that one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_bytes(32)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes()
    with os.fdopen(descriptor, "wb") as file:
        file.write(key)
    return key
