"""A front's relay of a client's request to the fleet's box for its model (fleet/ chooses the box and
sends): the key's limits admitted once, here (a box counts none of its own), the answer's usage counted
on the request's record, the boxes' addresses kept from a tenant. No Flask: the view
(routes/fleet.forward_elsewhere) hands over what the request holds and writes the answer as HTTP."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import orjson

from ..errors import FleetUnavailable, ModelNotFound, without_addresses
from ..fleet.settings import ROUTE_HEADER
from ..fleet.usage import StreamUsage, counts_in, prompt_bound, reply_bound


@dataclass(frozen=True)
class Sent:
    """The client's request as the front got it."""

    model: str
    body: dict  # the JSON body, parsed
    raw: bytes  # the body's bytes, relayed as they are
    method: str
    path: str  # with its query
    headers: dict
    anthropic: bool  # on Anthropic's paths (its errors in its shape)


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
        ticket.admit(reply_bound(sent.body))
        ticket.before_generation(len(sent.raw), lambda: prompt_bound(sent.body))
    try:
        relayed = fleet.forward(
            sent.model,
            sent.body,
            sent.raw,
            sent.method,
            sent.path,
            sent.headers,
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
    return Relayed(relayed.status, headers, _recorded(relayed, sent.model, record), relayed.close)


def _recorded(relayed, model: str, record):
    """The answer's body; its usage counted on the record (a stream's when it ends, then the record closed:
    app._close_record leaves streams to close their own)."""
    if record is None:
        return relayed.body
    record.model, record.requested_model = model, model
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
