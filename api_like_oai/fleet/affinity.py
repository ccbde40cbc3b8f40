"""The session key a front places a request by (pure): the same for every turn of one conversation,
computed alike by every front, so a session's turns reach the box holding its KV cache.

Chosen over a prefix table shared in Redis (DESIGN.md "Fleet"): the hash costs no round trip and no
write per request, and every front agrees on it without coordination; a table would learn prefixes
that no session key names, but llama-server publishes no KV events, so it too would only guess, at
one Redis read and one write per request. The key is the client's own session key when it sends one
(`prompt_cache_key`, Anthropic's `metadata.user_id`, `user`), else a digest of what opens the
conversation: the model, the tools, the system prompt and the first message, which an agent resends
unchanged on every turn.
"""

from __future__ import annotations

import hashlib

import orjson

OPENING_MESSAGES = 1  # of the conversation's messages, how many (after any system prompt) name it


def session_key(body: dict) -> str | None:
    """The request's session key, or None when nothing in it names a conversation."""
    explicit = _explicit_key(body)
    if explicit:
        return explicit
    opening = _opening(body)
    if opening is None:
        return None
    return hashlib.blake2b(orjson.dumps(opening, option=orjson.OPT_SORT_KEYS), digest_size=12).hexdigest()


def _explicit_key(body: dict) -> str | None:
    metadata = body.get("metadata")
    user_id = metadata.get("user_id") if isinstance(metadata, dict) else None
    for key in (body.get("prompt_cache_key"), user_id, body.get("user")):
        if isinstance(key, str) and key:
            return key
    return None


def _opening(body: dict) -> list | None:
    """What a conversation starts with, in any of the three APIs; None for a request with none."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        messages = body.get("input") if isinstance(body.get("input"), list) else None
    if messages is None:
        prompt = body.get("prompt") or body.get("input")
        return [body.get("model"), prompt[:4096]] if isinstance(prompt, str) else None
    system = [m for m in messages if isinstance(m, dict) and m.get("role") in ("system", "developer")]
    rest = [m for m in messages if not (isinstance(m, dict) and m.get("role") in ("system", "developer"))]
    return [
        body.get("model"),
        body.get("tools"),
        body.get("system"),
        body.get("instructions"),
        system[:1],
        rest[:OPENING_MESSAGES],
    ]
