"""llama.cpp's own API through the proxy, as continue.dev, llama.vscode and Zed call it, against the
real llama-server: with a key, routed by model, relayed as llama.cpp answers."""

from __future__ import annotations

import json
import time

import pytest
import requests

KEY = "sk-native-test"
AUTH = {"Authorization": f"Bearer {KEY}"}

# What continue.dev's llama.cpp provider sends to /completion.
CONTINUE_COMPLETION = {
    "prompt": "The three primary colours are",
    "n_predict": 12,
    "stop": ["\n\n"],
    "temperature": 0,
    "top_p": 0.95,
    "top_k": 40,
    "min_p": 0.05,
    "presence_penalty": 0,
    "frequency_penalty": 0,
    "cache_prompt": True,
    "stream": True,
}
# What llama.vscode sends to /infill (llama.vim's is the same shape).
VSCODE_INFILL = {
    "id_slot": -1,
    "input_prefix": "def add(a, b):\n    return ",
    "input_suffix": "\n\nprint(add(1, 2))\n",
    "input_extra": [{"filename": "util.py", "text": "def sub(a, b):\n    return a - b\n"}],
    "prompt": "",
    "n_predict": 8,
    "n_indent": 4,
    "top_k": 40,
    "top_p": 0.99,
    "temperature": 0,
    "samplers": ["top_k", "top_p", "infill"],
    "cache_prompt": True,
    "t_max_prompt_ms": 5000,
    "t_max_predict_ms": 5000,
    "stream": False,
    "response_fields": ["content", "timings/prompt_n", "timings/predicted_n", "truncated"],
}


@pytest.fixture(scope="module")
def keyed_proxy(llama_server, start_proxy):
    return start_proxy("--llama-api", llama_server.url, "--api-key", KEY)


@pytest.fixture(scope="module")
def small_server(start_llama_server):
    return start_llama_server(context_size=512, slots=1)


@pytest.fixture(scope="module")
def routed_proxy(llama_server, small_server, start_proxy, tmp_path_factory):
    config = tmp_path_factory.mktemp("native") / "config.yaml"
    config.write_text(f"""
default_model: big
models:
  big:
    upstreams: [{llama_server.url}]
  small:
    aliases: [tiny]
    upstreams: [{small_server.url}]
  remote:
    kind: openai
    upstreams: [{llama_server.url}/v1]
""")
    return start_proxy("--config", str(config))


def sse_events(text: str) -> list[dict]:
    assert text.endswith("\n\n")
    return [json.loads(event[6:]) for event in text.split("\n\n") if event.startswith("data: ")]


def proxied_and_direct(keyed_proxy, llama_server, path: str, body: dict, status: int = 200):
    """The proxy's answer (with the key) and llama-server's own to the same request."""
    proxied = requests.post(keyed_proxy.url + path, json=body, headers=AUTH, timeout=60)
    direct = requests.post(llama_server.url + path, json=body, timeout=60)
    assert proxied.status_code == direct.status_code == status, proxied.text
    return proxied, direct


def contents(events: list[dict]) -> list[tuple[str, bool]]:
    return [(event.get("content"), event.get("stop")) for event in events]


@pytest.mark.parametrize("stream", [True, False])
def test_continue_completion_is_llama_servers_own_answer(keyed_proxy, llama_server, stream):
    proxied, direct = proxied_and_direct(keyed_proxy, llama_server, "/completion", {**CONTINUE_COMPLETION, "stream": stream})
    if stream:
        assert proxied.headers["Content-Type"] == "text/event-stream"
        events = sse_events(proxied.text)
        assert events[-1]["stop"] is True and "".join(e["content"] for e in events)
        assert contents(events) == contents(sse_events(direct.text))
    else:
        assert proxied.headers["Content-Type"].startswith("application/json")
        assert proxied.json()["content"] == direct.json()["content"] != ""
        assert proxied.json()["tokens_predicted"] == direct.json()["tokens_predicted"]


@pytest.mark.parametrize("stream", [False, True])
def test_llama_vscode_infill_is_llama_servers_own_answer(keyed_proxy, llama_server, stream):
    proxied, direct = proxied_and_direct(keyed_proxy, llama_server, "/infill", {**VSCODE_INFILL, "stream": stream})
    if stream:
        assert proxied.headers["Content-Type"] == "text/event-stream"
        assert contents(sse_events(proxied.text)) == contents(sse_events(direct.text))
    else:
        answer = proxied.json()
        assert set(answer) == set(VSCODE_INFILL["response_fields"])  # llama.cpp's response_fields honoured
        assert answer["content"] == direct.json()["content"] and answer["timings/prompt_n"] > 0


def test_props_tokenize_detokenize_apply_template_and_slots(keyed_proxy, llama_server):
    def proxied(method: str, path: str, body=None):
        response = requests.request(method, keyed_proxy.url + path, json=body, headers=AUTH, timeout=30)
        assert response.status_code == 200, response.text
        return response.json()

    props = proxied("GET", "/props")
    assert props["default_generation_settings"]["n_ctx"] == 1024 and props["total_slots"] == 4
    tokens = proxied("POST", "/tokenize", {"content": "Hello world"})["tokens"]
    assert tokens == requests.post(llama_server.url + "/tokenize", json={"content": "Hello world"}, timeout=10).json()["tokens"]
    assert proxied("POST", "/detokenize", {"tokens": tokens})["content"] == "Hello world"
    template = proxied("POST", "/apply-template", {"messages": [{"role": "user", "content": "Hi"}]})
    assert template["prompt"].endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert len(proxied("GET", "/slots")) == 4


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/completion"),
        ("POST", "/infill"),
        ("GET", "/props"),
        ("POST", "/tokenize"),
        ("GET", "/slots"),
        ("GET", "/llamacpp/metrics"),
    ],
)
def test_native_routes_need_the_key(keyed_proxy, method, path):
    response = requests.request(method, keyed_proxy.url + path, json={"content": "x"}, timeout=10)
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"


def test_an_upstream_error_status_is_passed_through_as_llama_cpp_sent_it(keyed_proxy, llama_server):
    proxied, direct = proxied_and_direct(keyed_proxy, llama_server, "/completion", {"prompt": 5, "n_predict": 1}, 400)
    assert proxied.json() == direct.json()


def test_llama_cpps_metrics_are_not_the_proxys(keyed_proxy):
    # The session llama-server runs without --metrics: llama.cpp's 501 is the caller's 400 at its own path,
    # while /metrics stays the proxy's Prometheus text, which now counts the native requests.
    requests.post(keyed_proxy.url + "/completion", json={**CONTINUE_COMPLETION, "stream": True}, headers=AUTH, timeout=60)
    upstream = requests.get(keyed_proxy.url + "/llamacpp/metrics", headers=AUTH, timeout=10)
    assert upstream.status_code == 400 and "--metrics" in upstream.json()["error"]["message"]
    ours = requests.get(keyed_proxy.url + "/metrics", headers=AUTH, timeout=10).text
    assert 'api_like_oai_requests_total{endpoint="/completion",model="llama.cpp",status="200"}' in ours
    completion_tokens = next(
        line for line in ours.splitlines() if line.startswith('api_like_oai_tokens_total{kind="completion",model="llama.cpp"}')
    )
    assert float(completion_tokens.split()[-1]) > 0


def test_a_client_leaving_a_native_stream_frees_the_upstream_slot(keyed_proxy, llama_server):
    body = {"prompt": "Once upon a time", "n_predict": 900, "ignore_eos": True, "stream": True}
    with requests.post(keyed_proxy.url + "/completion", json=body, headers=AUTH, stream=True, timeout=60) as response:
        lines = response.iter_lines()
        for _ in range(5):
            next(lines)
        assert busy_slots(llama_server) >= 1
    # Waited for, however loaded the machine: the slot must stop well before its 900 tokens, which only
    # the proxy closing the upstream connection does. (A fixed deadline of 1 s failed under load.)
    decoded = []
    while busy_slots(llama_server, decoded) or streams_in_flight_with_key(keyed_proxy):
        time.sleep(0.02)
    assert max(decoded) < body["n_predict"] // 2, decoded[-5:]


def busy_slots(llama_server, decoded: list[int] | None = None) -> int:
    """The server's slots at work; the tokens each has generated so far appended to `decoded`, if given."""
    slots = requests.get(llama_server.url + "/slots", timeout=5).json()
    if decoded is not None:
        decoded += [_next_token(slot).get("n_decoded", 0) for slot in slots if slot["is_processing"]] or [0]
    return sum(slot["is_processing"] for slot in slots)


def _next_token(slot: dict) -> dict:
    next_token = slot.get("next_token") or {}
    return next_token[0] if isinstance(next_token, list) else next_token


def streams_in_flight_with_key(proxy) -> float:
    metrics = requests.get(proxy.url + "/metrics", headers=AUTH, timeout=5).text
    return float(next(line.split()[-1] for line in metrics.splitlines() if line.startswith("api_like_oai_streams_in_flight ")))


def test_the_model_is_picked_by_query_or_body_else_the_default(routed_proxy):
    def slot_count(**params):
        return len(requests.get(routed_proxy.url + "/slots", params=params, timeout=10).json())

    assert (slot_count(model="small"), slot_count(model="tiny"), slot_count(model="big"), slot_count()) == (1, 1, 4, 4)
    long_prompt = {"prompt": "hello " * 700, "n_predict": 1}  # over small's 512 tokens, within big's 1024
    on_small = requests.post(routed_proxy.url + "/completion", json={**long_prompt, "model": "small"}, timeout=60)
    assert on_small.status_code == 400 and on_small.json()["error"]["type"] == "exceed_context_size_error"
    on_default = requests.post(routed_proxy.url + "/completion", json=long_prompt, timeout=60)
    assert on_default.status_code == 200, on_default.text
    assert on_default.json()["tokens_evaluated"] > 512


def test_unknown_and_openai_models_are_refused_clearly(routed_proxy):
    unknown = requests.get(routed_proxy.url + "/props", params={"model": "gpt-17"}, timeout=10)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    remote = requests.post(routed_proxy.url + "/completion", json={"model": "remote", "prompt": "Hi"}, timeout=10)
    assert remote.status_code == 400
    assert remote.json()["error"]["code"] == "not_supported" and "OpenAI-compatible" in remote.json()["error"]["message"]


def test_models_list_the_context_each_upstream_has_per_slot(routed_proxy):
    cards = {card["id"]: card for card in requests.get(routed_proxy.url + "/v1/models", timeout=10).json()["data"]}
    assert (cards["big"]["context_length"], cards["small"]["max_model_len"], cards["tiny"]["context_length"]) == (1024, 512, 512)


def test_native_api_can_be_turned_off(llama_server, start_proxy):
    proxy = start_proxy("--llama-api", llama_server.url, "--no-native-api")
    for method, path in (("POST", "/completion"), ("POST", "/infill"), ("GET", "/props")):
        response = requests.request(method, proxy.url + path, json={"prompt": "Hi"}, timeout=10)
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert requests.get(proxy.url + "/v1/models", timeout=10).status_code == 200


def test_a_base_url_with_a_trailing_slash_works(keyed_proxy):
    listing = requests.get(keyed_proxy.url + "//v1//models", headers=AUTH, timeout=10)
    assert listing.status_code == 200 and listing.json()["data"][0]["id"] == "llama.cpp"
    chat = requests.post(
        keyed_proxy.url + "/v1//chat/completions",
        headers=AUTH,
        timeout=60,
        json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3},
    )
    assert chat.status_code == 200 and chat.json()["object"] == "chat.completion"
