"""A fleet front's relay, driven by the route declarations (issue 49): every route that names its model
(`model_in`: its JSON body, its form or its query) and that a key of the model may call is relayed to a box
of that model, a request naming none to the fleet's default model (named to its box), and nothing else.
The front is the app a user starts with `--fleet` and no models; its fleet is a stand-in that records
what it was asked to relay (the real relay, placement and boxes are tests/e2e/test_fleet_routes.py's)."""

from __future__ import annotations

import dataclasses
import io
import re
import time
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest
from werkzeug.datastructures import FileStorage

from api_like_oai import create_app
from api_like_oai.arguments import build_parser, settings_from_args
from api_like_oai.fleet.placement import Candidate
from api_like_oai.fleet.relay import Relayed
from api_like_oai.routes import STATE_KEY, declare, state
from api_like_oai.routes.docs import resolved
from api_like_oai.routes.fleet import model_routes, relays
from api_like_oai.routes.responses import RESOLVED_AT_FRONT

REDIS_NEVER_REACHED = "redis://127.0.0.1:1/0"  # the fleet is a stand-in here

WAV = (  # a header and no samples: 0 seconds
    b"RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x40\x1f\x00\x00\x80\x3e\x00\x00\x02\x00\x10\x00"
    b"data\x00\x00\x00\x00"
)
SECRET = "s3cret-of-the-fleet-0123456789"
HELLO_TURN = [{"role": "user", "content": "hi"}]


class RecordingFleet:
    """The fleet as a front sees it: one model `m` (the boxes' default), every relay recorded and answered 200."""

    def __init__(self):
        self.sent: list[dict] = []

    def serves(self, model: str) -> bool:
        return model in ("m", "gone")

    def known(self) -> set[str]:
        return {"m"}

    def default_model(self, configured=None) -> str:
        return configured or "m"

    def forward(self, model, body, raw, method, path, headers, **_) -> Relayed:
        if model == "gone":
            from api_like_oai.fleet.front import BoxesGone

            raise BoxesGone(model)
        self.sent.append({"model": model, "body": body, "raw": raw, "method": method, "path": path, "headers": headers})
        answer = b'{"relayed": true}'
        return Relayed(200, {"Content-Type": "application/json"}, answer, Candidate("http://box", "loaded"), lambda: None)


@pytest.fixture(scope="module")
def front_app(tmp_path_factory):
    secret = tmp_path_factory.mktemp("fleet") / "secret"
    secret.write_text(SECRET + "\n")
    flags = ["--fleet", REDIS_NEVER_REACHED, "--fleet-secret-file", str(secret)]  # no models: a front
    app = create_app(settings_from_args(build_parser().parse_args(flags)))
    app.extensions[STATE_KEY] = dataclasses.replace(state(app), fleet=RecordingFleet())
    return app


@pytest.fixture
def front(front_app):
    fleet = state(front_app).fleet
    fleet.sent.clear()
    return front_app.test_client(), fleet


def _relayed_routes() -> list[tuple[declare.Declaration, str, str]]:
    return [
        (declared, method, declared.paths[0])
        for declared in declare.all_declarations()
        if relays(declared)
        for method in declared.methods
        if method != "HEAD"
    ]


def _ask(client, declared: declare.Declaration, method: str, path: str, model: str | None):
    """The route asked for `model` (None: naming none) where its declaration says it names it."""
    named = {"model": model} if model else {}
    if declared.model_in == "query":
        return client.open(path, method=method, query_string=named)
    if declared.model_in == "form":
        upload = FileStorage(io.BytesIO(WAV), "tone.wav", content_type="audio/wav")
        return client.open(path, method=method, data={**named, "file": upload}, content_type="multipart/form-data")
    if path in RESOLVED_AT_FRONT:  # read at the front, as its own request (services/fleet_responses.py)
        kept = {"store": False} if path.endswith("/responses") else {}  # the box's answer passed on as it is
        return client.open(path, method=method, json={**named, "input": "hi", **kept})
    return client.open(path, method=method, json={**named, "messages": [{"role": "user", "content": "hi"}]})


def _model_of(sent: dict) -> str | None:
    if sent["raw"] is None:
        return parse_qs(urlsplit(sent["path"]).query).get("model", [None])[0]
    if b"form-data" in sent["raw"]:
        found = re.search(rb'name="model"\r\n\r\n([^\r]*)\r\n', sent["raw"])
        return found.group(1).decode() if found else None
    return orjson.loads(sent["raw"]).get("model")


@pytest.mark.parametrize(("declared", "method", "path"), _relayed_routes(), ids=lambda value: getattr(value, "endpoint", value))
def test_every_route_naming_a_keys_model_is_relayed_from_a_front_to_its_box(front, declared, method, path):
    client, fleet = front
    answer = _ask(client, declared, method, path, "m")
    assert answer.status_code == 200 and answer.get_json() == {"relayed": True}, answer.get_data(as_text=True)[:300]
    (sent,) = fleet.sent
    assert (sent["model"], sent["method"], urlsplit(sent["path"]).path, _model_of(sent)) == ("m", method, path, "m")


@pytest.mark.parametrize(("declared", "method", "path"), _relayed_routes(), ids=lambda value: getattr(value, "endpoint", value))
def test_a_request_naming_no_model_goes_to_the_fleets_default_model_named_to_its_box(front, declared, method, path):
    client, fleet = front
    answer = _ask(client, declared, method, path, None)
    if _requires_model(declared):  # Ollama's, Anthropic's Messages: one proxy's 400 too, in the API's shape
        assert answer.status_code == 400 and not fleet.sent
        return
    assert answer.status_code == 200, answer.get_data(as_text=True)[:300]
    (sent,) = fleet.sent
    assert sent["model"] == "m" and _model_of(sent) == "m"  # the box serves it, whatever its own default


def _requires_model(declared: declare.Declaration) -> bool:
    schema = resolved(declared.request) if declared.request is not None else {}
    schema = schema if isinstance(schema, dict) else schema.model_json_schema()
    return "model" in schema.get("required", ()) or any("model" in one.get("required", ()) for one in schema.get("anyOf", ()))


def test_a_route_whose_request_names_a_model_declares_where_so_that_a_front_relays_it():
    """A new route that takes `model` but declares no `model_in` would be a 404 at every front."""
    for declared in declare.all_declarations():
        if declared.access != declare.KEY:
            continue
        schema = resolved(declared.request) if declared.request is not None else {}
        schema = schema if isinstance(schema, dict) else schema.model_json_schema()
        query = resolved(declared.query) if declared.query is not None else None
        takes_model = "model" in schema.get("properties", {}) or (query is not None and "model" in query.model_fields)
        assert not takes_model or relays(declared), declared.endpoint


def test_what_a_front_relays_and_what_it_never_does():
    relayed = model_routes()
    assert {"/api/chat", "/api/show", "/v1/rerank", "/v2/rerank", "/completion", "/props", "/v1/audio/transcriptions"} <= relayed
    assert {"/v1/responses/input_tokens", "/v1/messages/count_tokens", "/tokenize", "/v1/internal/model/info"} <= relayed
    assert not relayed & {"/models/load", "/v1/internal/model/load", "/api/delete", "/v1/fleet/load", "/api/tags", "/v1/models"}


def test_a_tenants_request_tells_the_box_so_and_a_clients_own_say_is_dropped(front):
    client, fleet = front
    answer = client.post("/v1/chat/completions", json={"model": "m"}, headers={"X-Fleet-Tenant": "0"})
    assert answer.status_code == 200
    # no key asked here: the caller sees everything, and the client's header does not reach the box
    assert not {name.lower() for name in fleet.sent[0]["headers"]} & {"x-fleet-tenant"}


def test_a_fleet_call_for_a_model_the_box_does_not_serve_is_refused_so_the_front_tries_the_next(front):
    client, fleet = front
    answer = client.get("/props", query_string={"model": "elsewhere"}, headers={"X-Fleet-Secret": SECRET})
    assert answer.status_code == 503 and not fleet.sent


def test_a_relayed_answers_usage_is_read_in_each_apis_shape():
    from api_like_oai.fleet.usage import StreamUsage, counts_in, reply_bound

    assert counts_in({"done": True, "prompt_eval_count": 31, "eval_count": 4}) == (31, 4, 0)  # Ollama's
    native = {"content": "x", "tokens_evaluated": 12, "tokens_predicted": 3, "timings": {"cache_n": 10}}
    assert counts_in(native) == (12, 3, 10)  # llama.cpp's /completion
    stream = StreamUsage()
    for line in (b'{"message":{"content":"a"},"done":false}\n', b'{"done":true,"prompt_eval_count":9,"eval_count":2}\n'):
        stream.feed(line)  # Ollama's NDJSON stream, its last line
    assert stream.counts == (9, 2, 0)
    assert reply_bound({"n_predict": 7}) == 7 and reply_bound({"options": {"num_predict": 5}}) == 5


def test_a_pooled_connection_to_a_restarted_box_is_retried_fresh_for_every_kind_of_route():
    """Each connection closed after one answer, as a box restarting closes its idle ones: a form, a query
    and a JSON body are each retried once on a fresh connection, and reach the box whole."""
    from api_like_oai.fleet.relay import Relay

    from .test_http_client import ScriptedServer

    answer = [b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n{"status":"ok"}']
    box = ScriptedServer([answer] * 4, close_after=1)
    relay = Relay("secret", connect_timeout=2, read_timeout=5)
    form = b'--b0\r\nContent-Disposition: form-data; name="model"\r\n\r\nm\r\n--b0--\r\n'
    sent = [
        ("POST", "/v1/chat/completions", b'{"model": "m"}', {"Content-Type": "application/json"}),
        ("POST", "/v1/audio/transcriptions", form, {"Content-Type": "multipart/form-data; boundary=b0"}),
        ("GET", "/props?model=m", None, {}),
        ("POST", "/api/chat", b'{"model": "m"}', {"content-type": "application/json"}),
    ]
    for method, path, body, headers in sent:
        time.sleep(0.05)  # the box has closed the pooled connection meanwhile
        relayed = relay.send([Candidate(box.url, "loaded")], method, path, body, headers, caller="c", anthropic=False)
        assert (relayed.status, relayed.body) == (200, b'{"status":"ok"}')
    assert box.connections == 4
    assert b"Content-Type: multipart/form-data; boundary=b0\r\n" in box.heads[1]
    assert box.heads[2].startswith(b"GET /props?model=m ") and b"Content-Length" not in box.heads[2]


def test_a_model_the_fleet_does_not_have_is_each_apis_own_404_at_a_front(front):
    client, fleet = front
    ollama = client.post("/api/chat", json={"model": "other", "messages": []})
    assert (ollama.status_code, ollama.get_json()) == (404, {"error": 'model "other" not found, try pulling it first'})
    openai = client.post("/v1/chat/completions", json={"model": "other", "messages": []})
    assert openai.status_code == 404 and openai.get_json()["error"]["message"].endswith("known models: m")
    native = client.get("/props", query_string={"model": "other"})
    assert native.status_code == 404 and not fleet.sent


def test_a_body_that_is_no_json_is_the_routes_own_400_never_the_default_models(front):
    client, fleet = front
    broken = client.post("/v1/chat/completions", data=b"{not json", content_type="application/json")
    assert broken.status_code == 400 and not fleet.sent


def test_ollamas_older_name_field_names_the_model_too(front):
    client, fleet = front
    assert client.post("/api/show", json={"name": "m"}).status_code == 200
    assert fleet.sent[0]["model"] == "m" and orjson.loads(fleet.sent[0]["raw"]) == {"name": "m"}  # relayed as sent


class RecordsInRedis:
    """Redis as Membership reads it: the boxes' records."""

    def __init__(self, *records: dict):
        self.records = {record["address"]: record for record in records}

    def smembers(self, _key):
        return {address.encode() for address in self.records}

    def mget(self, keys):
        return [orjson.dumps(self.records[key.rsplit(":box:", 1)[1]]) for key in keys]


def test_the_fleets_default_model_is_the_fronts_own_else_the_first_boxs_else_the_first_by_name():
    from api_like_oai.fleet.front import FleetFront
    from api_like_oai.fleet.membership import box_record
    from api_like_oai.fleet.settings import FleetSettings

    def front(*defaults):
        records = [
            box_record(f"http://10.0.0.{n + 2}:8081", {}, ["zeta", "alpha", "beta"], [], 0.0, default=default)
            for n, default in enumerate(defaults)
        ]
        return FleetFront(
            FleetSettings("redis://10.0.0.1:6379/0"), connect_timeout=1, read_timeout=1, connection=RecordsInRedis(*records)
        )

    assert front("beta", "zeta").default_model() == "beta"  # the first box's (by address), as one box's own
    assert front("beta").default_model("zeta") == "zeta"  # the front's config names it
    assert front(None, "zeta").default_model() == "zeta"  # a box that says none is passed over
    assert front(None).default_model() == "alpha"  # no box says: the first of the fleet's by name


def test_a_fronts_ollama_model_list_asks_each_box_at_most_every_few_seconds_and_whats_loaded_every_time(monkeypatch):
    """Ollama's clients poll /api/tags (Open WebUI on every page): a front keeps each box's list of its
    models for CARDS_SECONDS, asks /api/ps (what is loaded now) every time, and asks a box that did not
    answer again at once."""
    from api_like_oai.fleet import front as front_module
    from api_like_oai.fleet.membership import box_record
    from api_like_oai.fleet.settings import FleetSettings

    box = box_record("http://10.0.0.2:8081", {}, ["m"], [], 0.0)
    fleet = front_module.FleetFront(
        FleetSettings("redis://10.0.0.1:6379/0"), connect_timeout=1, read_timeout=1, connection=RecordsInRedis(box)
    )
    asked, answers = [], {"/api/tags": [{"name": "m"}], "/api/ps": [{"name": "m"}]}
    monkeypatch.setattr(fleet.relay, "listing", lambda address, path: asked.append(path) or answers[path])
    now = [100.0]
    monkeypatch.setattr(front_module.time, "monotonic", lambda: now[0])
    for _ in range(3):
        assert fleet.listing("/api/tags") == [{"name": "m"}] and fleet.listing("/api/ps") == [{"name": "m"}]
    assert asked.count("/api/tags") == 1 and asked.count("/api/ps") == 3
    now[0] += front_module.CARDS_SECONDS + 1
    fleet.listing("/api/tags")
    assert asked.count("/api/tags") == 2
    answers["/api/tags"] = []  # the box restarting
    now[0] += front_module.CARDS_SECONDS + 1
    fleet.listing("/api/tags")
    fleet.listing("/api/tags")
    assert asked.count("/api/tags") == 4


@pytest.mark.parametrize(
    ("path", "shape"),
    [("/api/chat", lambda body: body["error"]), ("/v1/chat/completions", lambda body: body["error"]["message"])],
)
def test_a_model_whose_boxes_are_gone_is_a_503_to_retry_in_the_apis_shape(front, path, shape):
    client, _ = front
    answer = client.post(path, json={"model": "gone", "messages": HELLO_TURN})
    assert answer.status_code == 503 and answer.headers["Retry-After"] == "5"
    assert "'gone'" in shape(answer.get_json())


def test_a_box_answering_a_kept_turn_with_no_response_is_a_bad_upstream_not_a_500(front):
    """A stored turn needs the box's answer to be a response (it is kept under its id): anything else is
    the box's fault, said as such (502), never the front's crash."""
    client, fleet = front
    answer = client.post("/v1/responses", json={"model": "m", "input": "hi"})
    assert answer.status_code == 502 and answer.get_json()["error"]["code"] == "bad_upstream_response"
    assert len(fleet.sent) == 1
