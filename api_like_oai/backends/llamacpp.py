"""LlamaCppClient: llama.cpp's native server API (/completion, /tokenize, /props, /health).

It understands both generations of the server's JSON (2023: `slot_id`, `stopped_eos`/
`stopped_word`/`stopped_limit`; today: `id_slot`, `stop_type`) and turns every answer into
`GenerationEvent`s, so nothing above this module sees llama.cpp JSON. urllib3 errors become
`UpstreamUnavailable`/`UpstreamTimeout`/`UpstreamError` here and nowhere else.
"""

from __future__ import annotations

import http.client
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass

import urllib3

from ..errors import InvalidRequest, UpstreamError, UpstreamTimeout, UpstreamUnavailable
from .events import GenerationEvent, TokenLogprob


@dataclass(frozen=True)
class UpstreamProps:
    """What /props says about the served model."""

    chat_template: str | None
    bos_token: str
    eos_token: str
    context_length: int | None
    model_path: str | None
    total_slots: int | None
    lazy_grammar: bool = False   # takes grammar_lazy + grammar_triggers (else it would apply the grammar at once)


JSON_HEADERS = {"Content-Type": "application/json"}


class LlamaCppClient:
    """One llama.cpp server. Talks to it through urllib3's connection pool directly: `requests`
    cost ~800 µs of CPU per call against ~130 µs for the bare protocol (benchmarks/PROFILE.md),
    on the path of every request and of every time to first token."""

    def __init__(self, base_url: str, *, connect_timeout: float = 5.0, read_timeout: float = 600.0,
                 pool_size: int = 64):
        self.base_url = base_url.rstrip("/")
        self.timeouts = (connect_timeout, read_timeout)
        self.pool = urllib3.PoolManager(num_pools=4, maxsize=pool_size, retries=False,
                                        timeout=urllib3.Timeout(connect=connect_timeout, read=read_timeout))

    # --- generation -------------------------------------------------------------------------

    def generate(self, path: str, payload: dict, *, index: int = 0) -> Iterator[GenerationEvent]:
        """Send `payload` to `path` (/completion, /infill); the events of the answer, streamed if
        payload["stream"]. The request is sent before this returns, so a refused connection or an
        error status raises here, before any event, and the caller can still answer with a plain
        HTTP error."""
        response = self._request("POST", path, payload, stream=bool(payload.get("stream")))
        if payload.get("stream"):
            return self._stream_events(response, index)
        return iter((completion_event(self._json(response), index),))

    def _stream_events(self, response, index: int) -> Iterator[GenerationEvent]:
        finished = False
        try:
            for line in _lines(response):
                if line.startswith(b"data: "):
                    yield completion_event(_parse(line[6:], self.base_url), index)
                elif line.startswith(b"error: "):
                    raise _upstream_error(_parse(line[7:], self.base_url), self.base_url)
            finished = True
        except urllib3.exceptions.ReadTimeoutError as exc:
            raise UpstreamTimeout(f"llama.cpp at {self.base_url} stopped sending tokens for "
                                  f"{self.timeouts[1]:g}s") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise UpstreamUnavailable(f"lost the connection to llama.cpp at {self.base_url} "
                                      "in the middle of a generation") from exc
        finally:
            if not finished:
                response.close()  # drops the connection: llama.cpp sees it and frees the slot
            response.release_conn()

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
        )

    def tokenize(self, text: str, *, add_special: bool = False) -> list[int]:
        return self._json(self._request("POST", "/tokenize", {"content": text, "add_special": add_special}))["tokens"]

    def detokenize(self, tokens: list[int]) -> str:
        return self._json(self._request("POST", "/detokenize", {"tokens": tokens}))["content"]

    def embeddings(self, inputs: list) -> list[list[float]]:
        """One pooled embedding per input (text or token ids), in order."""
        body = self._json(self._request("POST", "/embedding", {"content": inputs}))
        results = body if isinstance(body, list) else [body]
        ordered = sorted(results, key=lambda item: item.get("index", 0))
        return [_pooled(item["embedding"]) for item in ordered]

    def adds_bos(self) -> bool:
        """Whether llama.cpp prepends BOS to a prompt itself (then a template's BOS is one too many)."""
        return len(self.tokenize("a", add_special=True)) > len(self.tokenize("a"))

    # --- transport --------------------------------------------------------------------------

    def _request(self, method: str, path: str, payload: dict | None = None, *, stream: bool = False):
        """The response (its body unread when `stream`); the upstream's errors raised as ours."""
        url = self.base_url + path
        body = None if payload is None else json.dumps(payload).encode()
        options = {"body": body, "headers": JSON_HEADERS if body is not None else None, "preload_content": not stream}
        try:
            try:
                response = self.pool.request(method, url, **options)
            except urllib3.exceptions.ProtocolError as exc:
                if not _reused_connection_dropped(exc):
                    raise
                # llama.cpp closed an idle pooled keep-alive connection just as we reused it; the
                # request never reached it, so sending it again on a new connection is safe.
                response = self.pool.request(method, url, **options)
        except urllib3.exceptions.NewConnectionError as exc:
            raise UpstreamUnavailable(f"llama.cpp at {self.base_url} is unreachable ({_reason(exc)})") from exc
        except urllib3.exceptions.ConnectTimeoutError as exc:
            raise UpstreamUnavailable(f"llama.cpp at {self.base_url} did not accept the connection "
                                      "in time") from exc
        except urllib3.exceptions.ReadTimeoutError as exc:
            raise UpstreamTimeout(f"llama.cpp at {self.base_url} did not answer in time") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise UpstreamUnavailable(f"llama.cpp at {self.base_url} is unreachable ({_reason(exc)})") from exc
        if response.status >= 400:
            error = _status_error(response, self.base_url)
            response.release_conn()
            raise error
        return response

    def _json(self, response):
        try:
            return json.loads(response.data)
        except ValueError as exc:
            raise UpstreamError(f"llama.cpp at {self.base_url} sent malformed JSON") from exc
        finally:
            response.release_conn()


def _lines(response) -> Iterator[bytes]:
    """The lines of a streamed body as they arrive (llama.cpp sends one event per HTTP chunk)."""
    chunks = response.read_chunked() if response.chunked else response.stream(8192)
    pending = b""
    for chunk in chunks:
        pending += chunk
        if b"\n" in pending:
            *lines, pending = pending.split(b"\n")
            yield from lines
    if pending:
        yield pending


def _knows_lazy_grammars(props: dict) -> bool:
    """Whether this llama-server takes lazy grammars with typed triggers (early 2025 on). Builds from a
    source package report build number 1, so the template capabilities in /props (mid 2025 on) tell too."""
    build = str(props.get("build_info") or "")
    number = build[1:].split("-", 1)[0] if build.startswith("b") else ""
    return "chat_template_caps" in props or (number.isdigit() and int(number) >= 5000)


def _reason(exc: BaseException) -> str:
    """The innermost cause of a transport error, short: 'ConnectionRefusedError', 'RemoteDisconnected', ..."""
    while exc.__context__ is not None and exc.__context__ is not exc:
        exc = exc.__context__
    return type(exc).__name__


def _reused_connection_dropped(exc: BaseException) -> bool:
    return any(isinstance(cause, http.client.RemoteDisconnected | ConnectionResetError | BrokenPipeError)
               for cause in _causes(exc))


def _causes(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        yield from (arg for arg in exc.args if isinstance(arg, BaseException))
        exc = exc.__cause__ or exc.__context__


def _pooled(embedding: list) -> list[float]:
    # Newer servers nest the pooled vector in a list (one row per token when pooling is off).
    return embedding[0] if embedding and isinstance(embedding[0], list) else embedding


_decode_json = json.JSONDecoder().decode


def _parse(raw: bytes, base_url: str) -> dict:
    try:
        return _decode_json(raw.decode())  # str input skips json.loads' encoding detection
    except ValueError as exc:
        raise UpstreamError(f"llama.cpp at {base_url} sent a malformed event") from exc


def _status_error(response, base_url: str) -> Exception:
    try:
        body = json.loads(response.data)
    except ValueError:
        body = {"error": {"message": response.data[:500].decode(errors="replace")}}
    error = _upstream_error(body, base_url)
    if response.status == 503:
        return UpstreamUnavailable(error.message)
    if response.status == 501:  # llama.cpp: "not supported by this model/server" (infill, embeddings)
        return InvalidRequest(error.message, code="not_supported")
    if response.status == 400 and isinstance(error, UpstreamError):
        # llama.cpp rejected the request itself (bad grammar, prompt too long, ...): the
        # caller's mistake, so the caller gets a 400 with llama.cpp's words.
        return InvalidRequest(error.message, code=error_code(body))
    return error


def error_code(body: dict) -> str | None:
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("type") == "exceed_context_size_error":
        return "context_length_exceeded"
    return None


def _upstream_error(body, base_url: str) -> UpstreamError:
    error = body.get("error", body) if isinstance(body, dict) else body
    message = error.get("message") if isinstance(error, dict) else str(error)
    return UpstreamError(f"llama.cpp at {base_url}: {message or 'unknown error'}")


def finish_reason(body: dict) -> str | None:
    """"stop"/"length" for a final /completion answer of either server generation, else None."""
    if not body.get("stop"):
        return None
    stop_type = body.get("stop_type")
    if stop_type is None:  # 2023 server
        stop_type = "limit" if body.get("stopped_limit") else "eos"
    return "length" if stop_type == "limit" else "stop"


def completion_event(body: dict, index: int = 0) -> GenerationEvent:
    """One /completion JSON object (a stream event or the whole answer) as a GenerationEvent."""
    if not isinstance(body, dict):
        raise UpstreamError("llama.cpp sent an event that is not a JSON object")
    if "error" in body:
        raise _upstream_error(body, "upstream")
    reason = finish_reason(body)
    return GenerationEvent(
        text=body.get("content") or "",
        finish_reason=reason,
        prompt_tokens=body.get("tokens_evaluated"),     # today's server counts on every event,
        completion_tokens=body.get("tokens_predicted"),  # the 2023 one on the last
        logprobs=token_logprobs(body.get("completion_probabilities")),
        index=index,
        stop_word=_stop_word(body) if reason else None,
    )


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
        top = tuple(_candidate(c.get("token", ""), c["logprob"], c.get("bytes"))
                    for c in entry.get("top_logprobs", ()))
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
