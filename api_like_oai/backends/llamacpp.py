"""LlamaCppClient: llama.cpp's native server API (/completion, /tokenize, /props, /health).

It understands both generations of the server's JSON (2023: `slot_id`, `stopped_eos`/
`stopped_word`/`stopped_limit`; today: `id_slot`, `stop_type`) and turns every answer into
`GenerationEvent`s, so nothing above this module sees llama.cpp JSON. Transport errors become
`UpstreamUnavailable`/`UpstreamTimeout`/`UpstreamError` here and nowhere else.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson

from ..compact_json import json_bytes
from ..errors import InvalidRequest, UpstreamError, UpstreamTimeout, UpstreamUnavailable
from . import http
from .events import Accepted, GenerationEvent, PromptProgress, TokenLogprob

if TYPE_CHECKING:
    from .media import Media


@dataclass(frozen=True)
class UpstreamProps:
    """What /props says about the served model."""

    chat_template: str | None
    bos_token: str
    eos_token: str
    context_length: int | None
    model_path: str | None
    total_slots: int | None
    lazy_grammar: bool = False  # takes grammar_lazy + grammar_triggers (else it would apply the grammar at once)
    sampling: dict[str, float] = field(default_factory=dict)  # its defaults of SAMPLING_ECHOED it reports
    vision: bool = False  # loaded with --mmproj: takes images (`modalities.vision`)
    media_marker: str = ""  # what stands for an image in a prompt (changes at each start: PR #21962)
    audio: bool = False  # its projector has an audio encoder (`modalities.audio`): transcribes, hears


# The sampling values the Responses API's answer echoes, and llama-server's own defaults of them
# (common/common.h), for a server whose /props does not tell.
SAMPLING_ECHOED = ("temperature", "top_p", "presence_penalty", "frequency_penalty")
LLAMA_CPP_SAMPLING = {"temperature": 0.8, "top_p": 0.95, "presence_penalty": 0.0, "frequency_penalty": 0.0}
DEFAULT_MEDIA_MARKER = "<__media__>"  # llama.cpp's before PR #21962, whose /props names none


class LlamaCppClient:
    """One llama.cpp server, over backends/http.py's keep-alive connections: a request is one
    write, a streamed token one read (urllib3, and `requests` before it, cost several times more
    per request and per token: benchmarks/PROFILE.md)."""

    def __init__(self, base_url: str, *, connect_timeout: float = 5.0, read_timeout: float = 600.0, api_key: str = ""):
        self.base_url = base_url.rstrip("/")
        self.timeouts = (connect_timeout, read_timeout)
        self.api_key = api_key  # a llama-server the proxy started asks its own random key
        self.http = http.HTTPClient(
            self.base_url, connect_timeout=connect_timeout, read_timeout=read_timeout, api_key=api_key, keeps_spare=True
        )
        self._media_marker: str | None = None  # read from /props when a prompt first carries images

    # --- generation -------------------------------------------------------------------------

    def generate(
        self, path: str, payload: Mapping, *, index: int = 0, batched: bool = False, media: Media | None = None
    ) -> Iterator[GenerationEvent]:
        """Send `payload` to `path` (/completion, /infill), with `media` as its prompt if given; the events
        of the answer, streamed if payload["stream"]. The request is sent before this returns, so a refused
        connection or an error status raises here, before any event, and the caller can still answer with
        a plain HTTP error. `batched`: the plain tokens received together come as one event (for a fold,
        which gives nothing out until the end: one step through the event path for them all)."""
        if media is not None:
            response = self._request_with_media(path, payload, media.upstream)
        else:
            response = self._request("POST", path, payload)
        if payload.get("stream"):
            return self._stream_events(response, index, batched)
        return iter((completion_event(self._json(response), index),))

    def _request_with_media(self, path: str, payload: Mapping, upstream_prompt) -> http.Response:
        """`payload` sent with its images, `upstream_prompt(marker)` giving the prompt object for this server's
        media marker. A server restarted since its marker was read has a new one, which leaves the old one
        plain text and the request a 400 ("Failed to tokenize prompt": mtmd found fewer markers than
        images): then the marker is read again and, if it changed, the request sent once more."""
        marker = self.media_marker()
        try:
            return self._request("POST", path, {**payload, "prompt": upstream_prompt(marker)})
        except InvalidRequest:
            self._media_marker = None
            if self.media_marker() == marker:
                raise
            return self._request("POST", path, {**payload, "prompt": upstream_prompt(self.media_marker())})

    def media_marker(self) -> str:
        """The text that stands for an image in this server's prompts, as its /props says (read once, and
        again after a request shows it changed)."""
        if self._media_marker is None:
            self._media_marker = self.props().media_marker or DEFAULT_MEDIA_MARKER
        return self._media_marker

    def _stream_events(self, response: http.Response, index: int, batched: bool = False) -> Iterator[GenerationEvent]:
        """One event per `data:` line (or, `batched`, per run of plain tokens received together);
        llama.cpp sends one per HTTP chunk, but a line split over chunks, or several lines in one,
        are handled too. Transport failures become the errors the proxy maps."""
        finished = False
        try:
            if batched:  # a fold starts its answer at the end: no Accepted, nothing to start early
                yield from self._batched_events(response, index)
            else:
                yield Accepted(index)
                yield from self._events(response, index)
            finished = True
        except TimeoutError as exc:
            raise UpstreamTimeout(f"llama.cpp at {self.base_url} stopped sending tokens for {self.timeouts[1]:g}s") from exc
        except http.BadResponse as exc:
            raise UpstreamError(f"llama.cpp at {self.base_url} sent a malformed stream") from exc
        except (http.TransportError, OSError) as exc:
            raise UpstreamUnavailable(
                f"lost the connection to llama.cpp at {self.base_url} in the middle of a generation"
            ) from exc
        finally:
            if not finished:
                response.close()  # drops the connection: llama.cpp sees it and frees the slot

    def _events(self, response: http.Response, index: int) -> Iterator[GenerationEvent]:
        pending = b""
        for chunk in response.iter_bytes():
            if (
                not pending and chunk.find(b"\n", 6) == len(chunk) - 2 and chunk[-1:] == b"\n" and chunk[:6] == b"data: "
            ):  # one whole event, as llama.cpp sends them: no split
                yield completion_event(_parse(chunk[6:-2], self.base_url), index)
                continue
            if pending:
                chunk, pending = pending + chunk, b""
            *lines, pending = chunk.split(b"\n")
            for line in lines:
                event = self._line_event(line, index)
                if event is not None:
                    yield event
        if pending[:6] == b"data: ":
            yield completion_event(_parse(pending[6:], self.base_url), index)

    def _batched_events(self, response: http.Response, index: int) -> Iterator[GenerationEvent]:
        """As _events, but the plain tokens of each batch of chunks received together as one event:
        their text joined, the counts of the last. An instant upstream sends a whole answer in a few
        reads, and a busy proxy finds tokens waiting; then the fold takes them in one step, not one per
        token (benchmarks/PROFILE.md, issue 29). Anything else (progress, the final event, logprobs,
        an error) is an event of its own, in order."""
        pending = b""
        for batch in response.iter_batches():
            *lines, pending = (pending + b"".join(batch)).split(b"\n")
            texts, last = [], None
            for line in lines:
                if line[:6] != b"data: ":
                    self._line_event(line, index)  # an error line raises; others are not events
                    continue
                body = _parse(line[6:], self.base_url)
                if _plain_token(body) and (body.get("content") or "prompt_progress" not in body):
                    texts.append(body.get("content") or "")
                    last = body
                    continue
                if last is not None:
                    yield _joined(texts, last, index)
                    texts, last = [], None
                yield completion_event(body, index)
            if last is not None:
                yield _joined(texts, last, index)
        if pending[:6] == b"data: ":
            yield completion_event(_parse(pending[6:], self.base_url), index)

    def _line_event(self, line: bytes, index: int) -> GenerationEvent | None:
        """The event of one SSE line: a `data:` line's, an `error:` line raised, None for others."""
        if line[:6] == b"data: ":
            return completion_event(_parse(line[6:], self.base_url), index)
        if line[:7] == b"error: ":
            raise _upstream_error(_parse(line[7:], self.base_url), self.base_url)
        return None

    # --- other endpoints --------------------------------------------------------------------

    def health(self) -> dict:
        """/health's JSON; UpstreamUnavailable if the server is down or still loading."""
        return self._json(self._request("GET", "/health"))

    def props(self) -> UpstreamProps:
        body = self._json(self._request("GET", "/props"))
        settings = body.get("default_generation_settings") or {}
        return UpstreamProps(
            chat_template=body.get("chat_template") or None,
            bos_token=body.get("bos_token") or "",
            eos_token=body.get("eos_token") or "",
            context_length=settings.get("n_ctx") or body.get("n_ctx"),
            model_path=body.get("model_path"),
            total_slots=body.get("total_slots"),
            lazy_grammar=_knows_lazy_grammars(body),
            sampling=_default_sampling(settings),
            vision=bool((body.get("modalities") or {}).get("vision")),
            audio=bool((body.get("modalities") or {}).get("audio")),
            media_marker=body.get("media_marker") or "",
        )

    def tokenize(self, text: str, *, add_special: bool = False) -> list[int]:
        return self._json(self._request("POST", "/tokenize", {"content": text, "add_special": add_special}))["tokens"]

    def detokenize(self, tokens: list[int]) -> str:
        try:
            return self._json(self._request("POST", "/detokenize", {"tokens": tokens}))["content"]
        except UpstreamError as exc:
            if "_M_range_check" not in exc.message:
                raise
            # llama-server's answer to an id past its vocabulary: the caller's mistake, not the server's
            raise InvalidRequest(
                "a token id is outside the model's vocabulary", param="tokens", code="token_out_of_vocabulary"
            ) from None

    def embeddings(self, inputs: list) -> list[list[float]]:
        """One pooled embedding per input (text or token ids), in order."""
        body = self._json(self._request("POST", "/embedding", {"content": inputs}))
        results = body if isinstance(body, list) else [body]
        ordered = sorted(results, key=lambda item: item.get("index", 0))
        return [_pooled(item["embedding"]) for item in ordered]

    def rerank(self, body: dict) -> dict:
        """llama-server's own answer to /v1/rerank (started with --reranking): results and usage."""
        return self._json(self._request("POST", "/v1/rerank", body))

    def transcribe(self, form: bytes, content_type: str) -> http.Response:
        """llama-server's answer to a multipart /v1/audio/transcriptions (a model with an audio projector),
        its body unread (an event stream when the form asks for one); its refusals raised as ours."""
        response = self._send("POST", "/v1/audio/transcriptions", form, content_type)
        if response.status >= 400:
            raise _status_error(response, self.base_url)
        return response

    def adds_bos(self) -> bool:
        """Whether llama.cpp prepends BOS to a prompt itself (then a template's BOS is one too many)."""
        return len(self.tokenize("a", add_special=True)) > len(self.tokenize("a"))

    # --- llama.cpp's own API, relayed -------------------------------------------------------

    def relay(self, method: str, path: str, body: bytes | None = None, query: str = "") -> RawAnswer:
        """llama.cpp's answer to a request passed on as it is, whatever its status, body unread;
        UpstreamUnavailable/UpstreamTimeout when no answer came."""
        target = path + (f"?{query}" if query else "")
        # HEAD is asked as GET (the WSGI server drops the body): a HEAD answer announces a body it
        # does not send, which http.py would wait for.
        return RawAnswer(self._send("GET" if method == "HEAD" else method, target, body or None), self.base_url, self.timeouts[1])

    # --- transport --------------------------------------------------------------------------

    def _request(self, method: str, path: str, payload: Mapping | None = None) -> http.Response:
        """The response, its body unread; the upstream's errors raised as ours."""
        body = None if payload is None else json_bytes(payload)  # an agent's prompt and grammar: tens of KB
        response = self._send(method, path, body)
        if response.status >= 400:
            raise _status_error(response, self.base_url)
        return response

    def _send(self, method: str, path: str, body: bytes | None, content_type: str = "application/json") -> http.Response:
        """The response to one request, whatever its status; failures to connect or to hear back as ours."""
        try:
            response = self.http.request(method, path, body, content_type)
        except http.ConnectTimeout as exc:
            raise UpstreamUnavailable(f"llama.cpp at {self.base_url} did not accept the connection in time") from exc
        except http.ReadTimeout as exc:
            raise UpstreamTimeout(f"llama.cpp at {self.base_url} did not answer in time") from exc
        except http.BadResponse as exc:
            raise UpstreamError(f"llama.cpp at {self.base_url} answered with something that is not HTTP") from exc
        except http.TransportError as exc:
            raise UpstreamUnavailable(f"llama.cpp at {self.base_url} is unreachable ({_reason(exc)})") from exc
        return response

    def _json(self, response: http.Response):
        try:
            return orjson.loads(self._body(response))
        except ValueError as exc:
            raise UpstreamError(f"llama.cpp at {self.base_url} sent malformed JSON") from exc

    def _body(self, response: http.Response) -> bytes:
        try:
            return response.read()
        except TimeoutError as exc:
            response.close()
            raise UpstreamTimeout(f"llama.cpp at {self.base_url} did not answer in time") from exc
        except (http.TransportError, OSError) as exc:
            response.close()
            raise UpstreamUnavailable(f"lost the connection to llama.cpp at {self.base_url}") from exc


RELAYED_HEADERS = ("Content-Type", "Retry-After")  # not its CORS headers, nor hop-by-hop ones


class RawAnswer:
    """llama.cpp's answer to a relayed request: its status, the headers worth relaying, and its body,
    read whole or chunk by chunk as it arrives. close() (once, even if the body was never read)
    drops the connection when the body was not read to its end, so that llama.cpp frees the slot,
    then runs the on_close callbacks."""

    def __init__(self, response: http.Response, base_url: str, read_timeout: float):
        self.status = response.status
        self.headers = {name: response.headers[name.lower()] for name in RELAYED_HEADERS if name.lower() in response.headers}
        self.streamed = self.headers.get("Content-Type", "").startswith("text/event-stream")
        self.base_url = base_url
        self._response = response
        self._read_timeout = read_timeout
        self._finished = False
        self._closed = False
        self._callbacks: list = []

    def iter_bytes(self) -> Iterator[bytes]:
        """The body as it arrives; UpstreamUnavailable/UpstreamTimeout if the connection fails on the way."""
        try:
            yield from self._response.iter_bytes()
        except (TimeoutError, http.ReadTimeout) as exc:
            raise UpstreamTimeout(f"llama.cpp at {self.base_url} stopped sending for {self._read_timeout:g}s") from exc
        except http.BadResponse as exc:
            raise UpstreamError(f"llama.cpp at {self.base_url} sent a malformed answer") from exc
        except (http.TransportError, OSError) as exc:
            raise UpstreamUnavailable(f"lost the connection to llama.cpp at {self.base_url} in the middle of an answer") from exc
        self._finished = True

    def read(self) -> bytes:
        return b"".join(self.iter_bytes())

    def on_close(self, callback) -> None:
        self._callbacks.append(callback)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self._finished:
            self._response.close()
        for callback in self._callbacks:
            callback()


def _default_sampling(settings: dict) -> dict[str, float]:
    """The server's default sampling values of SAMPLING_ECHOED: under `params` since 2025, at the top
    of default_generation_settings before; those it does not report are left out. llama.cpp holds them
    as 32-bit floats (0.800000011920929): written back with that precision, they read as set (0.8)."""
    params = settings.get("params")
    params = params if isinstance(params, dict) else settings
    return {
        key: float(f"{params[key]:.7g}")
        for key in SAMPLING_ECHOED
        if isinstance(params.get(key), int | float) and not isinstance(params.get(key), bool)
    }


def _knows_lazy_grammars(props: dict) -> bool:
    """Whether this llama-server takes lazy grammars with typed triggers (early 2025 on). Builds from a
    source package report build number 1, so the template capabilities in /props (mid 2025 on) tell too."""
    build = str(props.get("build_info") or "")
    number = build[1:].split("-", 1)[0] if build.startswith("b") else ""
    return "chat_template_caps" in props or (number.isdigit() and int(number) >= 5000)


def _reason(exc: BaseException) -> str:
    """The innermost cause of a transport error, short: 'ConnectionRefusedError', 'gaierror', ..."""
    while exc.__cause__ is not None and exc.__cause__ is not exc:
        exc = exc.__cause__
    return type(exc).__name__


def _pooled(embedding: list) -> list[float]:
    # Newer servers nest the pooled vector in a list (one row per token when pooling is off).
    return embedding[0] if embedding and isinstance(embedding[0], list) else embedding


def _parse(raw: bytes, base_url: str) -> dict:
    """One event's JSON: orjson, about 4x faster than json on these (this runs once per token)."""
    try:
        return orjson.loads(raw)
    except ValueError as exc:  # orjson.JSONDecodeError is a ValueError
        raise UpstreamError(f"llama.cpp at {base_url} sent a malformed event") from exc


def _status_error(response: http.Response, base_url: str) -> Exception:
    try:
        data = response.read()
    except (http.TransportError, OSError):
        response.close()
        data = b""
    try:
        body = json.loads(data)
    except ValueError:
        body = {"error": {"message": data[:500].decode(errors="replace")}}
    error = _upstream_error(body, base_url)
    if response.status == 503:
        return UpstreamUnavailable(error.message)
    if response.status == 501:  # llama.cpp: "not supported by this model/server" (infill, embeddings)
        return InvalidRequest(error.message, code="not_supported")
    if MEDIA_REFUSED in error.message:  # a 500 from llama.cpp (a runtime_error), but the client's image
        return InvalidRequest(f"llama.cpp could not decode an image or audio part: {error.message}", code="invalid_image")
    if response.status == 400 and isinstance(error, UpstreamError):
        # llama.cpp rejected the request itself (bad grammar, prompt too long, ...): the
        # caller's mistake, so the caller gets a 400 with llama.cpp's words.
        return InvalidRequest(error.message, code=error_code(body))
    return error


# llama.cpp's words when stb_image or miniaudio cannot decode a request's media (tools/server/server-common.cpp)
MEDIA_REFUSED = "Failed to load image or audio file"


def error_code(body: dict) -> str | None:
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("type") == "exceed_context_size_error":
        return "context_length_exceeded"
    return "upstream_refused"


def _upstream_error(body, base_url: str) -> UpstreamError:
    error = body.get("error", body) if isinstance(body, dict) else body
    message = error.get("message") if isinstance(error, dict) else str(error)
    return UpstreamError(f"llama.cpp at {base_url}: {message or 'unknown error'}")


def finish_reason(body: dict) -> str | None:
    """ "stop"/"length" for a final /completion answer of either server generation, else None."""
    if not body.get("stop"):
        return None
    stop_type = body.get("stop_type")
    if stop_type is None:  # 2023 server
        stop_type = "limit" if body.get("stopped_limit") else "eos"
    return "length" if stop_type == "limit" else "stop"


def _plain_token(body) -> bool:
    """A stream event that is only more text (or prompt progress) and counts: most events."""
    return type(body) is dict and body.get("stop") is False and "error" not in body and not body.get("completion_probabilities")


def _joined(texts: list[str], last: dict, index: int) -> GenerationEvent:
    """One event for a run of plain tokens: their text, the counts of the last (llama.cpp counts on every event)."""
    event = completion_event(last, index)
    event.text = "".join(texts)  # made here and not given out yet: nothing else holds it
    return event


def completion_event(body: dict, index: int = 0) -> GenerationEvent:
    """One /completion JSON object (a stream event or the whole answer) as a GenerationEvent."""
    if _plain_token(body):
        timings = body.get("timings")  # on every event only when asked for (timings_per_token)
        content = body.get("content")
        if not content and "prompt_progress" in body:  # looked for on empty events only, not on every token
            return prompt_progress(body["prompt_progress"], index)
        return GenerationEvent(
            text=content or "",
            index=index,  # a plain token: most events
            prompt_tokens=body.get("tokens_evaluated"),
            completion_tokens=body.get("tokens_predicted"),
            cached_tokens=cached_tokens(body) if timings else None,
        )
    if not isinstance(body, dict):
        raise UpstreamError("llama.cpp sent an event that is not a JSON object")
    if "error" in body:
        raise _upstream_error(body, "upstream")
    reason = finish_reason(body)
    return GenerationEvent(
        text=body.get("content") or "",
        finish_reason=reason,
        prompt_tokens=body.get("tokens_evaluated"),  # today's server counts on every event,
        completion_tokens=body.get("tokens_predicted"),  # the 2023 one on the last
        logprobs=token_logprobs(body.get("completion_probabilities")),
        index=index,
        stop_word=_stop_word(body) if reason else None,
        cached_tokens=cached_tokens(body),
    )


def prompt_progress(progress, index: int = 0) -> PromptProgress:
    """llama.cpp's `prompt_progress` object ({total, cache, processed, time_ms}: tools/server/server-task.cpp)."""
    if not isinstance(progress, dict):
        raise UpstreamError("llama.cpp sent a prompt_progress that is not a JSON object")
    return PromptProgress(
        total=_count(progress, "total"),
        cached=_count(progress, "cache"),
        processed=_count(progress, "processed"),
        elapsed_ms=float(_count(progress, "time_ms")),
        index=index,
    )


def _count(progress: dict, key: str) -> int:
    value = progress.get(key, 0)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else 0


def cached_tokens(body: dict) -> int | None:
    """How many of the prompt's tokens llama.cpp took from its cache, where it says: `timings.cache_n`
    (2025 on), else the prompt's tokens less those it evaluated (`timings.prompt_n`). Not `tokens_cached`:
    that is what the slot holds after the answer, the generated tokens included."""
    timings = body.get("timings")
    if not isinstance(timings, dict):
        return None
    if isinstance(timings.get("cache_n"), int):
        return timings["cache_n"]
    prompt_tokens, evaluated = body.get("tokens_evaluated"), timings.get("prompt_n")
    if isinstance(prompt_tokens, int) and isinstance(evaluated, int):
        return max(prompt_tokens - evaluated, 0)
    return None


def _stop_word(body: dict) -> str | None:
    """The stop string that ended a final answer (today's `stop_type: "word"`, 2023's `stopped_word`)."""
    if body.get("stop_type", "word" if body.get("stopped_word") else None) != "word":
        return None
    return body.get("stopping_word") or None


def token_logprobs(probabilities) -> tuple | None:
    """llama.cpp's per-token probabilities in either format (`probs`/`prob` or `top_logprobs`/`logprob`)."""
    if not probabilities:
        return None
    return tuple(_token_logprob(entry) for entry in probabilities)


def _token_logprob(entry: dict) -> TokenLogprob:
    if "logprob" in entry:  # today's server
        top = tuple(_candidate(c.get("token", ""), c["logprob"], c.get("bytes")) for c in entry.get("top_logprobs", ()))
        token = entry.get("token", "")
        return TokenLogprob(token, entry["logprob"], top, tuple(entry.get("bytes") or token.encode()))
    candidates = entry.get("probs", ())  # 2023 server: probabilities, the chosen token first
    top = tuple(_candidate(c.get("tok_str", ""), _log(c.get("prob", 0.0))) for c in candidates)
    chosen = entry.get("content", "")
    chosen_logprob = next((lp for token, lp, _ in top if token == chosen), top[0][1] if top else 0.0)
    return TokenLogprob(chosen, chosen_logprob, top, tuple(chosen.encode()))


def _candidate(token: str, logprob: float, token_bytes=None) -> tuple:
    return token, logprob, tuple(token_bytes or token.encode())


def _log(probability: float) -> float:
    return math.log(probability) if probability > 0 else -9999.0
