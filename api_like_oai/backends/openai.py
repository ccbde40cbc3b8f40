"""OpenAIUpstream: any OpenAI-compatible server (vLLM, a remote llama-server's /v1), passed through.

Chat and completions requests in OpenAI's own API are relayed as they are. Requests in the other
APIs (Anthropic's Messages, the Responses API) become chat requests, streamed from the upstream,
and its chat chunks become the proxy's GenerationEvents (`chat_events`), which the APIs' shapes
write exactly as they write llama.cpp's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import orjson

from ..errors import InvalidRequest, ModelNotFound, ProxyError, UpstreamError, UpstreamTimeout, UpstreamUnavailable
from ..tools.parser import ToolCallDelta, new_call_id
from .events import GenerationEvent
from .upstream import Capabilities, Renew, UpstreamRequest, not_supported

if TYPE_CHECKING:
    import requests


class OpenAIUpstream:
    """Forwards request bodies to `base_url` (which ends in /v1) and relays the answers unchanged; as
    backends.upstream.Upstream, it renders its own prompts and has no tokenizer, /props or native API."""

    capabilities = Capabilities(renders_prompts=True, passes_through=True, speech=True)

    def __init__(self, base_url: str, *, connect_timeout: float = 5.0, read_timeout: float = 600.0, name: str = ""):
        self.name = name
        self.base_url = base_url.rstrip("/")
        self.timeouts = (connect_timeout, read_timeout)
        import requests  # here: only configs with an "openai" upstream pay for loading it (~5 MB per worker)

        self.session = requests.Session()

    def forward(self, path: str, body: dict, *, on_chosen=None) -> requests.Response:
        """The upstream's response to POST `path` (streamed when body["stream"]); errors mapped to ours."""
        if on_chosen is not None:
            on_chosen(self.base_url)
        return self._send("POST", path, json=body, stream=bool(body.get("stream")))

    def send(self, path: str, *, on_chosen=None, **kwargs) -> requests.Response:
        """The upstream's response to POST `path` with requests' own arguments (a multipart form: `data`,
        `files`), streamed; errors mapped to ours."""
        if on_chosen is not None:
            on_chosen(self.base_url)
        return self._send("POST", path, stream=True, **kwargs)

    def health(self) -> None:
        self._send("GET", "/models").close()

    def check(self) -> dict[str, str]:
        try:
            self.health()
            return {self.base_url: "ok"}
        except ProxyError as exc:
            return {self.base_url: exc.message}

    def servers(self) -> list[OpenAIUpstream]:
        return [self]

    def listed(self) -> list[dict]:
        return [{"url": self.base_url}]

    def serve_only(self, urls: list[str]) -> None:
        """Nothing to do: the proxy starts no OpenAI-compatible server."""

    def slot_count(self) -> int | None:
        return None

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
        """The events of a chat request (`request.fields`, the body: the upstream renders it); the request is
        sent before this returns, so a refusal raises here, before any event."""
        if request.path != "/chat/completions" or request.prompt is not None:
            raise not_supported(self.name, "take a prompt the proxy rendered (it renders chats itself)")
        response = self.forward(request.path, dict(request.fields), on_chosen=on_chosen)
        return self._events(response)

    # What only llama.cpp has: the callers ask the capabilities first; these are the 400 if one did not.
    def tokenize(self, text: str, *, add_special: bool = False, renew: Renew | None = None) -> list[int]:
        raise not_supported(self.name, "tokenize text (it has no tokenizer endpoint)")

    def detokenize(self, tokens: list[int], *, renew: Renew | None = None) -> str:
        raise not_supported(self.name, "turn tokens into text (it has no tokenizer endpoint)")

    def embeddings(self, inputs: list, *, renew: Renew | None = None) -> list[list[float]]:
        raise not_supported(self.name, "embed through llama.cpp's /embedding; /v1/embeddings passes through")

    def rerank(self, body: dict, *, renew: Renew | None = None) -> dict:
        raise not_supported(self.name, "rerank through llama.cpp's /v1/rerank; /v1/rerank passes through")

    def transcribe(self, form: bytes, content_type: str, *, renew: Renew | None = None):
        raise not_supported(self.name, "transcribe through llama.cpp; /v1/audio passes through")

    def relay(
        self, method: str, path: str, body: bytes | None = None, query: str = "", *, on_chosen=None, renew: Renew | None = None
    ):
        raise not_supported(self.name, f"answer llama.cpp's own API ({path}); use the /v1 endpoints")

    def props(self):
        raise not_supported(self.name, "tell its chat template and context (it has no /props)")

    def _events(self, response: requests.Response) -> Iterator[GenerationEvent]:
        try:
            yield from chat_events(self._chunks(response))
        finally:
            response.close()  # also when the client went away: the upstream sees the connection drop

    def _chunks(self, response: requests.Response) -> Iterator[dict]:
        import requests

        try:
            yield from stream_chunks(sse_data(response.iter_content(chunk_size=None)), self.base_url)
        except requests.exceptions.Timeout as exc:
            raise UpstreamTimeout(f"{self.base_url} stopped sending for {self.timeouts[1]:g}s") from exc
        except requests.exceptions.RequestException as exc:
            raise UpstreamUnavailable(f"lost the connection to {self.base_url} in the middle of a generation") from exc

    def _send(self, method: str, path: str, **kwargs) -> requests.Response:
        import requests

        try:
            response = self.session.request(method, self.base_url + path, timeout=self.timeouts, **kwargs)
        except requests.exceptions.ConnectTimeout as exc:
            raise UpstreamUnavailable(f"{self.base_url} did not accept the connection in time") from exc
        except requests.exceptions.Timeout as exc:
            raise UpstreamTimeout(f"{self.base_url} did not answer in time") from exc
        except requests.exceptions.RequestException as exc:
            raise UpstreamUnavailable(f"{self.base_url} is unreachable ({type(exc).__name__})") from exc
        if response.status_code >= 400:
            with response:
                raise _error_from(response, self.base_url)
        return response


def relay(response: requests.Response, on_lost=None) -> Iterator[bytes]:
    """The upstream's stream, byte for byte, closing it when the client goes away; a connection lost in
    the middle ends it with an error event, `on_lost()` told first."""
    import requests

    try:
        yield from response.iter_content(chunk_size=None)
    except requests.exceptions.RequestException:
        if on_lost is not None:
            on_lost()
        yield (
            b'data: {"error": {"message": "lost the connection to the upstream", "type": "upstream_error", '
            b'"param": null, "code": "upstream_unavailable"}}\n\n'
        )
    finally:
        response.close()


# --- an OpenAI chat stream as generation events (pure) ------------------------------------------


class SSEData:
    """The payload of each `data:` line of an event stream, fed its bytes as they arrive (a line may be
    split over pieces, or several lines come in one): for a reader that also passes the bytes on."""

    def __init__(self):
        self.pending = b""

    def feed(self, piece: bytes) -> list[bytes]:
        """The payloads of the lines `piece` completes."""
        *lines, self.pending = (self.pending + piece).split(b"\n")
        return [line[5:].strip() for line in lines if line.startswith(b"data:")]

    def end(self) -> list[bytes]:
        """The payload of a last line the stream did not end with a newline."""
        rest, self.pending = self.pending, b""
        return [rest[5:].strip()] if rest.startswith(b"data:") else []


def sse_data(pieces: Iterable[bytes]) -> Iterator[bytes]:
    """The payload of each `data:` line of an event stream, as the bytes arrive."""
    lines = SSEData()
    for piece in pieces:
        yield from lines.feed(piece)
    yield from lines.end()


def stream_chunks(payloads: Iterable[bytes], base_url: str) -> Iterator[dict]:
    """The JSON chunks of an OpenAI stream, up to `[DONE]`; an error sent in the stream is raised."""
    for payload in payloads:
        if payload == b"[DONE]":
            return
        try:
            chunk = orjson.loads(payload)
        except ValueError as exc:
            raise UpstreamError(f"{base_url} sent a malformed stream") from exc
        if isinstance(chunk, dict) and "error" in chunk:
            error = chunk["error"]
            raise UpstreamError(f"{base_url}: {error.get('message') if isinstance(error, dict) else error}")
        if isinstance(chunk, dict):
            yield chunk


def chat_events(chunks: Iterable[dict], new_id=new_call_id) -> Iterator[GenerationEvent]:
    """GenerationEvents of OpenAI chat completion chunks: `content` as text, `reasoning_content`
    (or `reasoning`) as reasoning, `tool_calls` deltas as ToolCallDeltas (id and name on a call's
    first delta only, as the parser gives them), and once the stream has ended, per choice, one final
    event with the finish reason and the usage. A choice that called tools and says "stop" (or the
    deprecated "function_call") finishes with "tool_calls", as the proxy's own parsing does."""
    calls: dict[int, _Calls] = {}
    finishes: dict[int, tuple[str, str | None]] = {}
    usage: dict = {}
    for chunk in chunks:
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or ():
            index = choice.get("index") or 0
            event = _choice_event(choice, index, calls.setdefault(index, _Calls(new_id)))
            if event is not None:
                yield event
            if choice.get("finish_reason"):
                finishes[index] = (choice["finish_reason"], _stop_word(choice))
    if not finishes:
        raise UpstreamError("the upstream ended its stream before the answer finished")
    for index, (finish_reason, stop_word) in sorted(finishes.items()):
        called = bool(calls[index].indexes)
        yield GenerationEvent(
            index=index,
            finish_reason=_finish_reason(finish_reason, called),
            stop_word=stop_word,
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            cached_tokens=(usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
        )


def _choice_event(choice: dict, index: int, calls: _Calls) -> GenerationEvent | None:
    delta = choice.get("delta") or {}
    text = delta.get("content") or ""
    reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
    tool_calls = tuple(piece for call in delta.get("tool_calls") or () if (piece := calls.delta(call)) is not None)
    if not (text or reasoning or tool_calls):
        return None
    return GenerationEvent(text=text, reasoning=reasoning, tool_calls=tool_calls or None, index=index)


class _Calls:
    """The tool calls of one choice: the upstream's call index (or id) -> ours, in order of arrival.
    A call starts once its name is known; arguments sent before that wait for it."""

    def __init__(self, new_id):
        self.new_id = new_id
        self.indexes: dict = {}
        self.waiting: dict = {}  # key -> (id, arguments) of a call whose name has not come yet

    def delta(self, call: dict) -> ToolCallDelta | None:
        key = call.get("index", call.get("id"))
        function = call.get("function") or {}
        arguments = function.get("arguments") or ""
        if key in self.indexes:
            return ToolCallDelta(self.indexes[key], arguments=arguments) if arguments else None
        call_id, waiting_arguments = self.waiting.pop(key, (None, ""))
        call_id = call.get("id") or call_id
        if not function.get("name"):
            self.waiting[key] = (call_id, waiting_arguments + arguments)
            return None
        self.indexes[key] = len(self.indexes)
        return ToolCallDelta(self.indexes[key], call_id or self.new_id(), function["name"], waiting_arguments + arguments)


def _finish_reason(upstream_reason: str, called: bool) -> str:
    if upstream_reason == "length":
        return "length"
    return "tool_calls" if called or upstream_reason in ("tool_calls", "function_call") else "stop"


def _stop_word(choice: dict) -> str | None:
    """The stop string that ended the choice, where the upstream tells it (vLLM's `stop_reason`)."""
    stop_reason = choice.get("stop_reason")
    return stop_reason if isinstance(stop_reason, str) else None


def _error_from(response: requests.Response, base_url: str) -> ProxyError:
    try:
        error = response.json().get("error", {})
        message = error.get("message") if isinstance(error, dict) else str(error)
    except ValueError:
        message = response.text[:500]
    message = f"{base_url}: {message or response.reason}"
    by_status = {400: InvalidRequest, 404: ModelNotFound, 503: UpstreamUnavailable, 504: UpstreamTimeout}
    return by_status.get(response.status_code, UpstreamError)(message)
