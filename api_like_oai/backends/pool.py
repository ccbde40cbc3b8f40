"""UpstreamPool: several llama.cpp servers behind one model, each request sent where routing.Router
says (the server holding its prompt's prefix, else its session's, else the least busy one).

A background thread polls each server's /health; a server that refuses connections or answers
503 (loading the model) is skipped until it is healthy again. Every request to a server goes through
one failover loop (`_first_to_start`): generations, relayed native requests, and the requests any
server can answer (`ask`: tokenize, /props, embeddings). A server whose connection fails before any
answer arrived is marked down, the routes learned for it are forgotten, and the request is retried
on the next server. With none left: 503 + Retry-After, naming every server and why it failed.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TypeVar

from .. import sse
from ..errors import ProxyError, UpstreamUnavailable
from .events import PROMPT_READING, GenerationEvent, UpstreamWait
from .llamacpp import LlamaCppClient, RawAnswer, UpstreamProps
from .routing import Affinity, Route, Router, RoutingPolicy, UpstreamLoad, wants_probabilities
from .upstream import Capabilities, Renew, UpstreamRequest, not_supported

log = logging.getLogger("api_like_oai")

RETRY_AFTER_SECONDS = 5

Answer = TypeVar("Answer")


class UpstreamPool:
    """The llama.cpp servers of one model, as backends.upstream.Upstream: the proxy renders their prompts."""

    capabilities = Capabilities(tokenize=True, props=True, native_api=True, rerank=True, transcribe=True, metrics=True)

    def __init__(
        self,
        clients: list[LlamaCppClient],
        health_interval: float = 2.0,
        routing: RoutingPolicy | None = None,
        name: str = "",
        drafting: tuple[str, ...] = (),
    ):
        self.name = name
        self.clients = clients
        self.drafting = frozenset(drafting)  # the servers that speculate with a draft model
        self.router = Router(routing)
        self.health_interval = health_interval
        self.healthy = {client.base_url: True for client in clients}
        self.in_flight = {client.base_url: 0 for client in clients}
        self.slots: dict[str, int] = {}  # each server's slots (/props' total_slots), as UpstreamFacts reads them
        self._lock = threading.Lock()
        self._poller_pid: int | None = None

    # --- choosing ---------------------------------------------------------------------------

    def candidates(self, affinity: Affinity | None = None) -> list[LlamaCppClient]:
        """Every server, in the order to try them: the router's choice, then healthy servers, fewest
        requests in flight first; then the others, as a last resort."""
        return self.route(affinity)[0]

    def route(self, affinity: Affinity | None = None, exact: bool = False) -> tuple[list[LlamaCppClient], Route]:
        """`exact`: the request asks for log probabilities (servers without a draft first: routing.py)."""
        self._ensure_polling()
        if len(self.clients) == 1:
            # Nothing to choose: no prompt is hashed or learned (an agent's prompt is tens of kilobytes).
            return list(self.clients), Route((self.clients[0].base_url,), "only")
        if affinity is not None and self.router.policy.mode == "prefix":
            affinity.digests  # noqa: B018 - hashed before taking the lock
        by_url = {client.base_url: client for client in self.clients}
        with self._lock:
            route = self.router.route(
                [UpstreamLoad(url, self.healthy[url], self.in_flight[url], url in self.drafting) for url in by_url],
                affinity,
                exact,
            )
            if affinity is not None and route.order:
                # Learned at once, not only when it answers: the n choices of one request start together
                # and must meet the same server (generate learns again where a failover moved it).
                self.router.learn(affinity, route.order[0])
        return [by_url[url] for url in route.order], route

    def ask(self, call: Callable[[LlamaCppClient], Answer], renew: Renew | None = None) -> Answer:
        """`call(server)` for a request any server can answer (tokenize, /props, embeddings), on the
        first server that answers it: one that fails to is marked down and the next one is asked."""
        client, answer = self._first_to_start(lambda client, last: call(client), None, self.candidates(), renew)
        self._count(client, -1)
        return answer

    def generate(
        self,
        request: UpstreamRequest,
        *,
        index: int = 0,
        batched: bool = False,
        on_chosen=None,
        on_routed=None,
        renew: Renew | None = None,
    ) -> Iterator[GenerationEvent]:
        """The events of one generation, from the first server that starts it; `on_chosen(url)` says which,
        `on_routed(route)` why (its reason "failover" when the router's choice failed to start it);
        `batched` as LlamaCppClient.generate's (the tokens received together as one event, for a fold).
        The request's affinity (the prompt, the client's session) routes it, and the server that answers
        is learned as the holder of its prompt."""
        affinity, media = request.affinity, request.media
        payload = request.fields if media is not None else request.body()

        def start(client: LlamaCppClient, last: bool):
            events = client.generate(request.path, payload, index=index, batched=batched, media=media)
            return events, next(events, None)  # a connection that fails before any token is retried elsewhere

        clients, route = self.route(affinity, bool(self.drafting) and wants_probabilities(request.fields))
        try:
            started = self._first_of(start, on_chosen, clients)
        except UpstreamUnavailable:
            if renew is None:
                raise
            wait = renew([client.base_url for client in clients])
            return self._after_restart(wait, start, on_chosen, affinity, index, on_routed)
        if started[0] is not clients[0]:  # route() learned its choice; a failover moved the prompt elsewhere
            with self._lock:
                self.router.learn(affinity, started[0].base_url)  # it has the prompt's prefix in its cache now
        if on_routed:
            on_routed(route if started[0] is clients[0] else replace(route, reason="failover"))
        return self._relayed(started, clients, start, on_chosen, affinity, renew)

    def _relayed(
        self, started, clients: list[LlamaCppClient], start, on_chosen, affinity: Affinity | None, renew: Renew | None
    ) -> Iterator[GenerationEvent]:
        """The events of the generation `started` (server, (events, first)) on one of `clients`."""

        def elsewhere(lost: LlamaCppClient, why: str):
            rest = clients[clients.index(lost) + 1 :]
            moved, restarted = self._first_to_start(start, on_chosen, rest, renew, [why])
            with self._lock:
                self.router.learn(affinity, moved.base_url)
            return moved, restarted

        client, (events, first) = started
        return self._relay(client, first, events, elsewhere)

    def _after_restart(
        self, wait, start, on_chosen, affinity: Affinity | None, index: int = 0, on_routed=None
    ) -> Iterator[GenerationEvent]:
        """A generation whose replicas were all unreachable (a crash): UpstreamWait events while the
        supervisor restarts the model (a stream sends a keep-alive for each), then its events from the
        replicas it gives back, its route's reason "restart". The request's prompt, rendered once, is
        sent as it was."""
        ready = wait(0)  # not ready at once: a keep-alive at once, then one per interval
        while ready is None:
            yield UpstreamWait(index)
            ready = wait(sse.KEEPALIVE_SECONDS)
        self.serve_only(ready)
        clients = [client for client in self.clients if client.base_url in ready]
        started = self._first_of(start, on_chosen, clients)
        with self._lock:
            self.router.learn(affinity, started[0].base_url)
        if on_routed:
            on_routed(Route(tuple(client.base_url for client in clients), "restart"))
        yield from self._relayed(started, clients, start, on_chosen, affinity, None)

    def slot_count(self) -> int | None:
        """The slots of the healthy servers, None while any of them has not said how many it has."""
        healthy = [client.base_url for client in self.clients if self.healthy[client.base_url]]
        if not healthy or any(url not in self.slots for url in healthy):
            return None
        return sum(self.slots[url] for url in healthy)

    def relay(
        self, method: str, path: str, body: bytes | None = None, query: str = "", *, on_chosen=None, renew: Renew | None = None
    ) -> RawAnswer:
        """A request to llama.cpp's own API, passed on as it is to the first server that answers it:
        a refused connection or a 503 (loading) moves on to the next; the last one's 503 is the answer.
        The request counts as in flight on its server until the answer is closed."""

        def start(client: LlamaCppClient, last: bool) -> RawAnswer:
            answer = client.relay(method, path, body, query)
            if answer.status == 503 and not last:
                answer.close()
                raise UpstreamUnavailable(f"llama.cpp at {client.base_url} answered 503")
            return answer

        clients = self.route(exact=bool(self.drafting) and _asks_probabilities(body))[0]
        client, answer = self._first_to_start(start, on_chosen, clients, renew)
        answer.on_close(lambda: self._count(client, -1))
        return answer

    # --- the requests any server answers ----------------------------------------------------------

    def servers(self) -> list[LlamaCppClient]:
        return list(self.clients)

    def tokenize(self, text: str, *, add_special: bool = False, renew: Renew | None = None) -> list[int]:
        return self.ask(lambda client: client.tokenize(text, add_special=add_special), renew)

    def detokenize(self, tokens: list[int], *, renew: Renew | None = None) -> str:
        return self.ask(lambda client: client.detokenize(tokens), renew)

    def embeddings(self, inputs: list, *, renew: Renew | None = None) -> list[list[float]]:
        return self.ask(lambda client: client.embeddings(inputs), renew)

    def rerank(self, body: dict, *, renew: Renew | None = None) -> dict:
        return self.ask(lambda client: client.rerank(body), renew)

    def transcribe(self, form: bytes, content_type: str, *, renew: Renew | None = None):
        return self.ask(lambda client: client.transcribe(form, content_type), renew)

    def props(self) -> UpstreamProps:
        return self.ask(LlamaCppClient.props)

    def forward(self, path: str, body: dict, *, on_chosen=None):
        raise not_supported(self.name, "take OpenAI's requests as they are (the proxy renders llama.cpp's prompts)")

    def send(self, path: str, *, on_chosen=None, **request):
        raise not_supported(self.name, "speak (llama-server has no text to speech)")

    def listed(self) -> list[dict]:
        return [{"url": url, "healthy": healthy} for url, healthy in self.healthy.items()]

    def _first_to_start(
        self, start, on_chosen, clients: list[LlamaCppClient], renew: Renew | None = None, earlier: list[str] | None = None
    ):
        """(server, start(server, whether it is the last candidate)) for the first of `clients` whose
        start does not raise UpstreamUnavailable; the server counts as in flight from its attempt on.
        For a started model whose replicas all failed so, once more on those the supervisor gives back
        (it restarts a model that crashed; the request waits for it as for any load). `earlier`: the
        failures before these (a server lost while it read the prompt), named in the error too."""
        try:
            return self._first_of(start, on_chosen, clients, earlier)
        except UpstreamUnavailable:
            if renew is None:
                raise
        ready = set(renew([client.base_url for client in clients])(None))
        self.serve_only(list(ready))
        return self._first_of(start, on_chosen, [client for client in self.clients if client.base_url in ready])

    def _first_of(self, start, on_chosen, clients: list[LlamaCppClient], earlier: list[str] | None = None):
        failures = list(earlier or ())
        for position, client in enumerate(clients):
            if on_chosen:
                on_chosen(client.base_url)
            self._count(client, +1)
            try:
                return client, start(client, position == len(clients) - 1)
            except UpstreamUnavailable as exc:
                self._count(client, -1)
                self.mark(client, healthy=False)
                failures.append(exc.message)
            except BaseException:
                self._count(client, -1)
                raise
        raise _none_left(failures)

    def _relay(self, client: LlamaCppClient, first, events, elsewhere=None) -> Iterator[GenerationEvent]:
        """The events of `client`'s generation. A server lost while it is still reading the prompt (only
        its acceptance and prompt progress so far: nothing of the answer was given out) is left for the next one that
        starts it, `elsewhere(lost, why) -> (server, (events, first))`; the client sees the prefill begin again."""
        reading = isinstance(first, PROMPT_READING)
        try:
            while True:
                try:
                    if first is not None:
                        yield first
                    for event in events:  # while the prompt is read
                        reading = reading and isinstance(event, PROMPT_READING)
                        yield event
                        if not reading:
                            break
                    yield from events  # the tokens, passed on by the interpreter without a loop here
                    return
                except UpstreamUnavailable as loss:
                    if not reading or elsewhere is None:
                        raise
                    lost, client = client, None  # nothing held while the next one starts
                    events.close()
                    self._count(lost, -1)
                    self.mark(lost, healthy=False)
                    client, (events, first) = elsewhere(lost, loss.message)
                    reading = isinstance(first, PROMPT_READING)
        finally:
            if client is not None:
                events.close()
                self._count(client, -1)

    def _count(self, client: LlamaCppClient, delta: int) -> None:
        with self._lock:
            self.in_flight[client.base_url] += delta

    # --- health -----------------------------------------------------------------------------

    def serve_only(self, urls: list[str]) -> None:
        """Of a started model's replicas, these are ready (the supervisor said so): the others are skipped."""
        ready = set(urls)
        with self._lock:  # not mark(): a replica unloaded by design is not "down", and with slot_save
            for client in self.clients:  # its routes lead to a cache restored when it is back
                self.healthy[client.base_url] = client.base_url in ready

    def mark(self, client: LlamaCppClient, *, healthy: bool) -> None:
        """Record a server's health. One going down loses the prompts it held: the routes to it are
        forgotten, so that the prompts it served settle on the servers that answer them now."""
        with self._lock:
            changed = self.healthy[client.base_url] != healthy
            self.healthy[client.base_url] = healthy
            if changed and not healthy:
                self.router.forget(client.base_url)
        if changed:
            log.warning("upstream %s is %s", client.base_url, "healthy again" if healthy else "down")

    def check(self) -> dict[str, str]:
        """Each server's state now ("ok" or why not), polling them all once."""
        states = {}
        for client in self.clients:
            try:
                client.health()
                states[client.base_url] = "ok"
            except ProxyError as exc:
                states[client.base_url] = exc.message
            self.mark(client, healthy=states[client.base_url] == "ok")
        return states

    def _ensure_polling(self) -> None:
        # Started lazily, once per process: gunicorn forks workers after the app is built.
        if len(self.clients) < 2 or self._poller_pid == os.getpid():
            return
        with self._lock:
            if self._poller_pid == os.getpid():
                return
            self._poller_pid = os.getpid()
        threading.Thread(target=self._poll, name="upstream-health", daemon=True).start()

    def _poll(self) -> None:
        stop = threading.Event()
        while not stop.wait(self.health_interval):
            self.check()


def _asks_probabilities(body: bytes | None) -> bool:
    """wants_probabilities of a relayed JSON body (read only if it names one of the fields)."""
    if not body or b"probs" not in body:  # n_probs, logprobs, top_logprobs
        return False
    try:
        fields = json.loads(body)
    except ValueError:
        return False
    return isinstance(fields, dict) and wants_probabilities(fields)


def _none_left(failures: list[str]) -> UpstreamUnavailable:
    error = UpstreamUnavailable("no upstream is available: " + "; ".join(failures))
    error.headers = {"Retry-After": str(RETRY_AFTER_SECONDS)}
    return error
