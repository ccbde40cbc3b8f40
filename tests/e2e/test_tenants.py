"""Keys that hold against their holders (issue 43), probed as a tenant would: a proxy that starts two
models `a` and `b` itself (--models-dir, the real llama-server), with a store, an admin key from a file
and managed keys; it is a box of a fleet (issue 37: a real Redis), whose other box serves model `c`
(a fake llama.cpp). Every route the app has (those of /openapi.json, llama.cpp's native ones, the
fleet's, the rest) is tried with no key, a key of models `a` and `c`, a key of model `b` only, a
rate-limited key of `a` and the admin key, and its outcome checked against the route's row in ROUTES;
a route without a row fails."""

from __future__ import annotations

import errno
import itertools
import json
import socket
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import requests

from api_like_oai import create_app
from api_like_oai.arguments import parse_settings

from ..servers import eventually, fleet_redis, free_port

ADMIN_KEY = "sk-admin-of-the-tenants-test"
NONE, OWN, OTHER, LIMITED, ADMIN = "no key", "key of a", "key of b", "rate-limited key of a", "admin key"
CALLERS = (NONE, OWN, OTHER, LIMITED, ADMIN)
CHAT = {"model": "a", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
PROMPT = {"model": "a", "prompt": "Hi", "max_tokens": 2}
MESSAGES = {"model": "a", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}
RESPONSE = {"model": "a", "input": "Hi", "max_output_tokens": 16, "store": True}
NAMES = (f"made-{n}" for n in itertools.count())


@dataclass(frozen=True)
class Kind:
    """What each caller gets from a kind of route: a status (a set: any of them)."""

    name: str
    answers: dict


def ok(*statuses: int) -> frozenset:
    return frozenset(statuses or (200,))


PUBLIC = Kind("public", {caller: ok() for caller in CALLERS})
# A model's or a stored object's: the key of another model (or another owner) gets a 404 as if it did not
# exist, a key over its limits a 429, the key's own and the admin key the route's answer.
OWN_ONLY = Kind("own-only", {NONE: ok(401), OWN: ok(), OTHER: ok(404), LIMITED: ok(429), ADMIN: ok()})
# A list or a view of what the caller may see (not counted against limits): every key, each its own part.
OWN_VIEW = Kind("own view", {NONE: ok(401), OWN: ok(), OTHER: ok(), LIMITED: ok(), ADMIN: ok()})
# A model's card: another model's key does not see it.
OWN_CARD = Kind("own card", {NONE: ok(401), OWN: ok(), OTHER: ok(404), LIMITED: ok(), ADMIN: ok()})
# The caller's own usage: counted against its limits.
OWN_USAGE = Kind("own usage", {NONE: ok(401), OWN: ok(), OTHER: ok(), LIMITED: ok(429), ADMIN: ok()})
# Writing or listing the caller's own stored objects: every key its own, counted against its limits.
OWN_OBJECTS = Kind("own objects", {NONE: ok(401), OWN: ok(), OTHER: ok(), LIMITED: ok(429), ADMIN: ok()})
ADMIN_ONLY = Kind("admin-only", {NONE: ok(401), OWN: ok(403), OTHER: ok(403), LIMITED: ok(403), ADMIN: ok()})
# A box's routes for the fleet's other instances: only with the fleet secret, whatever the key (even the admin's).
FLEET_ONLY = Kind("fleet calls only", {caller: ok(401) for caller in CALLERS})
FLEET_SECRET = "the-tenants-fleet-secret-0123456789"


@dataclass(frozen=True)
class Row:
    kind: Kind
    request: Callable  # (probe, caller) -> (method, path, json body or None)
    served: frozenset = field(default_factory=ok)  # what the route itself answers when let through

    def expected(self, caller: str) -> frozenset:
        answers = self.kind.answers[caller]
        return self.served if answers == ok() else answers


@dataclass(frozen=True)
class Form:
    """A multipart body (OpenAI's audio routes): its fields and files."""

    data: dict
    files: dict


def wav(seconds: float = 0.5, rate: int = 16000) -> bytes:
    """A silent 16-bit mono WAV file."""
    samples = b"\0\0" * int(seconds * rate)
    header = b"RIFF" + (36 + len(samples)).to_bytes(4, "little") + b"WAVEfmt " + (16).to_bytes(4, "little")
    header += (1).to_bytes(2, "little") + (1).to_bytes(2, "little") + rate.to_bytes(4, "little")
    header += (rate * 2).to_bytes(4, "little") + (2).to_bytes(2, "little") + (16).to_bytes(2, "little")
    return header + b"data" + len(samples).to_bytes(4, "little") + samples


AUDIO = Form({"model": "a"}, {"file": ("clip.wav", wav(), "audio/wav")})
BATCH_LINE = {"custom_id": "one", "method": "POST", "url": "/v1/chat/completions", "body": CHAT}
BATCH_FILE = Form({"purpose": "batch"}, {"file": ("lines.jsonl", json.dumps(BATCH_LINE).encode() + b"\n", "application/jsonl")})
MESSAGE_BATCH = {"requests": [{"custom_id": "one", "params": MESSAGES}]}


def new_batch(probe, caller):
    """A batch of the caller's own input file (the others try a's)."""
    return "POST", "/v1/batches", {"input_file_id": probe.objects(caller)["file"], "endpoint": "/v1/chat/completions"}


def post(path: str, body: dict | None = None):
    return lambda probe, caller: ("POST", path, body)


def get(path: str):
    return lambda probe, caller: ("GET", path, None)


def of_own(method: str, template: str, fresh: bool = False):
    """A request on a stored object: the caller's own (the admin's, the key of a's), else the key of a's."""

    def make(probe, caller):
        return method, template.format(**probe.objects(caller, fresh)), None

    return make


ROUTES: dict[tuple[str, str], Row] = {
    ("GET", "/health"): Row(PUBLIC, get("/health")),
    ("GET", "/api/hello"): Row(PUBLIC, get("/api/hello")),
    ("GET", "/openapi.json"): Row(PUBLIC, get("/openapi.json")),
    ("GET", "/docs"): Row(PUBLIC, get("/docs")),
    ("GET", "/docs/static/<path:filename>"): Row(PUBLIC, get("/docs/static/swagger-ui.css")),
    ("GET", "/ui"): Row(PUBLIC, get("/ui")),
    ("GET", "/ui/"): Row(PUBLIC, get("/ui/")),
    ("GET", "/ui/<path:name>"): Row(PUBLIC, get("/ui/app.js")),
    # Flask's own static folder, which the app does not have: nothing there for anyone, after the key check.
    ("GET", "/static/<path:filename>"): Row(
        Kind("no such file", {NONE: ok(401), OWN: ok(404), OTHER: ok(404), LIMITED: ok(404), ADMIN: ok(404)}),
        get("/static/x.css"),
    ),
    ("GET", "/metrics"): Row(ADMIN_ONLY, get("/metrics")),
    ("GET", "/metrics/pool"): Row(ADMIN_ONLY, get("/metrics/pool")),  # open to all only with --open-pool-metrics
    # The OpenAI, Anthropic and Responses APIs: a model's.
    **{("POST", path): Row(OWN_ONLY, post(path, CHAT)) for path in ("/v1/chat/completions", "/chat/completions")},
    **{("POST", path): Row(OWN_ONLY, post(path, PROMPT)) for path in ("/v1/completions", "/completions")},
    **{
        ("POST", path): Row(OWN_ONLY, post(path, {"model": "a", "input": "Hi"}), ok(400))  # no --embeddings
        for path in ("/v1/embeddings", "/embeddings")
    },
    ("POST", "/v1/messages"): Row(OWN_ONLY, post("/v1/messages", MESSAGES)),
    ("POST", "/v1/messages/count_tokens"): Row(
        OWN_ONLY, post("/v1/messages/count_tokens", {"model": "a", "messages": MESSAGES["messages"]})
    ),
    **{("POST", path): Row(OWN_ONLY, post(path, RESPONSE)) for path in ("/v1/responses", "/responses")},
    ("POST", "/v1/responses/input_tokens"): Row(OWN_ONLY, post("/v1/responses/input_tokens", RESPONSE)),
    ("POST", "/v1/responses/compact"): Row(OWN_ONLY, post("/v1/responses/compact", {"model": "a", "input": "Hi"})),
    # The WebSocket mode's handshake: a key first; without the upgrade, a 400 saying to send it.
    **{("GET", path): Row(OWN_VIEW, get(path), ok(400)) for path in ("/v1/responses", "/responses")},
    **{("GET", path): Row(OWN_VIEW, get(path)) for path in ("/v1/models", "/models")},
    **{("GET", path + "/<path:model_id>"): Row(OWN_CARD, get(path + "/a")) for path in ("/v1/models", "/models")},
    # Stored responses and conversations: the owner's.
    ("GET", "/v1/responses/<response_id>"): Row(OWN_ONLY, of_own("GET", "/v1/responses/{response}")),
    ("DELETE", "/v1/responses/<response_id>"): Row(OWN_ONLY, of_own("DELETE", "/v1/responses/{response}", fresh=True)),
    ("GET", "/v1/responses/<response_id>/input_items"): Row(OWN_ONLY, of_own("GET", "/v1/responses/{response}/input_items")),
    ("POST", "/v1/conversations"): Row(
        Kind("a write", {**OWN_VIEW.answers, LIMITED: ok(429)}), post("/v1/conversations", {"items": []})
    ),
    ("GET", "/v1/conversations/<conversation_id>"): Row(OWN_ONLY, of_own("GET", "/v1/conversations/{conversation}")),
    ("POST", "/v1/conversations/<conversation_id>"): Row(
        OWN_ONLY,
        lambda probe, caller: (
            "POST",
            "/v1/conversations/{conversation}".format(**probe.objects(caller)),
            {"metadata": {"k": "v"}},
        ),
    ),
    ("DELETE", "/v1/conversations/<conversation_id>"): Row(
        OWN_ONLY, of_own("DELETE", "/v1/conversations/{conversation}", fresh=True)
    ),
    ("GET", "/v1/conversations/<conversation_id>/items"): Row(OWN_ONLY, of_own("GET", "/v1/conversations/{conversation}/items")),
    ("POST", "/v1/conversations/<conversation_id>/items"): Row(
        OWN_ONLY,
        lambda probe, caller: (
            "POST",
            "/v1/conversations/{conversation}/items".format(**probe.objects(caller)),
            {"items": [{"type": "message", "role": "user", "content": "more"}]},
        ),
    ),
    # Files and batches: each key's own.
    ("POST", "/v1/files"): Row(OWN_OBJECTS, post("/v1/files", BATCH_FILE)),
    ("GET", "/v1/files"): Row(OWN_OBJECTS, get("/v1/files")),
    ("GET", "/v1/files/<file_id>"): Row(OWN_ONLY, of_own("GET", "/v1/files/{file}")),
    ("GET", "/v1/files/<file_id>/content"): Row(OWN_ONLY, of_own("GET", "/v1/files/{file}/content")),
    ("DELETE", "/v1/files/<file_id>"): Row(OWN_ONLY, of_own("DELETE", "/v1/files/{file}", fresh=True)),
    ("POST", "/v1/batches"): Row(OWN_ONLY, new_batch),
    ("GET", "/v1/batches"): Row(OWN_OBJECTS, get("/v1/batches")),
    ("GET", "/v1/batches/<batch_id>"): Row(OWN_ONLY, of_own("GET", "/v1/batches/{batch}")),
    ("POST", "/v1/batches/<batch_id>/cancel"): Row(OWN_ONLY, of_own("POST", "/v1/batches/{batch}/cancel")),
    ("POST", "/v1/messages/batches"): Row(OWN_OBJECTS, post("/v1/messages/batches", MESSAGE_BATCH)),
    ("GET", "/v1/messages/batches"): Row(OWN_OBJECTS, get("/v1/messages/batches")),
    ("GET", "/v1/messages/batches/<batch_id>"): Row(OWN_ONLY, of_own("GET", "/v1/messages/batches/{message_batch}")),
    ("POST", "/v1/messages/batches/<batch_id>/cancel"): Row(
        OWN_ONLY, of_own("POST", "/v1/messages/batches/{message_batch}/cancel")
    ),
    # deleting or reading the results of a batch still processing is a 400, of an ended one a 200
    ("DELETE", "/v1/messages/batches/<batch_id>"): Row(
        OWN_ONLY, of_own("DELETE", "/v1/messages/batches/{message_batch}", fresh=True), ok(200, 400)
    ),
    ("GET", "/v1/messages/batches/<batch_id>/results"): Row(
        OWN_ONLY, of_own("GET", "/v1/messages/batches/{message_batch}/results"), ok(200, 400)
    ),
    ("GET", "/v1/conversations/<conversation_id>/items/<item_id>"): Row(
        OWN_ONLY, of_own("GET", "/v1/conversations/{conversation}/items/{item}")
    ),
    ("DELETE", "/v1/conversations/<conversation_id>/items/<item_id>"): Row(
        OWN_ONLY, of_own("DELETE", "/v1/conversations/{conversation}/items/{item}", fresh=True)
    ),
    # The proxy's own tools on a model.
    ("GET", "/v1/internal/model/info"): Row(OWN_ONLY, get("/v1/internal/model/info?model=a")),
    ("POST", "/v1/internal/chat-prompt"): Row(OWN_ONLY, post("/v1/internal/chat-prompt", CHAT)),
    ("POST", "/v1/internal/encode"): Row(OWN_ONLY, post("/v1/internal/encode", {"model": "a", "text": "Hi"})),
    ("POST", "/v1/internal/token-count"): Row(OWN_ONLY, post("/v1/internal/token-count", {"model": "a", "text": "Hi"})),
    ("POST", "/v1/internal/decode"): Row(OWN_ONLY, post("/v1/internal/decode", {"model": "a", "tokens": [1, 2]})),
    # What every caller shares: the admin's.
    ("GET", "/v1/internal/model/logs"): Row(ADMIN_ONLY, get("/v1/internal/model/logs?model=a")),
    **{
        ("POST", path): Row(ADMIN_ONLY, post(path, {"model": "b"}))
        for path in ("/v1/internal/model/load", "/models/load", "/v1/internal/model/unload", "/models/unload")
    },
    ("POST", "/v1/internal/stop-generation"): Row(ADMIN_ONLY, post("/v1/internal/stop-generation")),
    ("POST", "/v1/internal/requests/<request_id>/stop"): Row(
        ADMIN_ONLY, post("/v1/internal/requests/0123/stop"), ok(404)
    ),  # no such request in flight
    # Views of what runs: each key its own part.
    ("GET", "/v1/internal/model/list"): Row(OWN_VIEW, get("/v1/internal/model/list")),
    ("GET", "/v1/internal/requests"): Row(OWN_VIEW, get("/v1/internal/requests")),
    ("GET", "/v1/internal/models/events"): Row(OWN_VIEW, get("/v1/internal/models/events")),
    ("GET", "/v1/internal/events"): Row(OWN_VIEW, get("/v1/internal/events")),
    # Usage: a key its own, the admin every key's; reading it counts.
    ("GET", "/v1/internal/usage"): Row(OWN_USAGE, get("/v1/internal/usage")),
    ("GET", "/v1/organization/usage/completions"): Row(OWN_USAGE, get("/v1/organization/usage/completions?start_time=0")),
    ("GET", "/v1/organization/usage/audio_transcriptions"): Row(
        OWN_USAGE, get("/v1/organization/usage/audio_transcriptions?start_time=0")
    ),
    # Managing keys.
    ("GET", "/v1/internal/keys"): Row(ADMIN_ONLY, get("/v1/internal/keys")),
    ("POST", "/v1/internal/keys"): Row(
        ADMIN_ONLY, lambda probe, caller: ("POST", "/v1/internal/keys", {"name": next(NAMES)}), ok(201)
    ),
    ("GET", "/v1/internal/keys/<name>"): Row(ADMIN_ONLY, get("/v1/internal/keys/of-a")),
    ("PATCH", "/v1/internal/keys/<name>"): Row(
        ADMIN_ONLY, lambda probe, caller: ("PATCH", "/v1/internal/keys/of-b", {"priority": "normal"})
    ),
    ("DELETE", "/v1/internal/keys/<name>"): Row(
        ADMIN_ONLY, lambda probe, caller: ("DELETE", f"/v1/internal/keys/{probe.throwaway_key()}", None)
    ),
    # llama.cpp's own API, relayed: a model's (the answers are llama-server's).
    ("POST", "/completion"): Row(OWN_ONLY, post("/completion", {"model": "a", "prompt": "Hi", "n_predict": 2})),
    ("POST", "/infill"): Row(
        OWN_ONLY, post("/infill", {"model": "a", "input_prefix": "def f(", "input_suffix": ")", "n_predict": 2}), ok(400)
    ),  # a model without FIM tokens
    ("POST", "/tokenize"): Row(OWN_ONLY, post("/tokenize", {"model": "a", "content": "Hi"})),
    ("POST", "/detokenize"): Row(OWN_ONLY, post("/detokenize", {"model": "a", "tokens": [1, 2]})),
    ("POST", "/apply-template"): Row(OWN_ONLY, post("/apply-template", {"model": "a", "messages": CHAT["messages"]})),
    ("GET", "/props"): Row(OWN_ONLY, get("/props?model=a")),
    ("GET", "/slots"): Row(OWN_ONLY, get("/slots?model=a")),
    ("GET", "/llamacpp/metrics"): Row(OWN_ONLY, get("/llamacpp/metrics?model=a"), ok()),  # its children run with --metrics
    # Ollama's API: its probes public, a model's routes a model's, its lists each key's own part.
    ("GET", "/"): Row(PUBLIC, get("/")),
    ("GET", "/api/version"): Row(PUBLIC, get("/api/version")),
    ("POST", "/api/chat"): Row(OWN_ONLY, post("/api/chat", {**CHAT, "stream": False, "options": {"num_predict": 2}})),
    ("POST", "/api/generate"): Row(
        OWN_ONLY, post("/api/generate", {"model": "a", "prompt": "Hi", "stream": False, "options": {"num_predict": 2}})
    ),
    ("POST", "/api/embed"): Row(OWN_ONLY, post("/api/embed", {"model": "a", "input": "Hi"}), ok(400, 501)),
    ("POST", "/api/embeddings"): Row(OWN_ONLY, post("/api/embeddings", {"model": "a", "prompt": "Hi"}), ok(400, 501)),
    ("POST", "/api/show"): Row(OWN_CARD, post("/api/show", {"model": "a"})),  # a model card, as /v1/models/a
    ("GET", "/api/tags"): Row(OWN_VIEW, get("/api/tags")),
    ("GET", "/api/ps"): Row(OWN_VIEW, get("/api/ps")),
    # No model hub: a 400 saying where models come from, for every key.
    **{
        ("POST", rule): Row(
            Kind("no hub", {NONE: ok(401), **{caller: ok(400) for caller in CALLERS if caller != NONE}}),
            post(path, {"model": "a"}),
        )
        for rule, path in (
            ("/api/pull",) * 2,
            ("/api/push",) * 2,
            ("/api/create",) * 2,
            ("/api/copy",) * 2,
            ("/api/blobs/<path:digest>", "/api/blobs/sha256-00"),
        )
    },
    ("DELETE", "/api/delete"): Row(ADMIN_ONLY, lambda probe, caller: ("DELETE", "/api/delete", {"model": "b"})),
    # Reranking and audio: a model's (a is a chat model without an audio projector: a 400 naming what it does).
    **{
        ("POST", path): Row(OWN_ONLY, post(path, {"model": "a", "query": "q", "documents": ["d"]}), ok(400))
        for path in ("/v1/rerank", "/rerank", "/v1/reranking", "/v2/rerank")
    },
    **{
        ("POST", prefix + "/audio/" + kind): Row(OWN_ONLY, post(prefix + "/audio/" + kind, AUDIO), ok(400))
        for prefix in ("/v1", "")
        for kind in ("transcriptions", "translations")
    },
    **{
        ("POST", path): Row(OWN_ONLY, post(path, {"model": "a", "input": "Hi", "voice": "alloy"}), ok(400))
        for path in ("/v1/audio/speech", "/audio/speech")
    },
    # The fleet's (with --fleet): what a front asks a box.
    ("GET", "/v1/fleet/status"): Row(FLEET_ONLY, get("/v1/fleet/status")),
    ("POST", "/v1/fleet/load"): Row(FLEET_ONLY, post("/v1/fleet/load", {"model": "b"})),
    ("POST", "/v1/fleet/unload"): Row(FLEET_ONLY, post("/v1/fleet/unload", {"model": "b"})),
    ("GET", "/v1/fleet/logs"): Row(FLEET_ONLY, get("/v1/fleet/logs?model=b")),
    ("GET", "/v1/fleet/events"): Row(FLEET_ONLY, get("/v1/fleet/events")),
    ("POST", "/v1/fleet/pool"): Row(FLEET_ONLY, post("/v1/fleet/pool", {"model": "b", "rpc": ["127.0.0.1:9"], "lent_mib": 1})),
}


def app_routes(tmp_path) -> dict[tuple[str, str], str]:
    """Every (method, rule) the app answers, as the CLI builds it with the native API and a fleet on: its
    view's endpoint (the key of its declaration, routes/declare.py)."""
    (tmp_path / "fleet-secret").write_text(FLEET_SECRET)
    app = create_app(
        parse_settings(
            [
                "--llama-api",
                "http://127.0.0.1:9",
                "--admin-key",
                "x",
                "--fleet",
                "redis://127.0.0.1:9/0",
                "--fleet-secret-file",
                str(tmp_path / "fleet-secret"),
            ]
        )
    )
    return {
        (method, rule.rule): rule.endpoint for rule in app.url_map.iter_rules() for method in rule.methods - {"HEAD", "OPTIONS"}
    }


def test_every_route_has_a_row_in_the_table(tmp_path):
    routes = set(app_routes(tmp_path))
    assert sorted(routes - set(ROUTES)) == [] and sorted(set(ROUTES) - routes) == []


# The declared access (routes/declare.py) each kind of row checks: the table probes what the declarations say.
KIND_OF_ACCESS = {
    "public": {"public"},
    "key": {"own-only", "own card", "no such file"},
    "own": {"own-only", "own view", "own usage", "own objects", "a write", "no hub"},
    "admin": {"admin-only"},
    "admin-key": {"admin-only"},
    "fleet": {"fleet calls only"},
    "pool": {"admin-only"},  # public only with --open-pool-metrics
}


def test_each_rows_kind_is_what_its_route_declares(tmp_path):
    from api_like_oai.routes.declare import DECLARATIONS

    mismatched = [
        (route, ROUTES[route].kind.name, DECLARATIONS[endpoint].access)
        for route, endpoint in app_routes(tmp_path).items()
        if ROUTES[route].kind.name not in KIND_OF_ACCESS[DECLARATIONS[endpoint].access]
    ]
    assert mismatched == []


class Probe:
    """The proxy, its keys and each caller's stored objects."""

    def __init__(self, proxy, keys: dict[str, str]):
        self.proxy, self.keys = proxy, keys
        self.made: dict[str, dict] = {}

    def headers(self, caller: str) -> dict:
        return {"Authorization": f"Bearer {self.keys[caller]}"} if caller in self.keys else {}

    def send(self, caller: str, method: str, path: str, body=None, **options) -> requests.Response:
        if isinstance(body, Form):
            options |= {"data": body.data, "files": body.files}
        else:
            options["json"] = body
        headers = {**self.headers(caller), **options.pop("headers", {})}
        return requests.request(method, self.proxy.url + path, headers=headers, timeout=120, **options)

    def objects(self, caller: str, fresh: bool = False) -> dict:
        """Ids of a stored response and a conversation with an item, the caller's (the admin's and a's
        own; the others try a's); made anew for `fresh` (a delete), kept otherwise."""
        owner = caller if caller in (OWN, ADMIN) else OWN
        if fresh and owner == caller:
            return self._make(owner)
        if owner not in self.made:
            self.made[owner] = self._make(owner)
        return self.made[owner]

    def _make(self, owner: str) -> dict:
        response = self.send(owner, "POST", "/v1/responses", RESPONSE)
        conversation = self.send(
            owner, "POST", "/v1/conversations", {"items": [{"type": "message", "role": "user", "content": "Hi"}]}
        )
        assert response.status_code == conversation.status_code == 200, (response.text, conversation.text)
        items = self.send(owner, "GET", f"/v1/conversations/{conversation.json()['id']}/items").json()
        uploaded = self.send(owner, "POST", "/v1/files", BATCH_FILE).json()["id"]
        batch = self.send(owner, "POST", "/v1/batches", {"input_file_id": uploaded, "endpoint": "/v1/chat/completions"})
        message_batch = self.send(owner, "POST", "/v1/messages/batches", MESSAGE_BATCH)
        assert batch.status_code == message_batch.status_code == 200, (batch.text, message_batch.text)
        return {
            "response": response.json()["id"],
            "conversation": conversation.json()["id"],
            "item": items["data"][0]["id"],
            "file": uploaded,
            "batch": batch.json()["id"],
            "message_batch": message_batch.json()["id"],
        }

    def throwaway_key(self) -> str:
        name = next(NAMES)
        assert self.send(ADMIN, "POST", "/v1/internal/keys", {"name": name}).status_code == 201
        return name

    def use_up_the_limited_key(self) -> None:
        """Its one request of the minute taken (or already taken), so that what it sends next is over it."""
        self.send(LIMITED, "GET", "/v1/internal/usage")


@pytest.fixture(scope="module")
def probe(provisioned, tmp_path_factory, start_proxy, start_fake):
    here = tmp_path_factory.mktemp("tenants")
    (here / "models").mkdir()
    for name in ("a", "b"):
        (here / "models" / f"{name}.gguf").symlink_to(provisioned["MODEL"])
    (here / "admin-key").write_text(ADMIN_KEY + "\n")
    (here / "elsewhere.yaml").write_text(f"models:\n  c:\n    upstreams: [{start_fake().url}]\n    chat_prompt_model: chatml\n")
    redis_server, fleet = fleet_redis(here, FLEET_SECRET)
    port, elsewhere_port = free_port(), free_port()
    proxy = start_proxy(
        "--models-dir",
        str(here / "models"),
        "--llama-server",
        provisioned["LLAMA_SERVER"],
        "--llama-args",
        "--ctx-size 1024 --parallel 2 --threads 1",
        "--admin-key-file",
        str(here / "admin-key"),
        "--store",
        f"sqlite:///{here}/store.sqlite3",
        *fleet,
        "--advertise",
        f"http://127.0.0.1:{port}",
        port=port,
    )
    elsewhere = start_proxy(
        "--config", str(here / "elsewhere.yaml"), *fleet, "--advertise", f"http://127.0.0.1:{elsewhere_port}", port=elsewhere_port
    )
    keys = {ADMIN: ADMIN_KEY}
    for caller, name, fields in [
        (OWN, "of-a", {"models": ["a", "c"]}),
        (OTHER, "of-b", {"models": ["b"]}),
        (LIMITED, "limited", {"models": ["a"], "rpm": 1}),
    ]:
        made = requests.post(
            proxy.url + "/v1/internal/keys",
            json={"name": name, **fields},
            headers={"Authorization": f"Bearer {ADMIN_KEY}"},
            timeout=10,
        )
        keys[caller] = made.json()["key"]
    probe = Probe(proxy, keys)
    probe.elsewhere = elsewhere
    eventually(
        lambda: "c" in {card["id"] for card in probe.send(ADMIN, "GET", "/v1/models").json()["data"]},
        "the other box's model in the fleet",
    )
    yield probe
    elsewhere.stop()
    proxy.stop()
    redis_server.stop()


def outcome(probe: Probe, row: Row, caller: str) -> int:
    if caller == LIMITED:
        probe.use_up_the_limited_key()
    method, path, body = row.request(probe, caller)
    with probe.send(caller, method, path, body, stream=True) as answer:
        return answer.status_code  # an event stream is left after its head


@pytest.mark.parametrize("route", sorted(ROUTES), ids=" ".join)
def test_each_route_answers_each_caller_as_its_row_says(probe, route):
    row = ROUTES[route]
    got = {caller: outcome(probe, row, caller) for caller in CALLERS}
    wrong = {
        caller: (status, sorted(row.expected(caller))) for caller, status in got.items() if status not in row.expected(caller)
    }
    assert wrong == {}, f"{row.kind.name} route {' '.join(route)}: got (expected) {wrong}"


# --- the reproductions ---------------------------------------------------------------------


def admin_status(probe: Probe) -> dict:
    return probe.send(ADMIN, "GET", "/v1/internal/models/events", stream=True)


def first_event(answer: requests.Response) -> dict:
    for line in answer.iter_lines():
        if line.startswith(b"data: "):
            answer.close()
            return json.loads(line[len(b"data: ") :])
    raise AssertionError("no event")


def test_the_proxys_llama_servers_answer_no_one_else(probe):
    assert probe.send(OWN, "POST", "/v1/chat/completions", CHAT).status_code == 200  # a is loaded
    status = first_event(admin_status(probe))["models"]["a"]
    child = status["upstreams"][0]
    bare = requests.post(child + "/completion", json={"prompt": "hi", "n_predict": 3}, timeout=10)
    assert bare.status_code == 401
    page = requests.get(child + "/props", headers={"Origin": "https://evil.example"}, timeout=10)
    assert page.status_code == 401 and page.headers.get("Access-Control-Allow-Origin") != "https://evil.example"
    assert probe.send(OWN, "GET", "/slots?model=a").status_code == 200  # the proxy has the key


def test_health_and_a_keys_status_give_no_addresses(probe):
    for answer in (probe.send(NONE, "GET", "/health"), probe.send(OWN, "GET", "/v1/models")):
        assert "127.0.0.1" not in answer.text and "upstreams" not in answer.text
    assert "upstreams" in probe.send(ADMIN, "GET", "/health").json()


def test_a_tenant_sees_only_its_own_models_requests_and_logs(probe):
    assert probe.send(OWN, "GET", "/v1/internal/model/list").json() == {"model_names": ["a"]}
    assert probe.send(OTHER, "GET", "/v1/internal/model/list").json() == {"model_names": ["b"]}
    assert probe.send(ADMIN, "GET", "/v1/internal/model/list").json() == {"model_names": ["a", "b"]}
    assert probe.send(OWN, "GET", "/v1/internal/model/logs?model=b").status_code == 403
    assert set(first_event(probe.send(OTHER, "GET", "/v1/internal/models/events", stream=True))["models"]) == {"b"}
    unknown = probe.send(OTHER, "POST", "/v1/chat/completions", {**CHAT, "model": "nothing"})
    assert unknown.status_code == 404 and unknown.json()["error"]["message"].endswith("known models: b")


def test_a_models_port_is_held_and_is_never_the_proxys(probe):
    assert probe.send(ADMIN, "POST", "/v1/internal/model/unload", {"model": "b"}).status_code == 200
    status = first_event(admin_status(probe))["models"]
    ports = [int(url.rsplit(":", 1)[1]) for model in status.values() for url in model["upstreams"]]
    assert probe.proxy.port not in ports and len(set(ports)) == len(ports)
    with socket.socket() as intruder, pytest.raises(OSError) as refused:  # b's, while no llama-server has it
        intruder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        intruder.bind(("127.0.0.1", ports[list(status).index("b")]))
    assert refused.value.errno == errno.EADDRINUSE


# --- the fleet's (issue 37) ------------------------------------------------------------------------


def live_event(answer: requests.Response) -> dict:
    event = None
    for line in answer.iter_lines(decode_unicode=True):
        if line.startswith("event: "):
            event = line[len("event: ") :]
        elif line.startswith("data: ") and event == "live":
            answer.close()
            return json.loads(line[len("data: ") :])
    raise AssertionError("no live event")


def test_a_model_on_another_box_answers_each_caller_as_a_model_here_does(probe):
    chat = {**CHAT, "model": "c"}
    got = {caller: probe.send(caller, "POST", "/v1/chat/completions", chat).status_code for caller in CALLERS}
    assert got == {NONE: 401, OWN: 200, OTHER: 404, LIMITED: 404, ADMIN: 200}


def test_a_tenant_learns_no_box_address(probe):
    own = probe.send(OWN, "POST", "/v1/chat/completions", {**CHAT, "model": "c"})
    assert own.status_code == 200 and "X-Fleet-Box" not in own.headers and own.headers["X-Fleet-Route"]
    assert probe.send(ADMIN, "POST", "/v1/chat/completions", {**CHAT, "model": "c"}).headers["X-Fleet-Box"] == probe.elsewhere.url
    # one label per box across the fleet's models (numbered by address, so either of the two): never its address
    assert [box["box"] for box in probe.send(OWN, "GET", "/v1/models/c").json()["status"]["boxes"]] in (["box 1"], ["box 2"])
    assert probe.send(ADMIN, "GET", "/v1/models/c").json()["status"]["boxes"][0]["box"] == probe.elsewhere.url
    assert live_event(probe.send(OWN, "GET", "/v1/internal/events", stream=True))["fleet"] is None
    assert len(live_event(probe.send(ADMIN, "GET", "/v1/internal/events", stream=True))["fleet"]["boxes"]) == 2


def test_the_fleets_headers_make_no_one_a_fleet_call_without_the_secret(probe):
    spoofed = {"X-Fleet-Caller": "admin", "X-Fleet-Route": "prefix"}
    assert probe.send(NONE, "POST", "/v1/chat/completions", CHAT, headers=spoofed).status_code == 401
    assert probe.send(OTHER, "POST", "/v1/chat/completions", CHAT, headers=spoofed).status_code == 404
    wrong = {"X-Fleet-Secret": FLEET_SECRET[:-1]}
    assert probe.send(ADMIN, "GET", "/v1/fleet/status", headers=wrong).status_code == 401
    right = probe.send(NONE, "GET", "/v1/fleet/status", headers={"X-Fleet-Secret": FLEET_SECRET})
    assert right.status_code == 200 and len(right.json()["boxes"]) == 2
    # a fleet call is no admin: the secret vouches for a front's client, it gives no admin's rights
    assert probe.send(NONE, "GET", "/v1/internal/keys", headers={"X-Fleet-Secret": FLEET_SECRET}).status_code == 403
