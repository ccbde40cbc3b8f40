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
from contextvars import ContextVar
from dataclasses import replace
from typing import TypeVar

from ..access.gate import current_ticket
from ..access.priority import Place, SlotQueue, current_priority, note_waiting
from ..errors import ProxyError, UpstreamUnavailable
from .events import GenerationEvent, PromptProgress
from .llamacpp import LlamaCppClient, RawAnswer
from .routing import Affinity, Route, Router, RoutingPolicy, UpstreamLoad, wants_probabilities

log = logging.getLogger("api_like_oai")

RETRY_AFTER_SECONDS = 5

# A request to a model the proxy starts itself: (its pool, renew), where renew(unreachable URLs) gives
# the lease back, has the supervisor check those replicas (restarting a crashed model) and returns the
# ready URLs once it is loaded again. Set per request by routes.hold_model; None for other models.
RENEWAL: ContextVar[tuple[UpstreamPool, Callable[[list[str]], list[str]]] | None] = ContextVar("renewal", default=None)

Answer = TypeVar("Answer")


class UpstreamPool:
    def __init__(self, clients: list[LlamaCppClient], health_interval: float = 2.0,
                 routing: RoutingPolicy | None = None, drafting: tuple[str, ...] = ()):
        self.clients = clients
        self.drafting = frozenset(drafting)   # the servers that speculate with a draft model
        self.router = Router(routing)
        self.health_interval = health_interval
        self.healthy = {client.base_url: True for client in clients}
        self.in_flight = {client.base_url: 0 for client in clients}
        self.slots: dict[str, int] = {}   # each server's slots (/props' total_slots), as UpstreamFacts reads them
        self.places = SlotQueue(on_wait=note_waiting)   # generations wait here for a slot, by priority
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
            route = self.router.route([UpstreamLoad(url, self.healthy[url], self.in_flight[url], url in self.drafting)
                                       for url in by_url], affinity, exact)
            if affinity is not None and route.order:
                # Learned at once, not only when it answers: the n choices of one request start together
                # and must meet the same server (generate learns again where a failover moved it).
                self.router.learn(affinity, route.order[0])
        return [by_url[url] for url in route.order], route

    def ask(self, call: Callable[[LlamaCppClient], Answer]) -> Answer:
        """`call(server)` for a request any server can answer (tokenize, /props, embeddings), on the
        first server that answers it: one that fails to is marked down and the next one is asked."""
        client, answer = self._first_to_start(lambda client, last: call(client), None, self.candidates())
        self._count(client, -1)
        return answer

    def generate(self, path: str, payload: dict, *, index: int = 0, on_chosen=None,
                 affinity: Affinity | None = None, on_routed=None, batched: bool = False) -> Iterator[GenerationEvent]:
        """The events of one generation, from the first server that starts it; `on_chosen(url)` says which,
        `on_routed(route)` why (its reason "failover" when the router's choice failed to start it);
        `batched` as LlamaCppClient.generate's (the tokens received together as one event, for a fold).
        `affinity` (the prompt, the client's session) routes the request, and the server that answers
        is learned as the holder of its prompt."""
        def start(client: LlamaCppClient, last: bool):
            events = client.generate(path, payload, index=index, batched=batched)
            return events, next(events, None)  # a connection that fails before any token is retried elsewhere

        ticket = current_ticket()   # the request's key: its token limits, its usage, its priority
        if ticket is not None:      # its prompt's tokens must fit what is left of them (a 429 if not)
            ticket.before_generation(prompt_bytes(payload.get("prompt")), lambda: self._prompt_tokens(payload))
        observe = ticket.observer() if ticket is not None else None
        place = self.places.take(self.slot_count(), current_priority())   # every slot busy: wait, by priority
        try:
            clients, route = self.route(affinity, bool(self.drafting) and wants_probabilities(payload))
            client, (events, first) = self._first_to_start(start, on_chosen, clients)
        except BaseException:
            place.release()
            raise
        if client is not clients[0]:  # route() learned its choice; a failover moved the prompt elsewhere
            with self._lock:
                self.router.learn(affinity, client.base_url)  # it has the prompt's prefix in its cache now
        if on_routed:
            on_routed(route if client is clients[0] else replace(route, reason="failover"))

        def elsewhere(lost: LlamaCppClient):
            rest = clients[clients.index(lost) + 1:]
            moved, started = self._first_to_start(start, on_chosen, rest)
            with self._lock:
                self.router.learn(affinity, moved.base_url)
            return moved, started

        return self._relay(client, first, events, elsewhere, place, observe)

    def _prompt_tokens(self, payload: dict) -> int:
        """The tokens of a generation's prompt, from a server's /tokenize (token ids are counted as they are)."""
        prompt = _prompt_of(payload.get("prompt"))
        if not isinstance(prompt, str):
            return len(prompt or ())
        counted = self.ask(lambda client: client.tokenize(prompt, add_special=True))
        return len(counted) + _media_tokens(payload.get("prompt"))

    def slot_count(self) -> int | None:
        """The slots of the healthy servers, None while any of them has not said how many it has."""
        healthy = [client.base_url for client in self.clients if self.healthy[client.base_url]]
        if not healthy or any(url not in self.slots for url in healthy):
            return None
        return sum(self.slots[url] for url in healthy)

    def relay(self, method: str, path: str, body: bytes | None = None, query: str = "", *,
              on_chosen=None) -> RawAnswer:
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
        client, answer = self._first_to_start(start, on_chosen, clients)
        answer.on_close(lambda: self._count(client, -1))
        return answer

    def _first_to_start(self, start, on_chosen, clients: list[LlamaCppClient]):
        """(server, start(server, whether it is the last candidate)) for the first of `clients` whose
        start does not raise UpstreamUnavailable; the server counts as in flight from its attempt on.
        For a started model whose replicas all failed so, once more on those the supervisor gives back
        (it restarts a model that crashed; the request waits for it as for any load)."""
        try:
            return self._first_of(start, on_chosen, clients)
        except UpstreamUnavailable:
            renewal = RENEWAL.get()
            if renewal is None or renewal[0] is not self:
                raise
        ready = set(renewal[1]([client.base_url for client in clients]))
        self.serve_only(list(ready))
        return self._first_of(start, on_chosen, [client for client in self.clients if client.base_url in ready])

    def _first_of(self, start, on_chosen, clients: list[LlamaCppClient]):
        failures = []
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

    def _relay(self, client: LlamaCppClient, first, events, elsewhere=None, place: Place | None = None,
               observe=None) -> Iterator[GenerationEvent]:
        """The events of `client`'s generation. A server lost while it is still reading the prompt (only
        prompt progress so far: nothing of the answer was given out) is left for the next one that
        starts it, `elsewhere(lost) -> (server, (events, first))`; the client sees the prefill begin again.
        `observe(event)`, if given, sees each event first (the key's usage, written as it arrives)."""
        reading = isinstance(first, PromptProgress)
        try:
            while True:
                try:
                    if first is not None:
                        if observe is not None:
                            observe(first)
                        yield first
                    for event in events:   # while the prompt is read, or each event when they are observed
                        reading = reading and isinstance(event, PromptProgress)
                        if observe is not None:
                            observe(event)
                        yield event
                        if not reading and observe is None:
                            break
                    yield from events   # the tokens, passed on by the interpreter without a loop here
                    return
                except UpstreamUnavailable:
                    if not reading or elsewhere is None:
                        raise
                    lost, client = client, None   # nothing held while the next one starts
                    events.close()
                    self._count(lost, -1)
                    self.mark(lost, healthy=False)
                    client, (events, first) = elsewhere(lost)
                    reading = isinstance(first, PromptProgress)
        finally:
            if client is not None:
                events.close()
                self._count(client, -1)
            if place is not None:
                place.release()

    def _count(self, client: LlamaCppClient, delta: int) -> None:
        with self._lock:
            self.in_flight[client.base_url] += delta

    # --- health -----------------------------------------------------------------------------

    def serve_only(self, urls: list[str]) -> None:
        """Of a started model's replicas, these are ready (the supervisor said so): the others are skipped."""
        ready = set(urls)
        with self._lock:   # not mark(): a replica unloaded by design is not "down", and with slot_save
            for client in self.clients:   # its routes lead to a cache restored when it is back
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


class AnyServer:
    """LlamaCppClient's requests that any server of a pool can answer, each sent with the pool's
    failover (`UpstreamPool.ask`): a dead server never fails a tokenize while another one is up."""

    def __init__(self, pool: UpstreamPool):
        self.pool = pool

    def tokenize(self, text: str, *, add_special: bool = False) -> list[int]:
        return self.pool.ask(lambda client: client.tokenize(text, add_special=add_special))

    def detokenize(self, tokens: list[int]) -> str:
        return self.pool.ask(lambda client: client.detokenize(tokens))

    def embeddings(self, inputs: list) -> list[list[float]]:
        return self.pool.ask(lambda client: client.embeddings(inputs))

    def rerank(self, body: dict) -> dict:
        return self.pool.ask(lambda client: client.rerank(body))

    def transcribe(self, form: bytes, content_type: str):
        return self.pool.ask(lambda client: client.transcribe(form, content_type))


def prompt_bytes(prompt) -> int:
    """A bound of a prompt's tokens without asking a server: its UTF-8 length (a token is at least a
    byte), or the number of token ids it is."""
    media = _media_tokens(prompt)
    prompt = _prompt_of(prompt)
    if isinstance(prompt, str):
        return len(prompt.encode()) + media
    return len(prompt) if isinstance(prompt, list) else 0


def _prompt_of(prompt):
    """A payload's prompt without its images: the text of a multimodal prompt (llama.cpp's object or
    prompts.media.MediaPrompt, whose placeholders the backend swaps for its markers), else the prompt as sent."""
    if isinstance(prompt, dict):
        return prompt.get("prompt_string", "")
    return getattr(prompt, "text", prompt)


def _media_tokens(prompt) -> int:
    """The tokens a MediaPrompt's images take beyond their placeholders' text (0 for any other prompt)."""
    return getattr(prompt, "media_tokens", 0)


def _asks_probabilities(body: bytes | None) -> bool:
    """wants_probabilities of a relayed JSON body (read only if it names one of the fields)."""
    if not body or b"probs" not in body:   # n_probs, logprobs, top_logprobs
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
