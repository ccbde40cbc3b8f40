"""A box's gauges for an inference pool's endpoint picker (/metrics/pool), against real llama-servers
the proxy starts: they move as requests queue and run, and the KV-cache use is the slots' tokens over
the cache's size as llama-server's own /slots tells them."""

from __future__ import annotations

import threading

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from ..servers import Proxy, eventually, stop

KEY = "pool-metrics-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
# smol: two slots splitting a 2048-token cache; smol-unified: llama-server picks the slots (4) and they
# share one 2048-token cache (its --kv-unified default), each reporting n_ctx 2048.
CONFIG = """
models:
  smol:
    model: {model}
    args: [--ctx-size, "2048", --parallel, "2", --threads, "1"]
  smol-unified:
    model: {model}
    args: [--ctx-size, "2048", --threads, "1"]
"""


@pytest.fixture(scope="module")
def box(provisioned, tmp_path_factory):
    config = tmp_path_factory.mktemp("pool") / "config.yaml"
    config.write_text(CONFIG.format(model=provisioned["MODEL"]))
    proxy = Proxy(
        ["--config", str(config), "--llama-server", provisioned["LLAMA_SERVER"], "--api-key", KEY, "--open-pool-metrics"]
    ).start()
    yield proxy
    stop(proxy.process)


def gauges(proxy: Proxy, model: str) -> dict:
    """The model's four series from /metrics/pool, fetched without a key (as the picker does)."""
    reply = requests.get(f"{proxy.url}/metrics/pool", timeout=10)
    assert reply.status_code == 200, reply.text
    found = {}
    for family in text_string_to_metric_families(reply.text):
        for sample in family.samples:
            if sample.labels.get("model") == model:
                found[sample.name.removeprefix("api_like_oai_pool_")] = (
                    sample.labels if sample.name.endswith("cache_config_info") else sample.value
                )
    return found


def chat(proxy: Proxy, model: str, max_tokens: int, **fields) -> requests.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "Tell a long story."}], "max_tokens": max_tokens, **fields}
    return requests.post(f"{proxy.url}/v1/chat/completions", json=body, headers=AUTH, timeout=300)


def slots(proxy: Proxy, model: str) -> list[dict]:
    """llama-server's own /slots, through the proxy's relay of llama.cpp's API."""
    reply = requests.get(f"{proxy.url}/slots", params={"model": model}, headers=AUTH, timeout=10)
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_the_pool_gauges_need_no_key_while_metrics_does(box):
    assert requests.get(f"{box.url}/metrics", timeout=10).status_code == 401
    assert gauges(box, "smol-unified")["requests_waiting"] == 0.0


def test_the_gauges_move_as_requests_queue_and_run(box):
    assert chat(box, "smol", 2).status_code == 200  # loaded before the load test
    seen: list[dict] = []
    replies: list[int] = []
    senders = [
        threading.Thread(target=lambda: replies.append(chat(box, "smol", 160, ignore_eos=True).status_code)) for _ in range(6)
    ]
    for sender in senders:
        sender.start()

    def two_running_four_waiting() -> bool:
        seen.append(gauges(box, "smol"))
        return seen[-1]["requests_running"] == 2.0 and seen[-1]["requests_waiting"] == 4.0

    eventually(two_running_four_waiting, "2 requests running and 4 waiting on a model with 2 slots", timeout=60)
    assert seen[-1]["kv_cache_usage_perc"] > 0.0  # the running slots hold their prompts' tokens
    for sender in senders:
        sender.join(300)
    assert replies == [200] * 6
    eventually(lambda: gauges(box, "smol")["requests_running"] == 0.0, "nothing running once every answer is in")
    assert gauges(box, "smol")["requests_waiting"] == 0.0


@pytest.mark.parametrize(("model", "cache_size"), [("smol", 2048), ("smol-unified", 2048)])
def test_kv_use_is_the_slots_tokens_over_the_cache_size(box, model, cache_size):
    assert chat(box, model, 24, ignore_eos=True).status_code == 200
    eventually(lambda: gauges(box, model)["requests_running"] == 0.0, "the answer's slot idle")
    held = sum(slot["n_prompt_tokens"] for slot in slots(box, model) if "n_prompt_tokens" in slot)
    measured = gauges(box, model)
    assert held > 24  # the idle slot keeps the conversation's tokens for its next turn
    assert measured["kv_cache_usage_perc"] == pytest.approx(held / cache_size)
    assert sum(slot["n_ctx"] for slot in slots(box, model)) == (cache_size if model == "smol" else 4 * cache_size)
    assert measured["cache_config_info"] == {"model": model, "block_size": "64", "num_gpu_blocks": str(cache_size // 64)}
