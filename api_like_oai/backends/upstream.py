"""The one door to a model's upstream: what goes up (`UpstreamRequest`), what an upstream can do
(`Capabilities`) and the interface every kind implements (`Upstream`): a pool of llama.cpp servers
(pool.UpstreamPool) or an OpenAI-compatible server (openai.OpenAIUpstream). Callers ask what an
upstream can do, never which kind it is; the kind is read once, where the upstream is built.

A request's prompt is typed: text, token ids, or `Media` (text with placeholders and the media they
stand for, which the backend writes with its own server's marker), so the key's token limits count the
same prompt that is sent (`prompt_bound`), whatever it holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..errors import InvalidRequest
from .media import Media
from .routing import Affinity

if TYPE_CHECKING:
    from .events import GenerationEvent
    from .llamacpp import RawAnswer, UpstreamProps

# A request for a model the proxy starts: renew(unreachable URLs) gives its lease back and has the
# supervisor check those replicas (restarting a crashed model); it returns wait(timeout): the ready URLs
# once the model is loaded again, None while `timeout` seconds pass first (None: no limit); raises the
# refusal's API error.
Renew = Callable[[list[str]], Callable[[float | None], list[str] | None]]


Prompt = str | list[int] | Media


@dataclass(frozen=True)
class UpstreamRequest:
    """One generation as it goes up: the upstream's path, the body's other fields, the prompt (None when
    the upstream renders it: a chat request sent whole), and what routes it (the prompt's prefix, the
    client's session)."""

    path: str
    fields: Mapping = field(default_factory=dict)
    prompt: Prompt | None = None
    affinity: Affinity | None = None

    @classmethod
    def of(cls, path: str, body: Mapping, affinity: Affinity | None = None) -> UpstreamRequest:
        """A request from a whole body (its `prompt` taken out of the fields)."""
        fields = {key: value for key, value in body.items() if key != "prompt"}
        return cls(path, fields, body.get("prompt"), affinity)

    @property
    def media(self) -> Media | None:
        # Told apart by what the prompt is not: isinstance against a runtime-checkable Protocol walks the
        # protocol's members on every call (~8 µs each, twice a request: 2% of a request's CPU).
        prompt = self.prompt
        return None if prompt is None or isinstance(prompt, (str, list)) else prompt

    def body(self) -> dict:
        """The JSON body for a prompt without media (with media, the backend writes the prompt object)."""
        return dict(self.fields) if self.prompt is None else {**self.fields, "prompt": self.prompt}

    def prompt_text(self) -> str | None:
        """The prompt's text (a media prompt's with its placeholders); None for token ids or no prompt."""
        prompt = self.prompt
        if isinstance(prompt, str):
            return prompt
        media = self.media
        return media.text if media is not None else None

    def prompt_bound(self) -> int:
        """A bound of the prompt's tokens without asking a server: its UTF-8 length (a token is at least a
        byte) and its media's tokens, or the number of token ids it is; 0 without a prompt."""
        prompt = self.prompt
        if isinstance(prompt, list):
            return len(prompt)
        text = self.prompt_text()
        return 0 if text is None else len(text.encode()) + self.media_tokens()

    def media_tokens(self) -> int:
        media = self.media
        return media.media_tokens if media is not None else 0


@dataclass(frozen=True)
class Capabilities:
    """What an upstream does, asked by the callers instead of its kind."""

    renders_prompts: bool = False  # renders chats and parses tool calls itself: chat requests go up whole
    passes_through: bool = False  # takes OpenAI's own requests as the client sent them (completions, embeddings, audio)
    tokenize: bool = False  # /tokenize and /detokenize: the proxy counts and fits prompts
    props: bool = False  # /props: chat template, context length, slots, modalities, sampling defaults
    native_api: bool = False  # llama.cpp's own API (/completion, /infill, /props ...), relayed as sent
    rerank: bool = False  # llama-server's /v1/rerank, given the proxy's body
    transcribe: bool = False  # llama-server's /v1/audio/transcriptions, given the proxy's form
    speech: bool = False  # text to speech (passed through)
    metrics: bool = False  # each server's Prometheus /metrics


@runtime_checkable
class Upstream(Protocol):
    """A model's upstream. Calls its capabilities say it lacks raise `not_supported` (a 400). `renew`, where
    taken, is the request's lease renewal (a model the proxy starts): asked once when no server answered."""

    capabilities: Capabilities

    def servers(self) -> list:
        """Its servers (each with a `base_url`), for health, the dashboard and /metrics."""

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
        """The events of one generation; the request is sent (and its first event received) before this returns."""

    def tokenize(self, text: str, *, add_special: bool = False, renew: Renew | None = None) -> list[int]: ...

    def detokenize(self, tokens: list[int], *, renew: Renew | None = None) -> str: ...

    def embeddings(self, inputs: list, *, renew: Renew | None = None) -> list[list[float]]: ...

    def rerank(self, body: dict, *, renew: Renew | None = None) -> dict: ...

    def transcribe(self, form: bytes, content_type: str, *, renew: Renew | None = None): ...

    def relay(
        self, method: str, path: str, body: bytes | None = None, query: str = "", *, on_chosen=None, renew: Renew | None = None
    ) -> RawAnswer:
        """llama.cpp's own API, passed on as it is."""

    def forward(self, path: str, body: dict, *, on_chosen=None):
        """An OpenAI request passed through as sent (a requests.Response, streamed when body["stream"])."""

    def send(self, path: str, *, on_chosen=None, **request):
        """An OpenAI request with requests' own arguments (a multipart form), streamed."""

    def props(self) -> UpstreamProps: ...

    def check(self) -> dict[str, str]:
        """Each server's state now: "ok" or why not."""

    def listed(self) -> list[dict]:
        """Its servers as /v1/internal/model/info lists them."""

    def serve_only(self, urls: list[str]) -> None:
        """Of a started model's servers, only these are ready (the supervisor said so)."""

    def slot_count(self) -> int | None:
        """The generations its servers run at once, None while not known."""


def not_supported(name: str, what: str) -> InvalidRequest:
    """The 400 of a call an upstream's capabilities say it cannot take."""
    return InvalidRequest(f"model {name!r} is served by an upstream which cannot {what}", param="model", code="not_supported")
