"""The front's side of a fleet call: a client's request relayed, as sent, to the box placement chose,
through the box's own API with the fleet secret (the box trusts the front's key check), failing over
to the next candidate while no byte of an answer has been relayed. No Flask: routes/fleet.py wraps it.

A box that cannot be reached, or refuses with 503/529 (its budget no longer fits the model, its
supervisor failed the start), is passed over; any other answer, errors included, is the client's.
A box that dies once its answer has begun ends a stream with an error event in the API's shape.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import quote

import orjson

from ..backends.http import HTTPClient, Response, TransportError
from ..errors import FleetUnavailable, InvalidRequest, ModelNotFound, UpstreamUnavailable
from .placement import Candidate, Pool
from .settings import CALLER_HEADER, ROUTE_HEADER, SECRET_HEADER

log = logging.getLogger("api_like_oai.fleet")

POOL_PATH = "/v1/fleet/pool"  # a host starts a pooled model (routes/fleet.start_pool)
LOAD_PATH = "/v1/fleet/load"  # a box starts one more copy of a model (routes/fleet.start_copy)
UNLOAD_PATH = "/v1/fleet/unload"  # a box stops its copy of a model (routes/fleet.stop_copy)
LOGS_PATH = "/v1/fleet/logs"  # a model's llama-server's lines on a box (routes/fleet.box_logs)
EVENTS_PATH = "/v1/fleet/events"  # a box's models' status stream (routes/fleet.box_events)
EVENTS_SILENCE_SECONDS = 10.0  # a box's status stream silent this long is gone (it sends a keep-alive each second)
CARD_FIELDS = ("created", "context_length", "max_model_len", "capabilities", "input_modalities")  # as its box says
CARDS_TIMEOUT = 1.0  # seconds a box has to list its models for a front's /v1/models
STREAMS = ("text/event-stream", "application/x-ndjson")  # relayed as they come (SSE; Ollama's NDJSON)
REFUSALS = (503, 529)  # a box's "not here, try another": the front tries the next candidate
# Request headers a front does not pass on: the hop's own, and the client's key (checked at the front).
NOT_FORWARDED = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "accept",
        "connection",
        "keep-alive",
        "transfer-encoding",
        "authorization",
        "x-api-key",
        "te",
        "upgrade",
        SECRET_HEADER.lower(),
        CALLER_HEADER.lower(),
        ROUTE_HEADER.lower(),
    }
)
NOT_RETURNED = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "date", "server"})


@dataclass
class Relayed:
    """A box's answer on its way to the client: its status, headers, the body's pieces, the box and route."""

    status: int
    headers: dict[str, str]
    body: Iterator[bytes] | bytes  # an event stream's pieces as they come, else the whole answer
    candidate: Candidate
    close: Callable[[], None]


class Relay:
    """HTTP clients to the boxes (kept per address, with their idle connections)."""

    def __init__(self, secret: str, connect_timeout: float, read_timeout: float):
        self.secret = secret
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self.clients: dict[str, HTTPClient] = {}
        self.card_clients: dict[str, HTTPClient] = {}  # for cards(), with CARDS_TIMEOUT

    def send(
        self,
        candidates: list[Candidate],
        method: str,
        path: str,
        body: bytes | None,
        headers: dict[str, str],
        *,
        caller: str,
        anthropic: bool,
        on_refused: Callable[[Candidate], None] = lambda _: None,
    ) -> Relayed:
        """The first candidate's answer that is not a refusal; FleetUnavailable if none answers."""
        refusals = []
        # a form's boundary kept (a client's header names are in any case, Flask's `Content-Type` among them)
        content_type = next((value for name, value in headers.items() if name.lower() == "content-type"), "application/json")
        for index, candidate in enumerate(candidates):
            last = index == len(candidates) - 1
            try:
                answer = self._client(candidate.address).request(
                    method,
                    path,
                    body,
                    content_type,
                    self._header_lines(headers, caller, candidate.route),
                )
            except TransportError as exc:
                refusals.append(f"{candidate.address}: {type(exc).__name__} {exc}")
                on_refused(candidate)
                continue
            if answer.status in REFUSALS and not last:
                refusals.append(f"{candidate.address}: {answer.status} {_message(answer)}")
                on_refused(candidate)
                continue
            body = _body(answer, anthropic)
            if not answer.headers.get("content-type", "").startswith(STREAMS):
                body = b"".join(body)  # a whole answer: written to the client at once, with its length
            return Relayed(answer.status, _returned(answer.headers), body, candidate, answer.close)
        raise FleetUnavailable("no box of the fleet could take the request: " + ("; ".join(refusals) or "none can run the model"))

    def cards(self, address: str) -> dict[str, dict]:
        """The box's own models' metadata (CARD_FIELDS of its /v1/models cards, asked as a fleet call);
        {} when it does not answer (its cards are then missing, not an error)."""
        try:
            data = self.ask(address, "/v1/models")["data"]
        except (KeyError, TypeError):
            return {}
        own = [card for card in data if isinstance(card, dict) and card.get("owned_by") != "fleet" and "id" in card]
        return {card["id"]: {name: card.get(name) for name in CARD_FIELDS} for card in own}

    def listing(self, address: str, path: str) -> list[dict]:
        """The `models` of the box's own list at `path` (Ollama's /api/tags, /api/ps, asked as a fleet
        call: its models only); [] when it does not answer."""
        listed = self.ask(address, path)
        models = listed.get("models") if isinstance(listed, dict) else None
        return [entry for entry in models if isinstance(entry, dict) and "name" in entry] if isinstance(models, list) else []

    def ask(self, address: str, path: str):
        """The box's JSON answer to a GET of `path` as a fleet call, with CARDS_TIMEOUT; None when it
        does not answer or answers no JSON."""
        client = self.card_clients.get(address)
        if client is None:  # its own short timeouts: a hung box costs a model list a second, not a request's wait
            client = self.card_clients[address] = HTTPClient(address, connect_timeout=CARDS_TIMEOUT, read_timeout=CARDS_TIMEOUT)
        try:
            answer = client.request("GET", path, headers=f"{SECRET_HEADER}: {self.secret}\r\n")
            text = answer.read()
            return orjson.loads(text) if answer.status == 200 else None
        except (TransportError, OSError, ValueError):
            return None

    def start_pool(self, plan: Pool, model: str) -> None:
        """Have the pool's host start `model` with its helpers' rpc-servers; back once it is loaded."""
        body = {"model": model, "rpc": list(plan.endpoints), "lent_mib": plan.lent_mib}
        self._start(plan.host, POOL_PATH, body, f"the pool's host {plan.host} could not start {model!r} over RPC")

    def load(self, address: str, model: str, args: list[str] | None = None) -> dict:
        """Have the box at `address` start a copy of `model` (with an admin's `args`, held to the same rules
        there); its {"model", "status"} once it is loaded."""
        body = {"model": model, **({"args": args} if args else {})}
        return self._start(address, LOAD_PATH, body, f"the box {address} could not start {model!r}")

    def unload(self, address: str, model: str) -> dict:
        """Have the box at `address` stop its copy of `model`; its {"model", "status"} once it is stopped."""
        return self._start(address, UNLOAD_PATH, {"model": model}, f"the box {address} could not stop {model!r}")

    def logs(self, address: str, model: str) -> list[str]:
        """The last lines of `model`'s llama-servers on the box at `address`; its refusal as the same error
        (a model it does not start: the 404 or 400 one proxy answers)."""
        try:
            answer = self._client(address).request(
                "GET", f"{LOGS_PATH}?model={quote(model, safe='')}", headers=f"{SECRET_HEADER}: {self.secret}\r\n"
            )
            text = answer.read()
        except TransportError as exc:
            raise FleetUnavailable(f"the box {address} did not answer for {model!r}'s logs ({type(exc).__name__})") from None
        if answer.status == 200:
            return orjson.loads(text)["lines"]
        if answer.status == 404:
            raise ModelNotFound(_error_message(text), param="model")
        if answer.status == 400:
            raise InvalidRequest(_error_message(text), param="model", code=_error_code(text))
        raise FleetUnavailable(f"the box {address} could not give {model!r}'s logs: {text[:300]!r}")

    def box_events(self, address: str) -> Response:
        """The box's status stream (routes/fleet.box_events), its body left to read, on a connection of its
        own (a stream holds it for as long as it is read): an answer's silence past EVENTS_SILENCE_SECONDS
        is a ReadTimeout, a box gone without closing its connection."""
        client = HTTPClient(address, connect_timeout=self.connect_timeout, read_timeout=EVENTS_SILENCE_SECONDS, max_idle=0)
        return client.request("GET", EVENTS_PATH, headers=f"{SECRET_HEADER}: {self.secret}\r\n")

    def _start(self, address: str, path: str, body: dict, failed: str) -> dict:
        try:
            answer = self._client(address).request(
                "POST", path, orjson.dumps(body), headers=f"{SECRET_HEADER}: {self.secret}\r\n"
            )
            text = answer.read()
        except TransportError as exc:
            raise FleetUnavailable(f"{failed}: no answer ({type(exc).__name__})") from None
        if answer.status == 400:  # the box refused what was asked (a flag, a launch that failed): the caller's to fix
            raise InvalidRequest(f"{failed}: {_error_message(text)}", param="args")
        if answer.status != 200:
            raise FleetUnavailable(f"{failed}: {text[:300]!r}")
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            raise FleetUnavailable(f"{failed}: an answer that is no JSON") from None

    def _client(self, address: str) -> HTTPClient:
        client = self.clients.get(address)
        if client is None:
            client = self.clients[address] = HTTPClient(
                address, connect_timeout=self.connect_timeout, read_timeout=self.read_timeout
            )
        return client

    def _header_lines(self, headers: dict[str, str], caller: str, route: str) -> str:
        lines = [f"{name}: {value}\r\n" for name, value in headers.items() if name.lower() not in NOT_FORWARDED]
        lines += [f"{SECRET_HEADER}: {self.secret}\r\n", f"{CALLER_HEADER}: {caller}\r\n", f"{ROUTE_HEADER}: {route}\r\n"]
        return "".join(lines)


def _returned(headers: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in headers.items() if name not in NOT_RETURNED}


def _message(answer: Response) -> str:
    try:
        return orjson.loads(answer.read())["error"]["message"]
    except (TransportError, ValueError, KeyError, TypeError):
        return "refused"
    finally:
        answer.close()


def _body(answer: Response, anthropic: bool) -> Iterator[bytes]:
    """The answer's pieces as they arrive; a box lost mid-stream ends an event stream with an error event."""
    media = answer.headers.get("content-type", "")
    try:
        yield from answer.iter_bytes()
    except (TransportError, OSError) as exc:  # a reset connection is an OSError from recv itself
        log.warning("fleet: the box's answer broke off: %s", exc)
        answer.close()
        error = UpstreamUnavailable(f"the box serving the request went away ({type(exc).__name__})")
        if media.startswith("application/x-ndjson"):  # Ollama's last line
            yield orjson.dumps({"error": error.message}) + b"\n"
        elif media.startswith("text/event-stream"):
            yield error_event(error, anthropic)


def error_event(error: UpstreamUnavailable, anthropic: bool) -> bytes:
    """An SSE error frame in the API's shape (Anthropic's `event: error`, OpenAI's `data: {"error"}`)."""
    if anthropic:
        return b"event: error\ndata: " + orjson.dumps(error.to_anthropic()) + b"\n\n"
    return b"data: " + orjson.dumps(error.to_dict()) + b"\n\n"


def _error_code(text: bytes) -> str | None:
    """The `code` of a box's error answer (OpenAI's shape), if it has one."""
    try:
        return orjson.loads(text)["error"].get("code")
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        return None


def _error_message(text: bytes) -> str:
    """The message of a box's error answer (OpenAI's shape), else its first bytes."""
    try:
        return str(orjson.loads(text)["error"]["message"])
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return text[:300].decode(errors="replace")
