"""A model's upstream as one request goes through it (`Door`): the request's key metering and priority
wrapped around the upstream, its lease's renewal passed on, all given explicitly by the route that
admitted the request rather than read from context variables inside the pool.

- **Metering**: before each generation whose prompt the proxy wrote, its tokens must fit what is left of
  the key's token limits and are reserved (`Ticket.before_generation`): the prompt's bound (its bytes
  and its media's tokens) first, a /tokenize count (plus the media) only when that does not fit; a
  refusal is a 429 before anything is sent. The generation's events are then observed, so llama.cpp's
  counts are written as they arrive. A chat request an upstream renders itself carries no prompt here:
  its usage is counted from the upstream's answer, as before.
- **Priority**: every slot of the model's servers busy, a generation waits for one in its key's priority
  order (`access.priority.SlotQueue`, one per model); a background one (a batch's line) that a waiter
  preempts is stopped at once, once its answer began: its exchanges with the upstream (registered
  through `backends.http.OPENED`) are hung up, so its read fails now rather than at its next token, and
  that failure (or, still reading its prompt, its next event) ends it with `Preempted`, freeing its slot.
- **Renewal**: a model the proxy starts, none of whose replicas answered, is renewed once (the lease).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ..access.gate import Ticket
from ..access.keys import NORMAL
from ..access.priority import Place, SlotQueue, capped
from ..backends.events import BEFORE_ANSWER, GenerationEvent
from ..backends.http import OPENED
from ..backends.upstream import Capabilities, Renew, Upstream, UpstreamRequest
from ..errors import Preempted, ProxyError

PREEMPTED = "stopped for an interactive request; the batch runs this line again"


class Door:
    """`upstream` for one request: `ticket` its key (None without keys), `places` the model's slot queue,
    `renewal()` its lease's renewal (None for a model the proxy does not start), `asked()` the priority
    the request asked for (None: its key's). Implements Upstream."""

    def __init__(
        self,
        upstream: Upstream,
        places: SlotQueue | None = None,
        ticket: Ticket | None = None,
        renewal: Callable[[], Renew | None] = lambda: None,
        asked: Callable[[], str | None] = lambda: None,
    ):
        self.upstream, self.places, self.ticket, self.renewal = upstream, places, ticket, renewal
        self.asked = asked  # the priority the request asked for (access.priority.asked), read when it waits

    @property
    def renew(self) -> Renew | None:
        """The lease's renewal as it is now: a streamed request's lease is held after its door opened."""
        return self.renewal()

    @property
    def capabilities(self) -> Capabilities:
        return self.upstream.capabilities

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
        ticket = self.ticket
        observe = None
        if ticket is not None and request.prompt is not None:
            ticket.before_generation(request.prompt_bound(), lambda: self.prompt_tokens(request))
            observe = ticket.observer()
        place = self._place()
        preemptible = place is not None and place.preempted is not None
        opening = OPENED.set(place.opened) if preemptible else None  # its exchanges, to hang up if preempted
        try:
            events = self.upstream.generate(
                request, index=index, batched=batched, on_chosen=on_chosen, on_routed=on_routed, renew=renew or self.renew
            )
        except BaseException:
            if place is not None:
                place.release()
            raise
        finally:
            if opening is not None:
                OPENED.reset(opening)
        if observe is None and place is None:
            return events
        return _watched(events, observe, place)

    def prompt_tokens(self, request: UpstreamRequest) -> int:
        """The tokens of a request's prompt: token ids as they are, text by /tokenize, media as they count."""
        if isinstance(request.prompt, list):
            return len(request.prompt)
        counted = self.tokenize(request.prompt_text() or "", add_special=True)
        return len(counted) + request.media_tokens()

    def _place(self) -> Place | None:
        """A slot for one generation, waiting by priority while all are busy; None for an upstream whose
        slots are not the proxy's to count."""
        if self.places is None:
            return None
        priority = capped(self.asked(), self.ticket.caller.priority if self.ticket is not None else NORMAL)
        metered = self.ticket is not None and self.ticket.metrics is not None
        return self.places.take(self.upstream.slot_count(), priority, on_wait=self._note_waiting if metered else None)

    def _note_waiting(self, priority: str, delta: int) -> None:
        """/metrics' requests waiting for a slot, by priority."""
        metrics = self.ticket.metrics if self.ticket is not None else None
        if metrics is not None:
            metrics.slot_waiting.labels(priority).inc(delta)

    # --- the rest of the interface, with the request's renewal ----------------------------------------

    def servers(self) -> list:
        return self.upstream.servers()

    def tokenize(self, text: str, *, add_special: bool = False, renew: Renew | None = None) -> list[int]:
        return self.upstream.tokenize(text, add_special=add_special, renew=renew or self.renew)

    def detokenize(self, tokens: list[int], *, renew: Renew | None = None) -> str:
        return self.upstream.detokenize(tokens, renew=renew or self.renew)

    def embeddings(self, inputs: list, *, renew: Renew | None = None) -> list[list[float]]:
        return self.upstream.embeddings(inputs, renew=renew or self.renew)

    def rerank(self, body: dict, *, renew: Renew | None = None) -> dict:
        return self.upstream.rerank(body, renew=renew or self.renew)

    def transcribe(self, form: bytes, content_type: str, *, renew: Renew | None = None):
        return self.upstream.transcribe(form, content_type, renew=renew or self.renew)

    def relay(
        self, method: str, path: str, body: bytes | None = None, query: str = "", *, on_chosen=None, renew: Renew | None = None
    ):
        return self.upstream.relay(method, path, body, query, on_chosen=on_chosen, renew=renew or self.renew)

    def forward(self, path: str, body: dict, *, on_chosen=None):
        return self.upstream.forward(path, body, on_chosen=on_chosen)

    def send(self, path: str, *, on_chosen=None, **request):
        return self.upstream.send(path, on_chosen=on_chosen, **request)

    def props(self):
        return self.upstream.props()

    def check(self) -> dict[str, str]:
        return self.upstream.check()

    def listed(self) -> list[dict]:
        return self.upstream.listed()

    def serve_only(self, urls: list[str]) -> None:
        self.upstream.serve_only(urls)

    def slot_count(self) -> int | None:
        return self.upstream.slot_count()


def _watched(events: Iterator[GenerationEvent], observe, place: Place | None) -> Iterator[GenerationEvent]:
    """`events`, each shown to `observe` first (the key's usage, written as it arrives), the slot `place`
    released when they end or are closed, and told when its answer begins (its first event that is not a
    wait: a token, or the end); a background place preempted ends them with Preempted."""
    preempted = place.preempted if place is not None else None
    try:
        if observe is None and place is None:
            yield from events
        else:
            for event in events:
                if preempted is not None and preempted.is_set():
                    raise Preempted(PREEMPTED)
                began = place is not None and not place.answering and not isinstance(event, BEFORE_ANSWER)
                if began and preempted is not None:
                    place.answer_began()
                if observe is not None:
                    observe(event)
                yield event
                if began and preempted is None:
                    place.answer_began()  # once its first token is passed on: the lines held for it go on
    except ProxyError:
        if preempted is not None and preempted.is_set():
            raise Preempted(PREEMPTED) from None  # its exchange hung up: the upstream's read failed
        raise
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()
        if place is not None:
            place.release()
