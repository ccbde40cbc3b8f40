"""Ids of stored objects, and the owner of an object: the caller's API key as a keyed hash.

An API key is never stored. What is stored is HMAC-SHA256(secret, key): a copy of the store does not
give the keys away, and without the secret (kept apart from the data where the deployment allows,
see --store-secret-file) a weak key cannot even be tried offline against the digests.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

SHARED_OWNER = "shared"  # the one scope of a proxy that asks for no API key
SECRET_BYTES = 32


def new_id(prefix: str) -> str:
    """`prefix_` and 128 random bits in hex: not guessable, so an id alone reveals nothing."""
    return f"{prefix}_{secrets.token_hex(16)}"


def owner_digest(secret: bytes, api_key: str | None) -> str:
    """The owner of what `api_key` stores; SHARED_OWNER without a key."""
    if api_key is None:
        return SHARED_OWNER
    return hmac.new(secret, api_key.encode(), hashlib.sha256).hexdigest()


def same_owner(stored: str, caller: str) -> bool:
    """Whether `caller` owns what `stored` owns, compared in constant time."""
    return hmac.compare_digest(stored.encode(), caller.encode())


def file_secret(path: str | os.PathLike) -> bytes:
    """The secret in the file at `path`; a new random one is written there (mode 0600) if there is none.
    Several workers starting at once agree: the first file linked into place wins."""
    path = Path(path)
    try:
        return _read_secret(path)
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    candidate = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    descriptor = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(secrets.token_hex(SECRET_BYTES) + "\n")
    try:
        os.link(candidate, path)  # fails if another worker got there first; then theirs is the secret
    except FileExistsError:
        pass
    finally:
        candidate.unlink()
    return _read_secret(path)


def _read_secret(path: Path) -> bytes:
    text = path.read_text().strip()
    if len(text) < 32:
        raise ValueError(f"{path}: the store secret must be at least 32 characters")
    return text.encode()
