"""A front serves every route one proxy serves (issue 49), for any model of the fleet: two boxes, each with
its own store (a SQLite file of its own), starting real llama-servers on demand; two fronts with no models
of their own, the keys and usage in one real Redis. Box 1 has SmolLM2, its embedding twin and the test
reranker (tests/e2e/test_rerank.py's); box 2 has SmolLM2 and SmolLM2 hearing through the test audio
projector (tests/e2e/test_audio.py's). Driven by the official `ollama` client, the `openai` SDK and
requests; the front's answers are compared with the box's own to the same request (asked with the fleet
secret, as the front asks it)."""

from __future__ import annotations

import ollama
import pytest
import requests

from ..conftest import openai_client
from ..servers import Proxy, box_config, eventually, fleet_box, fleet_redis, launch_all, made_model, stop
from .test_audio import CLIP
from .test_rerank import reranker_path

SECRET = "a-fleet-secret-for-the-route-tests-0123456789"
ADMIN = "sk-admin-of-the-route-fleet"
HELLO = [{"role": "user", "content": "Say hello."}]
SMOL = box_config("smol", 300, '--ctx-size, "2048", --parallel, "2", --threads, "1"')
BOX_CONFIGS = (  # each box's first model smol: the fleet's default
    SMOL
    + """
  smol-embed:
    model: $MODEL
    args: [--ctx-size, "512", --parallel, "1", --threads, "1", --embeddings, --pooling, mean]
    memory: 300
  ranker:
    model: $RANKER
    args: [--ctx-size, "512", --parallel, "1", --threads, "1"]
    memory: 50
""",
    SMOL
    + """
  hearing:
    model: $MODEL
    args: [--ctx-size, "4096", --parallel, "1", --threads, "1", --n-predict, "8", --mmproj, $PROJECTOR]
    memory: 320
""",
)


@pytest.fixture(scope="module")
def fleet(provisioned, tmp_path_factory):
    directory = tmp_path_factory.mktemp("fleet-routes")
    redis_server, common = fleet_redis(directory, SECRET)
    files = {
        "$MODEL": provisioned["MODEL"],
        "$RANKER": str(reranker_path()),
        "$PROJECTOR": str(made_model("test-audio-mmproj-smollm2-135m.gguf", "make_test_audio_mmproj.py")),
    }
    configs = [_filled(config, files) for config in BOX_CONFIGS]
    boxes = [fleet_box(directory, n, common, provisioned, config=configs[n], budget_mib=1000) for n in range(2)]
    keys = ["--admin-key", ADMIN, "--store", redis_server.url]
    fronts = [Proxy([*common, *keys], host=f"127.0.0.{4 + n}") for n in range(2)]
    try:
        launch_all(boxes + fronts)
        eventually(lambda: _models(fronts[0]) >= {"smol", "smol-embed", "ranker", "hearing"}, "both boxes in the fleet")
        yield {"boxes": boxes, "fronts": fronts}
    finally:
        stop(*(proxy.process for proxy in boxes + fronts if proxy.process and proxy.process.poll() is None))
        redis_server.stop()


def _filled(config: str, files: dict[str, str]) -> str:
    for name, path in files.items():
        config = config.replace(name, path)
    return config


def _models(front: Proxy) -> set[str]:
    answer = requests.get(front.url + "/v1/models", headers=_admin(), timeout=10)
    return {card["id"] for card in answer.json()["data"]} if answer.status_code == 200 else set()


def _admin(key: str = ADMIN) -> dict:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def front(fleet) -> Proxy:
    return fleet["fronts"][0]


@pytest.fixture(scope="module")
def tenant(fleet) -> str:
    """A managed key made at one front (the keys live in the shared store), with a daily token limit."""
    made = requests.post(
        fleet["fronts"][1].url + "/v1/internal/keys",
        json={"name": "tenant", "tokens_per_day": 100000},
        headers=_admin(),
        timeout=10,
    )
    assert made.status_code in (200, 201), made.text
    return made.json()["key"]


def test_ollamas_api_through_a_front_with_the_official_client(front, tenant):
    client = ollama.Client(host=front.url, headers=_admin(tenant), timeout=180)
    chat = client.chat(model="smol", messages=HELLO, options={"num_predict": 4, "temperature": 0})
    assert chat.message.content and chat.done and chat.eval_count > 0
    streamed = list(client.chat(model="smol", messages=HELLO, options={"num_predict": 4}, stream=True))
    assert len(streamed) >= 2 and streamed[-1].done and streamed[-1].prompt_eval_count > 0
    generated = client.generate(model="smol", prompt="Once upon a time", options={"num_predict": 4})
    assert generated.response and generated.context
    embedded = client.embed(model="smol-embed", input=["a cat", "a dog"])
    assert [len(vector) for vector in embedded.embeddings] == [576, 576]
    assert "embedding" in client.show("smol-embed").capabilities
    assert {"completion", "tools"} <= set(client.show("smol").capabilities)
    listed = {model.model for model in client.list().models}
    assert listed == {"smol", "smol-embed", "ranker", "hearing"}  # the fleet's models, from both boxes
    assert {model.model for model in client.ps().models} >= {"smol", "smol-embed"}  # loaded on some box
    with pytest.raises(ollama.ResponseError) as refused:
        client.chat(model="nowhere", messages=HELLO)
    assert refused.value.status_code == 404 and refused.value.error == 'model "nowhere" not found, try pulling it first'


def test_openais_apis_through_a_front_with_the_sdk(front, tenant):
    gpt = openai_client(front.url, api_key=tenant)
    assert gpt.chat.completions.create(model="smol", messages=HELLO, max_tokens=4).choices[0].message.content
    assert gpt.completions.create(model="smol", prompt="Once upon", max_tokens=4).choices[0].text
    embedded = gpt.embeddings.create(model="smol-embed", input="a cat", encoding_format="float")
    assert len(embedded.data[0].embedding) == 576
    answer = gpt.responses.create(model="smol", input="Say hello.", max_output_tokens=16, store=False)
    assert answer.status in ("completed", "incomplete") and answer.output_text  # incomplete: its 16 tokens reached
    counted = gpt.responses.input_tokens.count(model="smol", input="Say hello.")
    assert counted.input_tokens > 0
    transcript = gpt.audio.transcriptions.create(model="hearing", file=("tone.wav", CLIP, "audio/wav"), temperature=0)
    assert isinstance(transcript.text, str)


def test_token_counting_rerank_and_llamacpps_own_routes_through_a_front(front, tenant):
    key = _admin(tenant)
    counted = requests.post(
        front.url + "/v1/messages/count_tokens",
        json={"model": "smol", "messages": HELLO},
        headers={"x-api-key": tenant, "anthropic-version": "2023-06-01"},
        timeout=60,
    )
    assert counted.status_code == 200 and counted.json()["input_tokens"] > 0
    for path in ("/v1/rerank", "/v2/rerank"):
        ranked = requests.post(
            front.url + path, json={"model": "ranker", "query": "a panda", "documents": ["hi", "pandas eat bamboo"]}, headers=key
        )
        assert ranked.status_code == 200 and sorted(result["index"] for result in ranked.json()["results"]) == [0, 1]
    completed = requests.post(front.url + "/completion", json={"model": "smol", "prompt": "Hi", "n_predict": 4}, headers=key)
    assert completed.status_code == 200 and completed.json()["tokens_predicted"] == 4
    tokens = requests.post(front.url + "/tokenize", json={"model": "smol", "content": "hello world"}, headers=key).json()[
        "tokens"
    ]
    text = requests.post(front.url + "/detokenize", json={"model": "smol", "tokens": tokens}, headers=key).json()["content"]
    assert text.strip() == "hello world"
    props = requests.get(front.url + "/props", params={"model": "smol"}, headers=key, timeout=60)
    assert props.status_code == 200 and props.json()["default_generation_settings"]["n_ctx"] > 0


def test_a_request_naming_no_model_gets_the_fleets_default_model(fleet, front):
    answer = requests.post(front.url + "/v1/chat/completions", json={"messages": HELLO, "max_tokens": 4}, headers=_admin())
    assert answer.status_code == 200 and answer.json()["model"] == "smol"  # the boxes' first model, as on one box
    assert requests.get(front.url + "/props", headers=_admin(), timeout=60).status_code == 200
    # a form naming none: smol, which hears nothing, as on box 2 asked the same
    file = {"file": ("tone.wav", CLIP, "audio/wav")}
    heard = requests.post(front.url + "/v1/audio/transcriptions", files=file, headers=_admin(), timeout=60)
    own = requests.post(fleet["boxes"][1].url + "/v1/audio/transcriptions", files=file, headers={"X-Fleet-Secret": SECRET})
    assert heard.status_code == own.status_code == 400 and heard.json() == own.json()
    required = requests.post(front.url + "/api/chat", json={"messages": HELLO}, headers=_admin(), timeout=60)
    assert required.status_code == 400 and required.json() == {"error": "missing required field 'model'"}  # as one box


# (method, path, body or query, the model's box): what a front's answer must match, status and shape
ASKED = [
    ("POST", "/api/chat", {"model": "smol", "messages": HELLO, "stream": False, "options": {"num_predict": 4}}, 0),
    ("POST", "/api/show", {"model": "smol"}, 0),
    ("POST", "/api/embed", {"model": "smol", "input": "a cat"}, 0),  # not an embedding model: Ollama's error
    ("POST", "/infill", {"model": "smol", "input_prefix": "a", "input_suffix": "b"}, 0),  # no FIM tokens: a 400
    ("POST", "/v1/responses/input_tokens", {"model": "smol", "input": "Say hello."}, 0),
    ("POST", "/v1/rerank", {"model": "ranker", "query": "q", "documents": ["a", "b"]}, 0),
    ("POST", "/v1/rerank", {"model": "ranker", "query": "q"}, 0),  # no documents: the 400
    ("GET", "/props", {"model": "smol"}, 1),
    ("POST", "/tokenize", {"model": "smol", "content": "hello"}, 1),
]


@pytest.mark.parametrize(("method", "path", "asked", "box"), ASKED, ids=[f"{m} {p}" for m, p, *_ in ASKED])
def test_a_fronts_answer_is_the_boxes_own(fleet, front, method, path, asked, box):
    def ask(url: str, headers: dict) -> requests.Response:
        sent = {"params": asked} if method == "GET" else {"json": asked}
        return requests.request(method, url + path, headers=headers, timeout=120, **sent)

    through = ask(front.url, _admin())
    own = ask(fleet["boxes"][box].url, {"X-Fleet-Secret": SECRET})
    assert through.status_code == own.status_code, through.text[:300]
    assert _shape(through.json()) == _shape(own.json())
    assert "127.0.0." not in through.text  # no box's or llama-server's address


def _shape(value):
    """The keys of a JSON answer, nested (its values aside: a model's text differs between two asks)."""
    if isinstance(value, dict):
        return {key: _shape(item) for key, item in value.items() if key not in ("timings", "n_tokens")}
    return type(value).__name__ if not isinstance(value, list) else [_shape(value[0])] if value else []


def test_a_tenant_learns_no_address_or_file_through_a_front_as_on_one_box(front, tenant):
    info = requests.get(front.url + "/v1/internal/model/info", params={"model": "smol"}, headers=_admin(tenant), timeout=60)
    assert info.status_code == 200 and all(upstream["url"] is None for upstream in info.json()["upstreams"])
    shown = requests.post(front.url + "/api/show", json={"model": "smol"}, headers=_admin(tenant), timeout=60)
    assert shown.status_code == 200 and "FROM /" not in shown.json()["modelfile"]  # its path: only to who sees all
    admin = requests.get(front.url + "/v1/internal/model/info", params={"model": "smol"}, headers=_admin(), timeout=60)
    assert all(upstream["url"].startswith("http://127.0.0.1:") for upstream in admin.json()["upstreams"])


def test_the_tenants_usage_through_the_fronts_is_counted_in_the_shared_store(fleet, tenant):
    rows = requests.get(fleet["fronts"][1].url + "/v1/internal/usage?by=api", headers=_admin(tenant), timeout=10).json()["data"]
    used = {row["api"]: row for row in rows}
    for api in ("/api/chat", "/api/generate", "/v1/chat/completions", "/completion", "/v1/rerank"):
        assert used[api]["requests"] >= 1 and used[api]["prompt_tokens"] > 0, (api, used.get(api))
    assert used["/api/chat"]["completion_tokens"] >= 8 and used["/completion"]["completion_tokens"] == 4
    assert used["/v1/audio/transcriptions"]["audio_seconds"] > 0


def _state_on(box: Proxy, model: str) -> str:
    return requests.get(f"{box.url}/v1/models/{model}", headers={"X-Fleet-Secret": SECRET}, timeout=10).json()["status"]["value"]


def test_an_admin_loads_and_unloads_a_fleet_model_through_a_front_as_on_one_proxy(fleet, front, tenant):
    """llama.cpp router mode's /models/load and /models/unload at a front: the fleet's boxes start and stop
    the model (on every box for an unload), and the answer is one proxy's; a tenant may do neither; a flag
    no caller may set is refused at the front, as on one proxy."""
    box = fleet["boxes"][0]  # the ranker's only box
    unloaded = requests.post(front.url + "/models/unload", json={"model": "ranker"}, headers=_admin(), timeout=120)
    assert unloaded.status_code == 200, unloaded.text
    assert unloaded.json()["success"] and unloaded.json()["status"]["value"] == "unloaded" == _state_on(box, "ranker")
    loaded = requests.post(
        front.url + "/models/load", json={"model": "ranker", "args": ["--ctx-size", "256"]}, headers=_admin(), timeout=120
    )
    assert loaded.status_code == 200, loaded.text
    assert loaded.json()["model"] == "ranker" and loaded.json()["status"]["value"] == "loaded" == _state_on(box, "ranker")
    ranked = requests.post(
        front.url + "/v1/rerank", json={"model": "ranker", "query": "q", "documents": ["a", "b"]}, headers=_admin(), timeout=120
    )
    assert ranked.status_code == 200
    refused = requests.post(
        front.url + "/models/load", json={"model": "ranker", "args": ["--log-file", "written.log"]}, headers=_admin(), timeout=30
    )
    assert refused.status_code == 400 and refused.headers["X-Error-Code"] == "disallowed_flag"
    assert (
        requests.post(front.url + "/models/unload", json={"model": "ranker"}, headers=_admin(tenant), timeout=30).status_code
        == 403
    )
    missing = requests.post(front.url + "/v1/internal/model/load", json={"model": "no-such"}, headers=_admin(), timeout=30)
    assert missing.status_code == 404
