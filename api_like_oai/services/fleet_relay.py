"""A front's relay of a client's request to the fleet's box for its model (fleet/ chooses the box and
sends): the key's limits admitted once, here (a box counts none of its own), the answer's usage counted
on the request's record, the boxes' addresses kept from a tenant. No Flask: the view
(routes/fleet.forward_elsewhere) hands over what the request holds and writes the answer as HTTP."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from urllib.parse import urlencode

import orjson

from ..dialects.audio_files import inspect
from ..errors import FleetUnavailable, InvalidRequest, ModelNotFound, without_addresses
from ..fleet.settings import GRANTS_HEADER, ROUTE_HEADER, TENANT_HEADER
from ..fleet.usage import StreamUsage, counts_in, prompt_bound, reply_bound
from . import mcp_loop


@dataclass(frozen=True)
class Named:
    """Where a client's request names its model (its route's `model_in`), and the request as a box gets it."""

    model: str | None  # None: it names none (absent or empty), or not as a string
    absent: bool  # it names no model (the default model's, as on one proxy)
    body: dict  # the JSON body, parsed ({} for a form or none)
    raw: bytes | None  # the body's bytes, relayed as they are (None: a request without a body)
    path: str  # with its query
    form_boundary: str | None = None  # a multipart form's
    audio_seconds: float | None = 0.0  # of a form's audio file, from its header (None: not known)

    def naming(self, model: str) -> Named:
        """The same request naming `model` (the fleet's default model, which its box may not take for its own)."""
        if self.form_boundary is not None:  # a first part naming the model, before the client's
            raw = self.raw or b""
            ending = b"" if raw.startswith(b"\r\n") else b"\r\n"  # the delimiter is CRLF, then the boundary
            part = f'--{self.form_boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\n{model}'.encode()
            return replace(self, model=model, raw=part + ending + raw)
        if self.raw is None:  # the query names it
            return replace(self, model=model, path=self.path + ("&" if "?" in self.path else "?") + urlencode({"model": model}))
        body = {**self.body, "model": model}
        return replace(self, model=model, body=body, raw=orjson.dumps(body))


def in_json(path: str, raw: bytes, query_model: str | None, *, ollama: bool) -> Named:
    """A JSON body's `model` (Ollama's older `name` too), else `?model=` for a route that takes it there."""
    body = _json_object(raw)
    if body is None:  # not JSON: the route's own 400, here as on one proxy (its bytes are never a default's)
        return Named(None, False, {}, raw, path)
    named = body.get("model")
    if named is None and ollama:
        named = body.get("name")
    if named is None or named == "":
        named = query_model or None
    return Named(named if isinstance(named, str) else None, named is None, body, raw, path)


def in_query(path: str, query_model: str | None) -> Named:
    return Named(query_model or None, not query_model, {}, None, path)


def in_form(path: str, raw: bytes, boundary: str, form_model: str | None, audio: bytes | None) -> Named:
    """A multipart form's `model` field; its audio file's length read from its header, when it says it."""
    return Named(form_model or None, not form_model, {}, raw, path, boundary, _seconds(audio))


def _seconds(audio: bytes | None) -> float | None:
    if audio is None:
        return 0.0
    try:
        return inspect(audio).seconds
    except InvalidRequest:
        return None  # its box refuses it as one proxy would; a key limited in audio seconds cannot be counted


def _json_object(raw: bytes) -> dict | None:
    """The JSON body; None when it is no JSON (the route's parser names the error)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    return body


@dataclass(frozen=True)
class Sent:
    """The client's request as the front got it."""

    model: str
    body: dict  # the JSON body, parsed ({} for a form or none)
    raw: bytes | None  # the body's bytes, relayed as they are (None: none)
    method: str
    path: str  # with its query
    headers: dict
    anthropic: bool  # on Anthropic's paths (its errors in its shape)
    audio_seconds: float | None = 0.0  # of a form's audio file (None: not known)
    form: bool = False  # a multipart form (its tokens are the box's to count, not bounded by its bytes)


@dataclass(frozen=True)
class Relayed:
    """The box's answer: its status, headers, body (bytes, or pieces of a stream) and what closes it."""

    status: int
    headers: dict
    body: object
    close: Callable[[], None]


def relay(fleet, metrics, sent: Sent, caller, ticket, record, *, sees_everything: bool) -> Relayed:
    """`sent` answered by a box serving its model: a 404 for a model the caller's key may not use, the
    key's limits admitted first, FleetUnavailable (without addresses for a tenant) when no box answers."""
    if not caller.allows(sent.model, sent.model):
        raise ModelNotFound(f"model {sent.model!r} does not exist", param="model")
    if ticket is not None:  # once, here, as for a request served here: the box counts no limit of its own
        ticket.admit(reply_bound(sent.body), sent.audio_seconds)
        if not sent.form:
            ticket.before_generation(len(sent.raw or b""), lambda: prompt_bound(sent.body))
    try:
        relayed = fleet.forward(
            sent.model,
            sent.body,
            sent.raw,
            sent.method,
            sent.path,
            _as_seen(sent.headers, sees_everything, mcp_loop.grants_of(caller)),
            caller=caller.name,
            anthropic=sent.anthropic,
            on_passed_over=lambda box: metrics.child(metrics.fleet_passed_over, box).inc(),
        )
    except FleetUnavailable as exc:
        if not sees_everything:
            exc.message = without_addresses(exc.message, "<a box>")  # no addresses to a tenant (its Retry-After kept)
        raise
    metrics.child(metrics.fleet_relays, relayed.candidate.address, relayed.candidate.route, str(relayed.status)).inc()
    headers = {**relayed.headers, ROUTE_HEADER: relayed.candidate.route}
    if sees_everything:  # the box's address: only to who sees every address
        headers["X-Fleet-Box"] = relayed.candidate.address
    return Relayed(relayed.status, headers, _recorded(relayed, sent, record), relayed.close)


def _as_seen(headers: dict, sees_everything: bool, grants: tuple[str, ...] | None) -> dict:
    """The client's headers, saying to the box whether the client sees everything there (its llama-servers'
    addresses, keep_alive's loads) or is a tenant, and which named MCP servers it may use (a box has no
    keys to read them from), as one proxy would tell them apart (a client's own say of either dropped)."""
    ours = (TENANT_HEADER.lower(), GRANTS_HEADER.lower())
    headers = {name: value for name, value in headers.items() if name.lower() not in ours}
    if grants is not None:
        headers[GRANTS_HEADER] = ",".join(grants)
    return headers if sees_everything else {**headers, TENANT_HEADER: "1"}


def _recorded(relayed, sent: Sent, record):
    """The answer's body; its usage counted on the record (a stream's when it ends, then the record closed:
    app._close_record leaves streams to close their own)."""
    if record is None:
        return relayed.body
    record.model, record.requested_model = sent.model, sent.model
    record.audio_seconds = sent.audio_seconds or 0.0
    record.upstream, record.route = relayed.candidate.address, relayed.candidate.route
    record.status = relayed.status
    if isinstance(relayed.body, bytes):
        _count(record, counts_in(_json_or_none(relayed.body)))
        return relayed.body
    return _counted_stream(relayed.body, record)


def _counted_stream(pieces, record) -> Iterator[bytes]:
    """A relayed stream's pieces; its usage counted and its record closed when it ends."""
    usage = StreamUsage()
    try:
        for piece in pieces:
            usage.feed(piece)
            yield piece
    finally:
        _count(record, usage.counts)
        record.close()


def _count(record, counts) -> None:
    if counts is not None:
        record.count(*counts)


def _json_or_none(raw: bytes):
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
