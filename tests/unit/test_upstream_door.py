"""The one door to the upstream (issue 41): the typed request's prompt bound counts what is sent (media
too), both kinds of upstream implement one interface, and a request's key metering, priority and lease
renewal wrap the upstream (services/door.Door) with the ticket given explicitly."""

from __future__ import annotations

import pytest

from api_like_oai.backends.events import GenerationEvent
from api_like_oai.backends.openai import OpenAIUpstream
from api_like_oai.backends.pool import UpstreamPool
from api_like_oai.backends.upstream import Capabilities, Upstream, UpstreamRequest
from api_like_oai.errors import InvalidRequest, RateLimited
from api_like_oai.prompts.media import MediaPrompt
from api_like_oai.services.door import Door

MEDIA = MediaPrompt("look: \x00image:" + "a" * 32 + "\x00", {"a" * 32: "aW1n"}, media_tokens=200)


def test_a_request_of_a_whole_body_takes_its_prompt_out_of_the_fields():
    request = UpstreamRequest.of("/completion", {"prompt": "hi", "stream": True})
    assert (request.fields, request.prompt, request.body()) == ({"stream": True}, "hi", {"stream": True, "prompt": "hi"})


@pytest.mark.parametrize(("prompt", "bound"), [("héllo", 6), ([1, 2, 3], 3), (None, 0), (MEDIA, len(MEDIA.text.encode()) + 200)])
def test_the_prompt_bound_counts_text_bytes_token_ids_and_media(prompt, bound):
    assert UpstreamRequest("/completion", prompt=prompt).prompt_bound() == bound


def test_a_media_prompt_is_the_requests_media_and_text():
    request = UpstreamRequest("/completion", prompt=MEDIA)
    assert request.media is MEDIA and request.prompt_text() == MEDIA.text and request.media_tokens() == 200
    assert UpstreamRequest("/completion", prompt="plain").media is None


@pytest.mark.parametrize(
    "upstream", [UpstreamPool([]), OpenAIUpstream("http://127.0.0.1:9/v1", name="remote"), Door(UpstreamPool([]))]
)
def test_every_upstream_implements_the_one_interface(upstream):
    assert isinstance(upstream, Upstream)  # a runtime-checked Protocol: every method and attribute is there


def test_what_an_upstream_cannot_do_is_a_400_not_a_crash():
    remote = OpenAIUpstream("http://127.0.0.1:9/v1", name="remote")
    assert remote.capabilities == Capabilities(renders_prompts=True, passes_through=True, speech=True)
    for call in (
        lambda: remote.tokenize("hi"),
        lambda: remote.relay("GET", "/props"),
        lambda: remote.generate(UpstreamRequest("/completion", prompt="hi")),
    ):
        with pytest.raises(InvalidRequest) as refused:
            call()
        assert refused.value.code == "not_supported"


class Recorded:
    """An upstream that answers one event and counts tokens as one per character."""

    capabilities = Capabilities(tokenize=True)

    def __init__(self):
        self.generated, self.renewals = [], []

    def generate(self, request, **options):
        self.generated.append(request)
        self.renewals.append(options.get("renew"))
        return iter([GenerationEvent(text="ok", completion_tokens=1, prompt_tokens=3)])

    def tokenize(self, text, *, add_special=False, renew=None):
        return list(text)

    def slot_count(self):
        return 1


class Ticket:
    """What the door asks of a key's ticket: the prompt's bound, then a count if the bound does not fit."""

    def __init__(self, left: int):
        self.left, self.asked, self.observed = left, [], []
        self.caller = type("Caller", (), {"priority": "normal"})()
        self.metrics = None

    def before_generation(self, bound: int, count):
        self.asked.append(bound)
        if bound > self.left:
            counted = count()
            self.asked.append(counted)
            if counted > self.left:
                raise RateLimited("over the key's tokens", retry_after="1", of_tokens=True)

    def observer(self):
        return self.observed.append


def test_the_door_counts_a_media_prompt_and_refuses_it_before_anything_is_sent():
    upstream, ticket = Recorded(), Ticket(left=150)
    door = Door(upstream, None, ticket)
    with pytest.raises(RateLimited):
        door.generate(UpstreamRequest("/completion", prompt=MEDIA))
    assert ticket.asked == [len(MEDIA.text.encode()) + 200, len(MEDIA.text) + 200]  # the count has the media too
    assert upstream.generated == []


def test_the_door_observes_the_events_and_passes_the_renewal_and_frees_its_slot():
    from api_like_oai.access.priority import SlotQueue

    upstream, ticket, places = Recorded(), Ticket(left=1000), SlotQueue()
    held = []  # the lease's renewal, held after the door opened (a streamed request's waiting step)
    door = Door(upstream, places, ticket, lambda: held[0] if held else None)
    held.append(object())
    events = list(door.generate(UpstreamRequest("/completion", prompt="hi")))
    assert ticket.observed == events and upstream.renewals == [held[0]]
    assert places.running == 0


def test_a_chat_request_the_upstream_renders_is_not_metered_by_a_prompt_it_does_not_carry():
    upstream, ticket = Recorded(), Ticket(left=0)
    list(Door(upstream, None, ticket).generate(UpstreamRequest("/chat/completions", {"messages": []})))
    assert ticket.asked == [] and ticket.observed == []
