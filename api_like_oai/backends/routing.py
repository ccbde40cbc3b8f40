"""Which upstream of a model's pool answers a request (pure: no I/O, no clock).

llama.cpp reuses the KV cache of a prompt's prefix only on the server that computed it, so a
conversation that moves between servers is read again from its first token on every move. The
router therefore sends a request to the upstream that served the longest prefix of its prompt:

1. prefix: a table (per model, bounded, least recently learned forgotten first) maps the digest of
   each run of leading blocks of a prompt (block k's digest covers blocks 0..k) to the upstream that
   last answered a prompt starting with them. The longest run held by a healthy upstream wins if it
   covers at least half of the prompt (a shared system prompt of a few blocks should not pull every
   new conversation onto one server).
2. session: a prompt the table does not know, with a key the client sends for its conversation
   (`prompt_cache_key`, `X-Claude-Code-Session-Id`, `user`, ...), goes where rendezvous hashing of
   the key over the healthy upstreams puts it: new sessions spread, every worker and every proxy
   instance sends the same session to the same place, and a dead upstream's sessions move while the
   others stay.
3. least busy: the healthy upstream with the fewest requests in flight (ties spread by the prompt).

Bounded load: a choice by 1 or 2 whose upstream has more requests in flight than the least busy one
plus `load_margin` gives way to 3 ("overloaded"). Every route lists all upstreams, the choice first,
then the least busy first and unhealthy ones last: the pool's failover order.

Exact probabilities: a request asking for log probabilities is routed among the upstreams that run no
draft model, where one is healthy (with speculative decoding llama.cpp gives drafted tokens a
probability of 1.0, its #27972); those with a draft follow in its failover order, as a last resort.
"""

from __future__ import annotations

import functools
import hashlib
import math
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MODES = ("prefix", "least-busy")
BLOCK_BYTES = 256  # a prompt's unit of matching: about 64 tokens of English
TABLE_BLOCKS = 65_536  # per model: 16 MB of prompt text, a few million tokens of KV cache
MIN_MATCH_SHARE = 0.5  # the share of a prompt's blocks a match must cover to decide


@dataclass(frozen=True)
class RoutingPolicy:
    """A model's routing settings: `mode` one of MODES; how many more requests in flight than the
    least busy upstream the one holding a prompt's prefix may have before the request goes elsewhere."""

    mode: str = "prefix"
    load_margin: int = 2


@dataclass(frozen=True)
class UpstreamLoad:
    """One upstream as the router sees it."""

    url: str
    healthy: bool
    in_flight: int
    drafts: bool = False  # it speculates with a draft model: its log probabilities are not exact


@dataclass(frozen=True)
class Route:
    """Where a request goes: `order` is every upstream, the choice first (the failover order);
    `reason` why the first: "prefix" (a hit), "session", "least-busy" or "overloaded" (and the pool's
    "failover" when the first did not start it, "restart" when it waited for a crashed model's
    restart, "only" when the model has one upstream)."""

    order: tuple[str, ...]
    reason: str

    @property
    def hit(self) -> bool:
        return self.reason == "prefix"


class Affinity:
    """What ties a request to an upstream: its prompt (text or token ids) and the client's session key."""

    def __init__(self, prompt: str | list[int] | None, session: str | None = None):
        self.prompt = prompt
        self.session = session or None

    @functools.cached_property
    def prompt_bytes(self) -> bytes:
        if isinstance(self.prompt, str):
            return self.prompt.encode("utf-8", "surrogatepass")
        return array("q", self.prompt or ()).tobytes()

    @functools.cached_property
    def digests(self) -> tuple[int, ...]:
        """The chained digest of each whole block: entry k stands for the prompt's first k + 1 blocks."""
        return prefix_digests(self.prompt_bytes)

    @functools.cached_property
    def spread_key(self) -> str:
        """What spreads prompts over equally idle upstreams: a digest of the whole prompt."""
        whole_blocks = len(self.digests) * BLOCK_BYTES
        return str(hash((self.digests[-1] if self.digests else 0, self.prompt_bytes[whole_blocks:])))


def prefix_digests(data: bytes, block: int = BLOCK_BYTES) -> tuple[int, ...]:
    # Python's own hash (SipHash, seeded per process and shared by forked workers) over a chained
    # tuple: 3-8x faster than hashlib per block, and a digest never leaves the process.
    digests = []
    digest = 0
    for start in range(0, len(data) - block + 1, block):
        digest = hash((digest, data[start : start + block]))
        digests.append(digest)
    return tuple(digests)


def session_key(*candidates: str | None) -> str | None:
    """The first key the client sent, in order of how closely it names one conversation."""
    return next((key for key in candidates if key), None)


def rendezvous(key: str, urls: Iterable[str]) -> list[str]:
    """`urls` ranked for `key` by highest random weight: the same order in every process and proxy
    instance, and taking one url away moves only the keys it ranked first."""
    return sorted(urls, key=lambda url: _weight(key, url), reverse=True)


def _weight(key: str, url: str) -> bytes:
    return hashlib.blake2b(f"{key}\n{url}".encode(), digest_size=8).digest()


class PrefixTable:
    """Digest of a prompt prefix -> the upstream that last answered a prompt starting with it, at most
    `capacity` entries; the least recently learned are forgotten first."""

    def __init__(self, capacity: int = TABLE_BLOCKS):
        self.capacity = capacity
        self.entries: OrderedDict[int, str] = OrderedDict()

    def longest_match(self, digests: Sequence[int], usable, least: int = 1) -> tuple[str | None, int]:
        """(upstream, blocks) of the longest prefix of at least `least` blocks whose upstream is in
        `usable`; (None, 0) when there is none."""
        for blocks in range(len(digests), max(least, 1) - 1, -1):
            url = self.entries.get(digests[blocks - 1])
            if url is not None and url in usable:
                return url, blocks
        return None, 0

    def learn(self, digests: Iterable[int], url: str) -> None:
        entries = self.entries
        for digest in digests:
            entries[digest] = url
            entries.move_to_end(digest)
        while len(entries) > self.capacity:
            entries.popitem(last=False)

    def forget(self, url: str) -> None:
        """Every prefix learned for `url` (a server gone down: its cache went with it)."""
        for digest in [digest for digest, holder in self.entries.items() if holder == url]:
            del self.entries[digest]


class Router:
    """One model's routing: `route` decides, `learn` records which upstream answered a prompt."""

    def __init__(self, policy: RoutingPolicy | None = None, table: PrefixTable | None = None):
        self.policy = policy or RoutingPolicy()
        self.table = table if table is not None else PrefixTable()

    def route(
        self, upstreams: Sequence[UpstreamLoad], affinity: Affinity | None = None, exact_probabilities: bool = False
    ) -> Route:
        """`exact_probabilities`: the request asks for log probabilities (wants_probabilities)."""
        plain = [u for u in upstreams if not u.drafts]
        if exact_probabilities and len(plain) < len(upstreams) and any(u.healthy for u in plain):
            chosen = self._route(plain, affinity)
            return Route((*chosen.order, *least_busy([u for u in upstreams if u.drafts])), chosen.reason)
        return self._route(upstreams, affinity)

    def _route(self, upstreams: Sequence[UpstreamLoad], affinity: Affinity | None) -> Route:
        healthy = {u.url: u for u in upstreams if u.healthy}
        if self.policy.mode != "prefix" or affinity is None or not healthy:
            return Route(least_busy(upstreams), "least-busy")
        fallback = least_busy(upstreams, spread=affinity.spread_key)
        preferred, reason = self._preferred(healthy, affinity)
        if preferred is None:
            return Route(fallback, "least-busy")
        if preferred.in_flight > min(u.in_flight for u in healthy.values()) + self.policy.load_margin:
            return Route(fallback, "overloaded")
        return Route((preferred.url, *(url for url in fallback if url != preferred.url)), reason)

    def _preferred(self, healthy: dict[str, UpstreamLoad], affinity: Affinity) -> tuple[UpstreamLoad | None, str]:
        digests = affinity.digests
        url, _ = self.table.longest_match(digests, healthy, math.ceil(len(digests) * MIN_MATCH_SHARE))
        if url is not None:
            return healthy[url], "prefix"
        if affinity.session:
            return healthy[rendezvous(affinity.session, healthy)[0]], "session"
        return None, "least-busy"

    def learn(self, affinity: Affinity | None, url: str) -> None:
        if self.policy.mode == "prefix" and affinity is not None:
            self.table.learn(affinity.digests, url)

    def forget(self, url: str) -> None:
        """What was learned of `url`: a request is never sent to it for a prefix it held before."""
        self.table.forget(url)


def wants_probabilities(body: dict) -> bool:
    """Whether a request asks for log probabilities: OpenAI's `logprobs` (chat: true; completions: a
    count) or `top_logprobs`, llama.cpp's `n_probs`."""

    def positive(key: str) -> bool:
        value = body.get(key)
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0

    logprobs = body.get("logprobs")
    return (
        positive("n_probs")
        or positive("top_logprobs")
        or logprobs is True
        or (isinstance(logprobs, int) and not isinstance(logprobs, bool) and logprobs >= 0)
    )


def least_busy(upstreams: Sequence[UpstreamLoad], spread: str | None = None) -> tuple[str, ...]:
    """Healthy upstreams before unhealthy ones, fewest in flight first; equals in the given order,
    or, with `spread`, in its rendezvous order (so new prompts do not all start on the first)."""
    rank = {url: n for n, url in enumerate(rendezvous(spread, (u.url for u in upstreams)))} if spread else {}
    ordered = sorted(upstreams, key=lambda u: (not u.healthy, u.in_flight, rank.get(u.url, 0)))
    return tuple(u.url for u in ordered)
