"""Models on demand, hardened (issue 42, points 3-5), against real llama-server processes the proxy
starts: restores checked, a budget per device (a fake nvidia-smi; the llama-servers are GPU-less),
draft models (SmolLM2 as its own draft)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import requests

from api_like_oai.supervisor.configure import GPU_RESERVE_MIB

from ..servers import command_line, llama_servers_on, wait_until
from .test_models_on_demand import (  # noqa: F401 - launch: the proxy-starting fixture
    LONG_PROMPT,
    SLOT_SAVE,
    chat,
    launch,
    model_port,
    port_of,
    status,
)


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
    saved.write_bytes(saved.read_bytes()[:1000])  # cut short: llama-server refuses to restore it
    assert cached_tokens(proxy, "kept") == 0  # answered, with the cache computed afresh
    after = status(proxy, "kept")
    assert after["restore_failures"] == 1 and after["restored_tokens"] == 0 and after["value"] == "loaded"
    assert metric(proxy, 'api_like_oai_model_restore_failures_total{model="kept"}') == 1
    assert "not restored from kept-0-0.bin: llama-server answered 400" in proxy.log()


def test_a_cache_saved_with_other_flags_is_not_restored(launch, tmp_path):  # noqa: F811
    proxy = launch(SLOT_SAVE, "--slot-save-dir", str(tmp_path))
    cached_tokens(proxy, "kept")
    reloaded = requests.post(
        f"{proxy.url}/v1/internal/model/load", timeout=120, json={"model_name": "kept", "args": ["--ctx-size", "1024"]}
    ).json()["status"]
    assert reloaded["loads"] == 2 and reloaded["restores_skipped"] == 1
    assert reloaded["restored_tokens"] == 0 and reloaded["restore_failures"] == 0
    assert "saved by a llama-server started with other flags" in proxy.log()
    assert chat(proxy, "kept").status_code == 200


def on_gpu(device: int) -> str:
    return (
        f'    model: $MODEL\n    args: [--ctx-size, "1024", --parallel, "1", --threads, "1"]\n'
        f"    memory: 496\n    devices: [{device}]\n"
    )


# 496 MiB each: 400 of weights and cache on its GPU with 96 of compute buffers, 96 on the CPU
ON_TWO_GPUS = f"models:\n  a0:\n{on_gpu(0)}  b1:\n{on_gpu(1)}  c0:\n{on_gpu(0)}"


@pytest.fixture
def two_gpus(tmp_path, monkeypatch):
    """A fake nvidia-smi on PATH: two GPUs with 1,500 MiB free each (988 of budget after the reserve)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    fake = folder / "nvidia-smi"
    fake.write_text("#!/bin/sh\nprintf '1500\\n1500\\n'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


def test_each_gpu_has_a_budget_and_a_swap_evicts_only_on_the_gpu_it_needs(launch, two_gpus):  # noqa: F811
    proxy = launch(ON_TWO_GPUS)
    for model in ("b1", "a0", "c0"):  # b1 the least recently used, but on the other GPU
        assert chat(proxy, model).status_code == 200
    assert {model: status(proxy, model)["value"] for model in ("a0", "b1", "c0")} == {
        "a0": "unloaded",
        "b1": "loaded",
        "c0": "loaded",
    }
    assert status(proxy, "a0")["evictions"] == 1 and status(proxy, "c0")["devices"] == {"gpu0": 496, "cpu": 96}
    [pid] = llama_servers_on(model_port(proxy, "c0"))
    assert "CUDA_VISIBLE_DEVICES=0" in Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
    budget = 1500 - GPU_RESERVE_MIB
    assert metric(proxy, 'api_like_oai_device_budget_mib{device="gpu1"}') == budget
    assert metric(proxy, 'api_like_oai_device_used_mib{device="gpu0"}') == 496
    assert metric(proxy, 'api_like_oai_device_used_mib{device="cpu"}') == 2 * 96


def test_a_model_larger_than_its_gpus_budget_is_refused_naming_the_gpu(launch, two_gpus):  # noqa: F811
    proxy = launch(ON_TWO_GPUS.replace("memory: 496\n    devices: [1]", "memory: 1200\n    devices: [1]"))
    reply = chat(proxy, "b1")
    assert reply.status_code == 503 and "on gpu1" in reply.json()["error"]["message"]


DRAFTED = """
models:
  plain:
    model: $MODEL
    args: [--ctx-size, "1024", --parallel, "1", --threads, "1"]
  drafted:
    model: $MODEL
    args: [--ctx-size, "1024", --parallel, "1", --threads, "1"]
    draft: $MODEL
    draft_args: [--spec-draft-n-max, "4"]
"""


def test_a_draft_model_speculates_is_counted_in_memory_and_reports_its_acceptance(launch, provisioned):  # noqa: F811
    proxy = launch(DRAFTED)
    reply = chat(proxy, "drafted", max_tokens=40, temperature=0, messages=[{"role": "user", "content": "Count to 20."}])
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] > 4
    [pid] = llama_servers_on(model_port(proxy, "drafted"))
    argv = command_line(pid)
    assert argv[argv.index("--model-draft") + 1] == provisioned["MODEL"]
    plain, drafted = status(proxy, "plain"), status(proxy, "drafted")
    weights = os.path.getsize(provisioned["MODEL"]) // (1024 * 1024)
    assert drafted["memory_mib"] - plain["memory_mib"] >= weights  # the draft's file and its cache
    wait_until(lambda: status(proxy, "drafted")["draft"]["drafted_tokens"] > 0, proxy.process, "draft counts", 30)
    draft = status(proxy, "drafted")["draft"]
    # the model is its own draft: under greedy sampling it accepts nearly every drafted token
    assert draft["accepted_tokens"] > 0 and draft["acceptance_rate"] > 0.5
    assert metric(proxy, 'api_like_oai_model_draft_acceptance_rate{model="drafted"}') == draft["acceptance_rate"]
    assert "draft" not in plain


ONE_REPLICA_DRAFTS = """
models:
  pair:
    model: $MODEL
    args: [--ctx-size, "1024", --parallel, "1", --threads, "1"]
    replicas: 2
    draft: $MODEL
    draft_replicas: 1
  plain-pair:
    model: $MODEL
    args: [--ctx-size, "1024", --parallel, "1", --threads, "1"]
    replicas: 2
"""


def upstreams_used(proxy) -> list[str]:
    return [
        dict(re.findall(r"(\w+)=(\S+)", line)).get("upstream")
        for line in proxy.log().splitlines()
        if "request_id=" in line and "model=pair" in line
    ]


def test_a_request_for_logprobs_goes_to_the_replica_without_a_draft(launch, provisioned):  # noqa: F811
    proxy = launch(ONE_REPLICA_DRAFTS)
    drafted_url, plain_url = status(proxy, "pair")["upstreams"]
    prompts = [[{"role": "user", "content": f"Count from {n} to {n + 9}."}] for n in range(6)]
    for messages in prompts:  # new prompts spread over both replicas; these must all go to the plain one
        reply = chat(proxy, "pair", max_tokens=12, temperature=0, messages=messages, logprobs=True, top_logprobs=2)
        assert reply.status_code == 200, reply.text
        tokens = reply.json()["choices"][0]["logprobs"]["content"]
        assert tokens and all(len(token["top_logprobs"]) == 2 for token in tokens)
    assert upstreams_used(proxy) == [plain_url] * len(prompts)
    drafted, plain = (command_line(pid) for [pid] in (llama_servers_on(port_of(url)) for url in (drafted_url, plain_url)))
    assert "--model-draft" in drafted and "--model-draft" not in plain
    pair = status(proxy, "pair")
    assert pair["draft"]["replicas"] == 1
    weights = os.path.getsize(provisioned["MODEL"]) // (1024 * 1024)
    extra = pair["memory_mib"] - status(proxy, "plain-pair")["memory_mib"]
    assert weights <= extra < 2 * weights  # one replica's draft, not two
