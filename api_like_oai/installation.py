"""What belongs to one installation of the proxy: its data directory and its secret key.

The key signs what the proxy hands out and must recognise when it comes back (a thought's
`signature`, a reasoning item's `encrypted_content`), so no server state is needed for it. Every
worker and every restart must use the same key, and so must every instance behind one load
balancer: it is read from API_LIKE_OAI_SECRET; else, in a fleet, it is derived from the fleet's secret;
else, when the instances share a store (Redis), it is derived from the store's secret, which they share
already; else it is a file in the data directory,
created once with 32 random bytes, readable by its owner only."""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import StoreUnavailable

if TYPE_CHECKING:
    from .store.base import Store

log = logging.getLogger("api_like_oai")

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


def seal_key_sources(store: Store | None, fleet_secret: str | None = None) -> tuple[Callable[[], bytes | None], ...]:
    """Where the key thoughts are signed under comes from, preferred first (sealing.Seal): the
    environment's key if one is given; else, in a fleet, a key derived from its secret (its boxes sign
    alike whatever their stores: a turn's thought or compaction may come back to another box); else,
    with a store several instances share, a key derived from its secret, then this installation's own
    (while that store cannot be reached; and what it signed before stays recognised)."""
    if os.environ.get(SECRET_ENV):
        return (secret,)
    fleets = ()
    if fleet_secret:
        fleet_key = hmac.new(fleet_secret.encode(), b"api-like-oai: the key thoughts are signed under", hashlib.sha256).digest()
        fleets = (lambda: fleet_key,)
    if store is None or store.seam.kind != "redis":  # one instance's alone
        return (*fleets, secret)

    def from_the_shared_store() -> bytes | None:
        try:
            return hmac.new(store.secret(), b"api-like-oai: the key thoughts are signed under", hashlib.sha256).digest()
        except StoreUnavailable as exc:
            log.warning(
                "thoughts are signed with this instance's own key for now (%s): other instances "
                "will not recognise them; give every instance API_LIKE_OAI_SECRET to avoid this",
                exc,
            )
            return None

    return (*fleets, from_the_shared_store, secret)


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
