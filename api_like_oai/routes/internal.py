from __future__ import annotations

from collections import Counter

from flask import Blueprint, current_app, g, jsonify, request

from ..answers import (
    ChatPromptResponse,
    DecodeResponse,
    EncodeResponse,
    LiveRequestList,
    StopGenerationResponse,
    TokenCountResponse,
)
from ..errors import ProxyError, UpstreamUnavailable
from ..protocol import ChatCompletionRequest, DecodeRequest, EncodeRequest
from ..services import preview
from ..services.passthrough import needs
from . import current_caller, door, lookup_model, offered_key, parse_body, sees_everything, state
from .declare import ADMIN, GENERATES, KEY, OWN, POOL, PUBLIC, ModelQuery, route

bp = Blueprint("internal", __name__)
METRICS_KEY = "api_like_oai.metrics"  # where app.create_app keeps /metrics' text: what only the app layer reads
POOL_METRICS_KEY = "api_like_oai.pool_metrics"  # and /metrics/pool's


@route(
    bp,
    "/metrics",
    methods=("GET",),
    summary="Prometheus metrics (the admin key once one is configured)",
    access=ADMIN,
    media=("text/plain",),
    recorded=False,
)
def metrics():
    """Every model's and key's counts (and with --upstream-metrics the llama-servers' addresses): not a tenant's."""
    return current_app.extensions[METRICS_KEY]()


@route(
    bp,
    "/metrics/pool",
    methods=("GET",),
    summary="The model-server protocol's gauges per model, for an inference pool's endpoint picker "
    "(public with --open-pool-metrics, else the admin key once one is configured)",
    access=POOL,
    media=("text/plain",),
    recorded=False,  # the picker scrapes it every 50 ms
)
def pool_metrics():
    """Requests waiting and running, KV-cache use and its size, per model the proxy starts."""
    return current_app.extensions[POOL_METRICS_KEY]()


@route(
    bp,
    "/health",
    methods=("GET",),
    summary="200 when every upstream answers its health check, else 503 saying why (public; addresses to the admin)",
    access=PUBLIC,
    statuses=(503,),
    recorded=False,
)
def health():
    """200 when every upstream answers its health check, else 503 saying why. Public: the upstreams'
    addresses only to a caller who sees everything (the admin key), the reasons to anyone."""
    upstreams, addressed = {}, _health_sees_addresses()
    started = state().supervisor.ask("status")["models"] if state().supervisor is not None else {}
    for model in state().registry.models.values():
        upstreams |= _started_health(started[model.name], addressed) if model.name in started else model.check_health()
    healthy = all(status == "ok" for status in upstreams.values())
    body = {"status": "ok" if healthy else "unavailable"} | ({"upstreams": upstreams} if addressed else {})
    if not healthy:
        failing = [(url, status) for url, status in upstreams.items() if status != "ok"]
        reasons = (
            [f"{url}: {status}" for url, status in failing]
            if addressed
            else [
                f"{count} {status}"
                for status, count in Counter(status.replace(url, "<upstream>") for url, status in failing).items()
            ]
        )
        body |= UpstreamUnavailable(f"upstream not ready ({len(failing)} of {len(upstreams)}): " + "; ".join(reasons)).to_dict()
    return jsonify(body), 200 if healthy else 503


def _health_sees_addresses() -> bool:
    """/health asks no key; the one it brings, if any, decides whether addresses are shown."""
    gate = state().gate
    try:
        return sees_everything(gate.identify(offered_key()))
    except ProxyError:  # no key, a wrong one, or the store down: the public answer
        return False


def _started_health(status: dict, addressed: bool) -> dict[str, str]:
    """A model the proxy starts is healthy unless it failed: unloaded is its resting state, and loading
    is what the next request waits for. Why it failed (its child's log lines: paths, addresses) only to
    a caller who sees everything; to the others, its exit code."""
    if status["value"] != "failed":
        return {url: "ok" for url in status["upstreams"]}
    reason = status.get("error") if addressed else f"failed to start (exit code {status.get('exit_code')})"
    return {url: reason or "failed" for url in status["upstreams"]}


@route(
    bp,
    "/api/hello",
    methods=("GET", "HEAD"),
    summary="Claude Code's connectivity probe (public)",
    access=PUBLIC,
    recorded=False,
)
def hello():
    """Claude Code's connectivity probe (HEAD before its first request, unless its non-essential
    traffic is off): the proxy is reachable. It says nothing of the upstreams; /health does."""
    return jsonify({"status": "ok"})


@route(
    bp,
    "/v1/internal/model/info",
    methods=("GET",),
    summary="The model's template, context and upstreams (their addresses to the admin)",
    access=KEY,
    query=ModelQuery,
    model_in="query",
)
def model_info():
    """The model's template, context and upstreams (their addresses only to a caller who sees everything)."""
    model, _ = lookup_model(request.args.get("model"))
    info = model.info()
    if not sees_everything():
        info["upstreams"] = [{**upstream, "url": None} for upstream in info["upstreams"]]
    return jsonify(info)


@route(
    bp,
    "/v1/internal/chat-prompt",
    summary="The prompt a chat request would send, without generating",
    access=KEY,
    request=ChatCompletionRequest,
    answer=ChatPromptResponse,
    body="json",
    model_in="json",
    refusals=GENERATES,
)
def chat_prompt():
    """The exact prompt a chat request would send upstream, without generating."""
    chat_request = parse_body(ChatCompletionRequest)
    model, _ = lookup_model(chat_request.model)
    needs(model, not model.upstream.capabilities.renders_prompts, "show a chat's prompt (it renders chats itself)")
    return jsonify(preview.chat_prompt(chat_request, model))


@route(
    bp,
    "/v1/internal/encode",
    summary="Tokenize text",
    access=KEY,
    request=EncodeRequest,
    answer=EncodeResponse,
    body="json",
    model_in="json",
)
def encode():
    encode_request = parse_body(EncodeRequest)
    model, _ = lookup_model(encode_request.model)
    needs(model, model.upstream.capabilities.tokenize, "tokenize text (it has no tokenizer endpoint)")
    tokens = door(model).tokenize(encode_request.text)
    return jsonify({"tokens": tokens, "length": len(tokens)})


@route(
    bp,
    "/v1/internal/decode",
    summary="Detokenize token ids",
    access=KEY,
    request=DecodeRequest,
    answer=DecodeResponse,
    body="json",
    model_in="json",
    refusals=("token_out_of_vocabulary",),
)
def decode():
    decode_request = parse_body(DecodeRequest)
    model, _ = lookup_model(decode_request.model)
    needs(model, model.upstream.capabilities.tokenize, "turn tokens into text (it has no tokenizer endpoint)")
    return jsonify({"text": door(model).detokenize(decode_request.tokens)})


@route(
    bp,
    "/v1/internal/token-count",
    summary="Count tokens",
    access=KEY,
    request=EncodeRequest,
    answer=TokenCountResponse,
    body="json",
    model_in="json",
)
def token_count():
    encode_request = parse_body(EncodeRequest)
    model, _ = lookup_model(encode_request.model)
    needs(model, model.upstream.capabilities.tokenize, "count tokens (it has no tokenizer endpoint)")
    return jsonify({"length": len(door(model).tokenize(encode_request.text))})


@route(
    bp,
    "/v1/internal/stop-generation",
    summary="End every generation in flight, in every worker",
    access=ADMIN,
    answer=StopGenerationResponse,
)
def stop_generation():
    """End every generation in flight, in every worker; each finishes with finish_reason "stop"."""
    stopped = state().inflight.stop_all()
    if state().siblings is not None:
        stopped += state().siblings.stop_all()
    return jsonify({"stopped": stopped})


@route(
    bp,
    "/v1/internal/requests",
    methods=("GET",),
    summary="The requests in flight and their phase (a key: its own)",
    access=OWN,
    answer=LiveRequestList,
)
def requests_in_flight():
    """This worker's requests not yet answered, with their live phase (RequestRecord.live): queued,
    loading model, prefill (with its percentage) or generating (tokens so far, tokens per second).
    Nothing of a prompt or a key. With several workers, each answers for its own requests. A caller who
    does not see everything (a managed key, a flag's key beside an admin key) sees its key's requests only,
    without their upstreams' addresses."""
    own_id = g.record.request_id if g.get("record") else None
    caller = current_caller()
    everything = sees_everything(caller)
    live = [
        record.live() if everything else {**record.live(), "upstream": None}
        for record in state().inflight.requests.records()
        if record.request_id != own_id and (everything or getattr(record, "key_name", None) == caller.name)
    ]
    return jsonify({"object": "list", "data": live})
