"""Models on demand against real llama-server processes the proxy starts itself: SmolLM2 under
several names with different contexts, and budgets too small for two of them at once."""

from __future__ import annotations

import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from ..conftest import openai_client
from ..servers import Proxy, children_of, command_line, llama_servers_on, stop, wait_until

HELLO = [{"role": "user", "content": "Say hello."}]


def status(proxy: Proxy, model: str) -> dict:
    return requests.get(f"{proxy.url}/v1/models/{model}", timeout=10).json()["status"]


def wait_for_status(proxy: Proxy, model: str, value: str, timeout: float = 60) -> dict:
    wait_until(lambda: status(proxy, model)["value"] == value, proxy.process, f"{model} {value}", timeout)
    return status(proxy, model)


def chat(proxy: Proxy, model: str, stream: bool = False, **fields) -> requests.Response:
    body = {"model": model, "messages": HELLO, "max_tokens": 8, "stream": stream, **fields}
    return requests.post(f"{proxy.url}/v1/chat/completions", json=body, timeout=180)


@pytest.fixture
def launch(provisioned, tmp_path):
    """Start the proxy with `config` (YAML text, $MODEL standing for the bundled model) and flags; every
    proxy is stopped after the test, and the test fails if a llama-server it started outlives it."""
    started: list[Proxy] = []

    def start(config: str, *flags: str) -> Proxy:
        path = tmp_path / f"config-{len(started)}.yaml"
        path.write_text(config.replace("$MODEL", provisioned["MODEL"]))
        proxy = Proxy(["--config", str(path), "--llama-server", provisioned["LLAMA_SERVER"], *flags]).start()
        started.append(proxy)
        return proxy

    yield start
    ports = [port for proxy in started for port in _ports(proxy)]
    stop(*(proxy.process for proxy in started if proxy.process))
    deadline = time.monotonic() + 10
    while any(llama_servers_on(port) for port in ports) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [port for port in ports if llama_servers_on(port)] == [], "a llama-server outlived the proxy"


def _ports(proxy: Proxy) -> list[int]:
    """The ports of every replica of every model `proxy` starts."""
    try:
        cards = requests.get(f"{proxy.url}/v1/models", timeout=5).json()["data"]
    except (requests.RequestException, ValueError, KeyError):
        return []
    return [port_of(url) for card in cards if "status" in card for url in card["status"]["upstreams"]]


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def model_port(proxy: Proxy, model: str) -> int:
    return port_of(status(proxy, model)["upstreams"][0])


TWO_MODELS = """
models:
  smol-a:
    model: $MODEL
    args: [--ctx-size, "2048", --parallel, "2", --threads, "1"]
    memory: 300
  smol-b:
    model: $MODEL
    args: [--ctx-size, "1024", --parallel, "1", --threads, "1"]
    memory: 300
"""


def test_concurrent_first_requests_start_exactly_one_process(launch):
    proxy = launch(TWO_MODELS, "--memory-budget", "1000")
    assert status(proxy, "smol-a")["value"] == "unloaded"
    with ThreadPoolExecutor(20) as pool:
        replies = list(pool.map(lambda _: chat(proxy, "smol-a"), range(20)))
    assert [reply.status_code for reply in replies] == [200] * 20
    loaded = status(proxy, "smol-a")
    assert loaded["value"] == "loaded" and loaded["loads"] == 1
    port = model_port(proxy, "smol-a")
    assert len(llama_servers_on(port)) == 1


def test_alternating_models_under_a_budget_for_one_are_all_answered_and_swaps_collated(launch):
    proxy = launch(TWO_MODELS, "--memory-budget", "400")
    client = openai_client(proxy.url)

    def streamed(model: str) -> str:
        chunks = list(client.chat.completions.create(model=model, messages=HELLO, max_tokens=8, stream=True))
        return next(c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason)

    order = ["smol-a", "smol-b"] * 8
    with ThreadPoolExecutor(8) as pool:
        finishes = list(pool.map(streamed, order))
    assert all(finish in ("stop", "length") for finish in finishes)  # every stream ended whole
    a, b = status(proxy, "smol-a"), status(proxy, "smol-b")
    assert a["evictions"] + b["evictions"] >= 1
    assert a["loads"] + b["loads"] < len(order)  # collated: far fewer loads than requests
    assert [a["value"], b["value"]].count("loaded") <= 1  # never both in a budget for one


def test_idle_model_is_unloaded_after_its_ttl(launch):
    proxy = launch(TWO_MODELS.replace("memory: 300\n  smol-b", "memory: 300\n    ttl: 2\n  smol-b"))
    assert chat(proxy, "smol-a").status_code == 200
    assert status(proxy, "smol-a")["value"] == "loaded"
    wait_for_status(proxy, "smol-a", "unloaded", timeout=15)


def test_a_killed_child_is_restarted_by_the_next_request(launch):
    proxy = launch(TWO_MODELS)
    assert chat(proxy, "smol-b").status_code == 200
    port = model_port(proxy, "smol-b")
    [pid] = llama_servers_on(port)
    os.kill(pid, signal.SIGKILL)
    failed = wait_for_status(proxy, "smol-b", "failed", timeout=15)
    assert failed["exit_code"] == -9
    reply = chat(proxy, "smol-b")
    assert reply.status_code == 200, reply.text
    assert status(proxy, "smol-b")["loads"] == 2


def test_sigkill_of_the_proxy_leaves_no_llama_server(launch):
    proxy = launch(TWO_MODELS)
    assert chat(proxy, "smol-a").status_code == 200
    port = model_port(proxy, "smol-a")
    assert llama_servers_on(port)
    proxy.process.send_signal(signal.SIGKILL)
    proxy.process.wait(timeout=10)
    deadline = time.monotonic() + 10
    while llama_servers_on(port) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert llama_servers_on(port) == []


@pytest.mark.parametrize(
    ("setting", "in_message"),
    [
        ("model: /nonexistent/model.gguf\n    memory: 100", "exited with code"),
        ("model: $MODEL\n    args: [--no-such-flag]", "--no-such-flag"),
    ],
)
def test_a_model_that_cannot_start_is_a_503_with_its_log_lines(launch, setting, in_message):
    proxy = launch(f"models:\n  broken:\n    {setting}\n")
    reply = chat(proxy, "broken")
    assert reply.status_code == 503
    message = reply.json()["error"]["message"]
    assert in_message in message and "last lines" in message
    assert status(proxy, "broken")["value"] == "failed"
    assert requests.get(f"{proxy.url}/health", timeout=10).status_code == 503
    logs = requests.get(f"{proxy.url}/v1/internal/model/logs", params={"model": "broken"}, timeout=10).json()
    assert logs["lines"]


def test_a_model_larger_than_the_budget_is_refused_at_once_naming_both(launch):
    proxy = launch(TWO_MODELS.replace("memory: 300\n  smol-b", "memory: 90000\n  smol-b"), "--memory-budget", "1000")
    started = time.monotonic()
    reply = chat(proxy, "smol-a")
    assert reply.status_code == 503 and time.monotonic() - started < 5
    assert "90000 MiB" in reply.json()["error"]["message"] and "1000 MiB" in reply.json()["error"]["message"]
    anthropic_reply = requests.post(
        f"{proxy.url}/v1/messages", timeout=30, json={"model": "smol-a", "max_tokens": 8, "messages": HELLO}
    )
    assert anthropic_reply.status_code == 529 and anthropic_reply.json()["type"] == "error"


def test_load_and_unload_api_and_model_status(launch):
    proxy = launch(TWO_MODELS, "--memory-budget", "1000")
    listed = {card["id"]: card for card in requests.get(f"{proxy.url}/v1/models", timeout=10).json()["data"]}
    assert {name: card["status"]["value"] for name, card in listed.items()} == {"smol-a": "unloaded", "smol-b": "unloaded"}
    assert listed["smol-a"]["status"]["memory_mib"] == 300
    assert requests.get(f"{proxy.url}/health", timeout=10).status_code == 200  # unloaded is not unhealthy
    loaded = requests.post(f"{proxy.url}/models/load", json={"model": "smol-a"}, timeout=120).json()
    assert loaded["success"] and loaded["status"]["value"] == "loaded"
    assert status(proxy, "smol-a")["value"] == "loaded"
    unloaded = requests.post(f"{proxy.url}/v1/internal/model/unload", json={"model_name": "smol-a"}, timeout=60).json()
    assert unloaded["status"]["value"] == "unloaded"
    metrics = requests.get(f"{proxy.url}/metrics", timeout=10).text
    assert 'api_like_oai_model_loads_total{model="smol-a"} 1.0' in metrics


def test_status_events_stream_a_load_through_its_stages(launch):
    proxy = launch(TWO_MODELS)
    values = []
    with requests.get(f"{proxy.url}/v1/internal/models/events", stream=True, timeout=60) as events:
        lines = events.iter_lines()
        first = json.loads(next(line for line in lines if line)[len(b"data: ") :])
        assert set(first["models"]) == {"smol-a", "smol-b"}
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(chat, proxy, "smol-a")
            for line in lines:
                if line.startswith(b"data: "):
                    event = json.loads(line[len(b"data: ") :])
                    values.append((event["status"]["value"], event["status"].get("stage")))
                    if event["status"]["value"] == "loaded":
                        break
            assert pending.result().status_code == 200
    assert values[0] == ("loading", "starting") and values[-1] == ("loaded", None)


@pytest.mark.parametrize("worker", ["gevent", "gthread"])
def test_sigterm_ends_an_open_status_stream_rather_than_wait_out_the_grace_period(launch, worker):
    """The status stream has no end of its own: on SIGTERM it ends (as the dashboard's do), and the proxy
    stops at once instead of after its --grace-period of 30 s; under either worker class."""
    proxy = launch(TWO_MODELS, "--worker-class", worker)
    with requests.get(f"{proxy.url}/v1/internal/models/events", stream=True, timeout=60) as events:
        lines = events.iter_lines()
        assert set(json.loads(next(line for line in lines if line)[len(b"data: ") :])["models"]) == {"smol-a", "smol-b"}
        asked = time.monotonic()
        proxy.process.send_signal(signal.SIGTERM)
        assert [line for line in lines if line] == []  # ended, with nothing more
        assert proxy.process.wait(timeout=20) == 0
    assert time.monotonic() - asked < 10


def test_models_dir_discovers_each_gguf_by_its_stem(provisioned, tmp_path, start_proxy):
    models_dir = tmp_path / "models"
    models_dir.mkdir()
    for name in ("smol-one", "smol-two"):
        (models_dir / f"{name}.gguf").symlink_to(provisioned["MODEL"])
    proxy = start_proxy(
        "--models-dir",
        str(models_dir),
        "--llama-server",
        provisioned["LLAMA_SERVER"],
        "--llama-args",
        "--ctx-size 1024 --parallel 1 --threads 1",
    )
    try:
        cards = requests.get(f"{proxy.url}/v1/models", timeout=10).json()["data"]
        listed = {card["id"]: card["status"]["value"] for card in cards}
        assert listed == {"smol-one": "unloaded", "smol-two": "unloaded"}
        assert chat(proxy, "smol-two").status_code == 200
        assert chat(proxy, "no-such-model").status_code == 404
    finally:
        proxy.stop()


def test_a_full_queue_is_a_429_with_retry_after(launch):
    proxy = launch(TWO_MODELS.replace("memory: 300\n  smol-b", "memory: 300\n    queue_limit: 1\n  smol-b"))
    with ThreadPoolExecutor(6) as pool:
        replies = list(pool.map(lambda _: chat(proxy, "smol-a"), range(6)))
    statuses = sorted(reply.status_code for reply in replies)
    assert 200 in statuses and 429 in statuses
    refused = next(reply for reply in replies if reply.status_code == 429)
    assert refused.headers["Retry-After"] and refused.json()["error"]["code"] == "model_queue_full"


SLOT_SAVE = """
models:
  kept:
    model: $MODEL
    args: [--ctx-size, "2048", --parallel, "1", --threads, "1"]
    slot_save: true
"""


# About 450 tokens: a restored cache (> 300 tokens) is told apart from one computed afresh (0). Each
# afresh costs llama-server's one thread the whole prompt: 300 words (1,124 tokens) took 5-12 s each.
LONG_PROMPT = [{"role": "user", "content": "Remember these words: " + " ".join(f"w{n}" for n in range(120))}]


def test_the_kv_cache_is_kept_across_an_unload_with_slot_save(launch, tmp_path):
    proxy = launch(SLOT_SAVE, "--slot-save-dir", str(tmp_path))

    def cached_tokens() -> int:
        reply = chat(proxy, "kept", messages=LONG_PROMPT, max_tokens=1, temperature=0)
        assert reply.status_code == 200, reply.text
        return reply.json()["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)

    cached_tokens()
    requests.post(f"{proxy.url}/models/unload", json={"model": "kept"}, timeout=60).raise_for_status()
    assert list(tmp_path.glob("kept-0-*.bin"))
    assert cached_tokens() > 300  # read back from the saved slot, not computed again


def test_the_memory_estimate_is_the_file_plus_the_kv_cache_for_the_context(provisioned):
    from api_like_oai.supervisor.configure import launch_spec
    from api_like_oai.supervisor.footprint import COMPUTE_RESERVE_MIB, estimate_mib

    model = provisioned["MODEL"]
    small, large = (estimate_mib(launch_spec("m", model, args=["--ctx-size", str(size)])) for size in (1024, 9216))
    # SmolLM2-135M: 30 layers x 3 KV heads x (64 + 64) x 2 bytes per token of context
    assert large - small == 8192 * 30 * 3 * 128 * 2 // (1024 * 1024)
    assert small >= os.path.getsize(model) // (1024 * 1024) + COMPUTE_RESERVE_MIB
    assert estimate_mib(launch_spec("m", model)) == estimate_mib(launch_spec("m", model, args=["-c", "8192"]))  # trained


# One streamed request per API: (path, body for a model). Each API's keep-alive and error event differ.
STREAMED = {
    "openai": ("/v1/chat/completions", lambda model: {"model": model, "messages": HELLO, "max_tokens": 4, "stream": True}),
    "anthropic": ("/v1/messages", lambda model: {"model": model, "messages": HELLO, "max_tokens": 4, "stream": True}),
    "responses": (
        "/v1/responses",
        lambda model: {"model": model, "input": "Say hello.", "max_output_tokens": 16, "stream": True},
    ),
    "ollama": ("/api/chat", lambda model: {"model": model, "messages": HELLO, "stream": True, "options": {"num_predict": 4}}),
}


def streamed(proxy: Proxy, api: str, model: str) -> requests.Response:
    path, body = STREAMED[api]
    return requests.post(f"{proxy.url}{path}", json=body(model), timeout=180)


def starts_with_keepalive(api: str, body: str) -> bool:
    """Whether the stream's first event is the API's keep-alive (Ollama's: an empty piece, not done)."""
    if api == "ollama":
        first = json.loads(body.splitlines()[0])
        return first["done"] is False and first["message"] == {"role": "assistant", "content": ""}
    keepalive = 'event: ping\ndata: {"type": "ping"}\n\n' if api == "anthropic" else ": keep-alive\n\n"
    return body.startswith(keepalive)


def test_streams_waiting_for_a_swap_get_keep_alives_then_their_answer(launch):
    proxy = launch(TWO_MODELS, "--memory-budget", "400")
    with ThreadPoolExecutor(5) as pool:
        # smol-a busy for longer than a keep-alive interval: smol-b has to wait for it to drain
        busy = pool.submit(chat, proxy, "smol-a", max_tokens=400, ignore_eos=True)
        wait_until(lambda: status(proxy, "smol-a")["in_flight"] == 1, proxy.process, "smol-a busy", 60)
        waiting = {api: pool.submit(streamed, proxy, api, "smol-b") for api in STREAMED}
        assert busy.result().json()["usage"]["completion_tokens"] == 400  # not cut by the swap
        bodies = {api: reply.result().text for api, reply in waiting.items()}
    assert all(starts_with_keepalive(api, body) for api, body in bodies.items()), bodies
    assert bodies["openai"].rstrip().endswith("data: [DONE]") and '"finish_reason"' in bodies["openai"]
    assert "event: message_stop" in bodies["anthropic"]
    assert "event: response.completed" in bodies["responses"] or "event: response.incomplete" in bodies["responses"]
    assert json.loads(bodies["ollama"].splitlines()[-1])["done"] is True
    assert status(proxy, "smol-b")["loads"] == 1


def test_a_streamed_load_that_fails_ends_with_each_apis_error_event(launch):
    """Streams waiting for a load that fails: the API's keep-alive, then its own error event naming why."""
    proxy = launch(
        TWO_MODELS.split("  smol-b:")[0] + "  broken:\n    model: $MODEL\n    args: [--no-such-flag]\n    memory: 300\n",
        "--memory-budget",
        "400",
    )
    with ThreadPoolExecutor(5) as pool:
        # smol-a busy: the four wait for it to drain, so all of them wait for the one load that fails
        busy = pool.submit(chat, proxy, "smol-a", max_tokens=400, ignore_eos=True)
        wait_until(lambda: status(proxy, "smol-a")["in_flight"] == 1, proxy.process, "smol-a busy", 60)
        waiting = {api: pool.submit(streamed, proxy, api, "broken") for api in STREAMED}
        replies = {api: reply.result() for api, reply in waiting.items()}
        assert busy.result().status_code == 200
    assert {api: reply.status_code for api, reply in replies.items()} == dict.fromkeys(STREAMED, 200)
    bodies = {api: reply.text for api, reply in replies.items()}
    assert all(starts_with_keepalive(api, body) and "--no-such-flag" in body for api, body in bodies.items()), bodies
    assert '\ndata: {"error":' in bodies["openai"]
    assert 'event: error\ndata: {"type":"error","error":{"type":"overloaded_error"' in bodies["anthropic"]
    failed = bodies["responses"].split("event: response.failed\ndata: ", 1)[1]
    assert json.loads(failed.split("\n", 1)[0])["response"]["status"] == "failed"
    assert "error" in json.loads(bodies["ollama"].splitlines()[-1])


def test_replicas_run_side_by_side_and_a_recycled_worker_restarts_nothing(launch):
    proxy = launch(TWO_MODELS.replace("memory: 300\n  smol-b", "memory: 300\n    replicas: 2\n  smol-b"), "--workers", "2")
    with ThreadPoolExecutor(4) as pool:
        assert [r.status_code for r in pool.map(lambda _: chat(proxy, "smol-a"), range(4))] == [200] * 4
    ports = [port_of(url) for url in status(proxy, "smol-a")["upstreams"]]
    children = {port: llama_servers_on(port) for port in ports}
    assert len(ports) == 2 and all(len(pids) == 1 for pids in children.values())
    workers = [pid for pid in children_of(proxy.process.pid) if "api_like_oai.supervisor" not in command_line(pid)]
    assert len(workers) == 2
    os.kill(workers[0], signal.SIGKILL)  # gunicorn's master starts another worker
    wait_until(
        lambda: len([p for p in children_of(proxy.process.pid) if p not in workers]) >= 2, proxy.process, "a new worker", 30
    )
    with ThreadPoolExecutor(4) as pool:
        assert [r.status_code for r in pool.map(lambda _: chat(proxy, "smol-a"), range(4))] == [200] * 4
    assert {port: llama_servers_on(port) for port in ports} == children  # the same processes
    assert status(proxy, "smol-a")["loads"] == 1


def test_a_load_with_other_args_restarts_the_model_with_them(launch):
    proxy = launch(TWO_MODELS)
    first = requests.post(f"{proxy.url}/v1/internal/model/load", json={"model_name": "smol-b"}, timeout=120).json()
    assert first["status"]["value"] == "loaded" and "args" not in first["status"]
    again = requests.post(
        f"{proxy.url}/v1/internal/model/load", timeout=120, json={"model_name": "smol-b", "args": ["--ctx-size", "512"]}
    ).json()
    assert again["status"]["args"] == ["--ctx-size", "512"] and again["status"]["loads"] == 2
    [pid] = llama_servers_on(model_port(proxy, "smol-b"))
    assert "--ctx-size 512" in " ".join(command_line(pid))
