"""Models on demand, hardened (issue 42, points 3-5), against real llama-server processes the proxy
starts: restores checked, a budget per device (a fake nvidia-smi; the llama-servers are GPU-less),
draft models (SmolLM2 as its own draft)."""

from __future__ import annotations

import requests

from .test_models_on_demand import SLOT_SAVE, chat, launch, status  # noqa: F401 - launch: the proxy-starting fixture

LONG_PROMPT = [{"role": "user", "content": "Remember these words: " + " ".join(f"w{n}" for n in range(300))}]


def unload(proxy, model: str) -> None:
    requests.post(f"{proxy.url}/models/unload", json={"model": model}, timeout=60).raise_for_status()


def cached_tokens(proxy, model: str) -> int:
    reply = chat(proxy, model, messages=LONG_PROMPT, max_tokens=1, temperature=0)
    assert reply.status_code == 200, reply.text
    return reply.json()["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)


def metric(proxy, line_start: str) -> float:
    text = requests.get(f"{proxy.url}/metrics", timeout=10).text
    return float(next(line for line in text.splitlines() if line.startswith(line_start)).rsplit(" ", 1)[1])


def test_a_restore_is_counted_once_llama_server_confirms_its_tokens(launch, tmp_path):  # noqa: F811
    proxy = launch(SLOT_SAVE, "--slot-save-dir", str(tmp_path))
    cached_tokens(proxy, "kept")
    unload(proxy, "kept")
    assert cached_tokens(proxy, "kept") > 300
    restored = status(proxy, "kept")
    assert restored["restored_tokens"] > 300 and restored["restore_failures"] == 0
    assert metric(proxy, 'api_like_oai_model_restored_tokens_total{model="kept"}') == restored["restored_tokens"]


def test_a_broken_saved_cache_is_a_warning_and_a_count_not_an_error(launch, tmp_path):  # noqa: F811
    proxy = launch(SLOT_SAVE, "--slot-save-dir", str(tmp_path))
    cached_tokens(proxy, "kept")
    unload(proxy, "kept")
    [saved] = tmp_path.glob("kept-0-*.bin")
    saved.write_bytes(saved.read_bytes()[:1000])    # cut short: llama-server refuses to restore it
    assert cached_tokens(proxy, "kept") == 0         # answered, with the cache computed afresh
    after = status(proxy, "kept")
    assert after["restore_failures"] == 1 and after["restored_tokens"] == 0 and after["value"] == "loaded"
    assert metric(proxy, 'api_like_oai_model_restore_failures_total{model="kept"}') == 1
    assert "not restored from kept-0-0.bin: llama-server answered 400" in proxy.log()


def test_a_cache_saved_with_other_flags_is_not_restored(launch, tmp_path):  # noqa: F811
    proxy = launch(SLOT_SAVE, "--slot-save-dir", str(tmp_path))
    cached_tokens(proxy, "kept")
    reloaded = requests.post(f"{proxy.url}/v1/internal/model/load", timeout=120,
                             json={"model_name": "kept", "args": ["--ctx-size", "1024"]}).json()["status"]
    assert reloaded["loads"] == 2 and reloaded["restores_skipped"] == 1
    assert reloaded["restored_tokens"] == 0 and reloaded["restore_failures"] == 0
    assert "saved by a llama-server started with other flags" in proxy.log()
    assert chat(proxy, "kept").status_code == 200
