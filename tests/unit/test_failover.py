"""Failover as properties: whatever the routing reason, the health the pool believes in and the
servers that are really up, a route names a healthy upstream first, and a request any live server
can answer is answered (a dead server is marked down and its routes forgotten); a 503 only when
every server failed, naming them all. The servers are stubs: this is the pool's logic, no I/O."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from api_like_oai.backends.events import GenerationEvent
from api_like_oai.backends.pool import UpstreamPool
from api_like_oai.backends.routing import Affinity, Router, RoutingPolicy, UpstreamLoad
from api_like_oai.backends.upstream import UpstreamRequest
from api_like_oai.errors import UpstreamUnavailable

URLS = ("http://a:1", "http://b:2", "http://c:3")
PROMPTS = tuple(f"conversation {n}: " + "the ship sails north by the coast. " * 30 for n in range(3))
SESSIONS = (None, "alpha", "beta")


# --- the pure router, driven through random health flips and overlapping choices -------------------


class RouterUnderFlips(RuleBasedStateMachine):
    """Choices overlap as concurrent requests do (each holds its upstream until it finishes), health
    flips between any two of them, and the pool's reactions (learn the choice, forget a dead
    upstream's routes) are applied as the pool applies them."""

    @initialize(mode=st.sampled_from(("prefix", "least-busy")), margin=st.integers(0, 3))
    def start(self, mode, margin):
        self.router = Router(RoutingPolicy(mode=mode, load_margin=margin))
        self.healthy = dict.fromkeys(URLS, True)
        self.in_flight = dict.fromkeys(URLS, 0)
        self.open: list[str] = []

    @rule(url=st.sampled_from(URLS))
    def flip(self, url):
        self.healthy[url] = not self.healthy[url]
        if not self.healthy[url]:
            self.router.forget(url)
            assert url not in self.router.table.entries.values()

    @rule(prompt=st.sampled_from(PROMPTS), extra=st.integers(0, 3), session=st.sampled_from(SESSIONS))
    def choose(self, prompt, extra, session):
        affinity = Affinity(prompt + " and more" * extra * 40, session)
        loads = [UpstreamLoad(url, self.healthy[url], self.in_flight[url]) for url in URLS]
        order = self.router.route(loads, affinity).order
        assert sorted(order) == sorted(URLS)
        healthy_count = sum(self.healthy.values())
        assert all(self.healthy[url] for url in order[:healthy_count]), (self.healthy, order)
        self.router.learn(affinity, order[0])
        self.in_flight[order[0]] += 1
        self.open.append(order[0])

    @precondition(lambda self: self.open)
    @rule(which=st.integers(0, 1000))
    def finish(self, which):
        self.in_flight[self.open.pop(which % len(self.open))] -= 1


TestRouterUnderFlips = RouterUnderFlips.TestCase
TestRouterUnderFlips.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


# --- the pool, with servers that are up or down whatever the pool believes ------------------------


class StubServer:
    """A llama.cpp server as the pool sees it: up, or refusing (at once, or at its first event, as a
    connection lost before any token is)."""

    def __init__(self, url: str, up: bool, fails_late: bool):
        self.base_url, self.up, self.fails_late = url, up, fails_late
        self.lock = threading.Lock()

    def _refuse(self):
        raise UpstreamUnavailable(f"llama.cpp at {self.base_url} is unreachable (ConnectionRefusedError)")

    def generate(self, path, payload, *, index=0, batched=False, media=None):
        if not self.up and not self.fails_late:
            self._refuse()
        return self._events(index)

    def _events(self, index):
        if not self.up:
            self._refuse()
        yield GenerationEvent(text=self.base_url, index=index)
        yield GenerationEvent(finish_reason="stop", index=index)

    def tokenize(self, text, *, add_special=False):
        if not self.up:
            self._refuse()
        return [len(self.base_url)]

    def health(self):
        if not self.up:
            self._refuse()
        return {"status": "ok"}


def answer_of(pool: UpstreamPool, request: tuple[str, int, int | None]) -> str:
    """The URL of the server that answered `request` (kind, prompt, session)."""
    kind, prompt, session = request
    if kind == "tokenize":
        served = []
        pool.ask(lambda client: served.append(client.base_url) or client.tokenize(PROMPTS[prompt]))
        return served[-1]
    affinity = Affinity(PROMPTS[prompt], None if session is None else SESSIONS[session])
    return "".join(event.text for event in pool.generate(UpstreamRequest("/completion", {"stream": True}, affinity=affinity)))


REQUESTS = st.lists(
    st.tuples(st.sampled_from(("generate", "tokenize")), st.integers(0, 2), st.one_of(st.none(), st.integers(1, 2))),
    min_size=1,
    max_size=12,
)


@settings(max_examples=80, deadline=None)
@given(
    up=st.lists(st.booleans(), min_size=3, max_size=3).filter(any),
    believed=st.lists(st.booleans(), min_size=3, max_size=3),
    fails_late=st.lists(st.booleans(), min_size=3, max_size=3),
    requests=REQUESTS,
    mode=st.sampled_from(("prefix", "least-busy")),
)
def test_with_one_server_up_every_request_is_answered_by_a_live_one(up, believed, fails_late, requests, mode):
    servers = [StubServer(url, *flags) for url, *flags in zip(URLS, up, fails_late, strict=True)]
    pool = UpstreamPool(servers, health_interval=3600, routing=RoutingPolicy(mode=mode))
    pool.healthy = dict(zip(URLS, believed, strict=True))  # what the last health check said, maybe stale
    with ThreadPoolExecutor(8) as executor:
        answered = list(executor.map(lambda request: answer_of(pool, request), requests))
    live = {server.base_url for server in servers if server.up}
    assert set(answered) <= live
    assert pool.in_flight == dict.fromkeys(URLS, 0)
    tried_dead = [server.base_url for server in servers if not server.up and not pool.healthy[server.base_url]]
    assert not set(pool.router.table.entries.values()) & set(tried_dead)


def test_a_dead_server_is_marked_down_and_forgotten_and_comes_back_with_its_health_check():
    servers = [StubServer(URLS[0], True, False), StubServer(URLS[1], True, False)]
    pool = UpstreamPool(servers, health_interval=3600)
    affinity = Affinity(PROMPTS[0])
    first = "".join(event.text for event in pool.generate(UpstreamRequest("/completion", affinity=affinity)))
    holder = next(server for server in servers if server.base_url == first)
    pool.router.learn(Affinity(PROMPTS[1]), first)  # another conversation it held
    holder.up = False
    moved = "".join(event.text for event in pool.generate(UpstreamRequest("/completion", affinity=affinity)))
    assert moved != first and pool.healthy[first] is False
    assert set(pool.router.table.entries.values()) == {moved}  # the other conversation's route too
    assert pool.candidates(affinity)[-1] is holder  # skipped until its health check passes
    holder.up = True
    assert pool.check() == dict.fromkeys(URLS[:2], "ok") and pool.healthy[first] is True


@pytest.mark.parametrize("fails_late", [False, True])
def test_with_every_server_down_the_503_names_them_all(fails_late):
    pool = UpstreamPool([StubServer(url, False, fails_late) for url in URLS], health_interval=3600)
    for call in (
        lambda: pool.generate(UpstreamRequest("/completion", affinity=Affinity(PROMPTS[0], "alpha"))),
        lambda: pool.tokenize("hi"),
    ):
        with pytest.raises(UpstreamUnavailable) as caught:
            call()
        assert all(url in caught.value.message for url in URLS) and caught.value.headers == {"Retry-After": "5"}
    assert pool.in_flight == dict.fromkeys(URLS, 0)
