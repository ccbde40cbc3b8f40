"""The fleet's cold-start lock: a model loaded nowhere is started on one box only, even when several
fronts receive its first requests at once.

    api-like-oai:fleet:start:<model>   the box chosen to start it, SET NX PX LOCK_SECONDS
    api-like-oai:fleet:start:<model>#<n>  the box chosen for its n-th copy (a model on several boxes)

The front that sets it sends its request to that box, whose supervisor starts the model; a front that
finds it set sends its request to the same box, whose supervisor makes it wait for that load (as a
second request on one box does). The lock outlives the start by a little: by then the box's heartbeat
says the model is loading or loaded, and placement sends requests there without it. A box that refuses
the start has the lock taken back (only by the front that set it), and the next candidate is tried.
"""

from __future__ import annotations

from .membership import PREFIX

# Long enough for the box's record to say the model is loading (a heartbeat and a front's read: ~1.5 s,
# more on a busy machine), after which placement needs no lock; short, because while it lasts it steers
# the model's requests to its box even if that box has since evicted the model for another.
LOCK_SECONDS = 10.0
# Deletes the lock only if it still names the box this front chose (another front's lock stays).
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def lock_key(model: str) -> str:
    return PREFIX + "start:" + model


def claim(connection, model: str, address: str, seconds: float = LOCK_SECONDS) -> str:
    """The box the fleet starts `model` on: `address` if this call set the lock, else the one another
    front set it to (one round trip either way: SET NX GET)."""
    previous = connection.set(lock_key(model), address, nx=True, px=int(seconds * 1000), get=True)
    return address if previous is None else previous.decode()


def take(connection, name: str, address: str, seconds: float = LOCK_SECONDS) -> bool:
    """Whether this call set the lock `name` (to `address`): a replica's start, by one front only."""
    return bool(connection.set(lock_key(name), address, nx=True, px=int(seconds * 1000)))


def replica_lock(model: str, copies: int) -> str:
    """The lock's name for starting `model`'s copy number `copies` (replicas spanning boxes)."""
    return f"{model}#{copies}"


def holder(connection, model: str) -> str | None:
    """The box a start of `model` is under way on, if any."""
    value = connection.get(lock_key(model))
    return value.decode() if value is not None else None


def release(connection, model: str, address: str) -> None:
    """Take the lock back if it still names `address` (its box refused or did not answer)."""
    connection.eval(RELEASE, 1, lock_key(model), address)
