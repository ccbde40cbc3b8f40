"""Models on demand, hardened (issue 42): a crashed llama-server costs no request that had not started,
the supervisor is restarted when it dies with no llama-server left over or started twice, and a
--models-dir of ten real GGUF files starts and lists them. Real llama-server processes throughout."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from ..servers import children_of, command_line, llama_servers_on, wait_until
from . import test_models_on_demand
from .test_models_on_demand import TWO_MODELS, chat, model_port, status

LONG = [{"role": "user", "content": "Count from one to two hundred in words, one number a line."}]


# test_models_on_demand's fixture: proxies started from a config, none of their llama-servers outliving them
launch = test_models_on_demand.launch


def supervisor_of(proxy) -> int:
    [pid] = [pid for pid in children_of(proxy.process.pid) if "api_like_oai.supervisor" in command_line(pid)]
    return pid


def alive(pid: int) -> bool:
    return bool(command_line(pid))


def test_a_request_right_after_its_llama_server_is_killed_waits_for_the_restart(launch):
    proxy = launch(TWO_MODELS)
    assert chat(proxy, "smol-b").status_code == 200
    port = model_port(proxy, "smol-b")
    [pid] = llama_servers_on(port)
    os.kill(pid, signal.SIGKILL)
    with ThreadPoolExecutor(6) as pool:  # at once: before the supervisor has seen the exit
        replies = list(pool.map(lambda stream: chat(proxy, "smol-b", stream=stream), [False, True] * 3))
    assert [reply.status_code for reply in replies] == [200] * 6, [reply.text for reply in replies]
    # the streams wait for the restart with keep-alives (their prompts rendered once), then get their answer
    assert all(": keep-alive\n\n" in reply.text and reply.text.rstrip().endswith("data: [DONE]") for reply in replies[1::2]), [
        reply.text[:300] for reply in replies[1::2]
    ]
    assert status(proxy, "smol-b")["loads"] == 2  # one restart for all of them
    [restarted] = llama_servers_on(port)
    assert restarted != pid


def test_a_generation_running_when_its_llama_server_dies_ends_with_a_clear_error(launch):
    proxy = launch(TWO_MODELS)
    assert chat(proxy, "smol-a").status_code == 200
    [pid] = llama_servers_on(model_port(proxy, "smol-a"))
    body = {"model": "smol-a", "messages": LONG, "max_tokens": 2000, "stream": True, "ignore_eos": True}
    with requests.post(f"{proxy.url}/v1/chat/completions", json=body, stream=True, timeout=120) as reply:
        lines = reply.iter_lines(decode_unicode=True)
        assert next(line for line in lines if _text_of(line))  # tokens given out: the generation runs
        os.kill(pid, signal.SIGKILL)  # (killed while reading the prompt, it would be sent again after a restart)
        rest = [line for line in lines if line.startswith("data: ")]
    assert reply.status_code == 200
    assert '"error"' in rest[-1] or '"error"' in rest[-2], rest[-3:]
    assert "llama.cpp" in "".join(rest[-2:])
    assert chat(proxy, "smol-a").status_code == 200  # and the next one is answered


def _text_of(line: str) -> str:
    """The text a chat stream's `data:` line gives out ("" for the role chunk, an error, [DONE])."""
    if not line.startswith("data: {"):
        return ""
    choices = json.loads(line[len("data: ") :]).get("choices") or [{}]
    return (choices[0].get("delta") or {}).get("content") or ""


def test_a_model_that_crashes_at_every_start_is_still_a_503_with_its_log_lines(launch):
    proxy = launch("models:\n  broken:\n    model: $MODEL\n    args: [--no-such-flag]\n")
    for _ in range(3):  # retried at once after the first failure, then after a growing pause
        reply = chat(proxy, "broken")
        assert reply.status_code == 503
        assert "--no-such-flag" in reply.json()["error"]["message"]
    assert status(proxy, "broken")["failures"] >= 2


def test_the_supervisor_killed_mid_traffic_is_restarted_and_requests_go_on(launch):
    proxy = launch(TWO_MODELS, "--workers", "2")
    assert chat(proxy, "smol-a").status_code == 200
    port = model_port(proxy, "smol-a")
    [old_server], old_supervisor = llama_servers_on(port), supervisor_of(proxy)
    results, killed_at, done = [], [], threading.Event()

    def traffic(model: str) -> None:
        while not done.is_set():
            sent = time.monotonic()
            reply = chat(proxy, model)
            results.append((sent, reply.status_code, reply.text))

    with ThreadPoolExecutor(4) as pool:
        try:
            for model in ("smol-a", "smol-a", "smol-b", "smol-b"):
                pool.submit(traffic, model)
            wait_until(lambda: len(results) >= 8, proxy.process, "traffic", 60)
            killed_at.append(time.monotonic())
            os.kill(old_supervisor, signal.SIGKILL)
            wait_until(
                lambda: sum(sent > killed_at[0] for sent, _, _ in results) >= 8, proxy.process, "traffic after the kill", 120
            )
        finally:
            done.set()
    after = [(code, text) for sent, code, text in results if sent > killed_at[0]]
    assert [code for code, _ in after] == [200] * len(after), after
    lost = [text for sent, code, text in results if sent <= killed_at[0] and code != 200]
    assert all("llama.cpp" in text for text in lost), lost  # only generations running then, clearly
    new_supervisor = supervisor_of(proxy)
    assert new_supervisor != old_supervisor and not alive(old_supervisor) and not alive(old_server)
    for model in ("smol-a", "smol-b"):
        assert len(llama_servers_on(model_port(proxy, model))) <= 1  # no double start
    assert len(llama_servers_on(port)) == 1


@pytest.fixture(scope="module")
def ten_models(provisioned, gemma_model, tmp_path_factory):
    """A folder of ten GGUF files: SmolLM2 and gemma-3-270m under five names each."""
    folder = tmp_path_factory.mktemp("ten-models")
    for number in range(5):
        (folder / f"smollm2-{number}.gguf").symlink_to(provisioned["MODEL"])
        (folder / f"gemma3-{number}.gguf").symlink_to(gemma_model)
    return folder


def test_a_folder_of_ten_models_starts_and_lists_them_all(ten_models, provisioned, start_proxy):
    proxy = start_proxy(
        "--models-dir",
        str(ten_models),
        "--llama-server",
        provisioned["LLAMA_SERVER"],
        "--llama-args",
        "--ctx-size 1024 --parallel 1 --threads 1",
    )
    try:
        listed = requests.get(f"{proxy.url}/v1/models", timeout=10)
        assert listed.status_code == 200, listed.text
        cards = listed.json()["data"]
        assert sorted(card["id"] for card in cards) == sorted(path.stem for path in ten_models.iterdir())
        assert {card["status"]["value"] for card in cards} == {"unloaded"}
        wait_until(
            lambda: all(
                card["status"]["memory_mib"] for card in requests.get(f"{proxy.url}/v1/models", timeout=10).json()["data"]
            ),
            proxy.process,
            "every estimate",
            60,
        )
        gemma = requests.get(f"{proxy.url}/v1/models/gemma3-3", timeout=10).json()["status"]
        assert (
            gemma["file"]
            == {
                "architecture": "gemma3",
                "context_length": 32768,
                "parameters": gemma["file"]["parameters"],
                "quantization": "Q4_K_M",
            }
            and gemma["file"]["parameters"] > 200_000_000
        )
        assert chat(proxy, "gemma3-3").status_code == 200
    finally:
        proxy.stop()
