"""A swap's stop (issue 42, point 7) against real llama-server processes: a model drained of its requests
(and its slots saved) is killed at once, not asked to shut down; its process is reaped, its port and
its memory are free for the next model, and it starts again on the same port."""

from __future__ import annotations

import socket

import requests

from ..servers import llama_servers_on, still_running
from .test_models_on_demand import TWO_MODELS, chat, launch, model_port, status  # noqa: F401 - launch: the fixture

# llama-server's SIGTERM handler prints this as it begins its ~150 ms of shutting down
SHUTDOWN_LINE = "cleaning up before exit"


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def device_used(proxy) -> float:
    text = requests.get(f"{proxy.url}/metrics", timeout=10).text
    return float(next(line for line in text.splitlines() if line.startswith("api_like_oai_device_used_mib")).rsplit(" ", 1)[1])


def test_a_drained_model_is_killed_at_once_and_its_port_and_memory_are_free(launch):  # noqa: F811
    proxy = launch(TWO_MODELS, "--memory-budget", "400")
    assert chat(proxy, "smol-a").status_code == 200
    port = model_port(proxy, "smol-a")
    [first] = llama_servers_on(port)
    assert chat(proxy, "smol-b").status_code == 200  # the swap: smol-a stopped to make room
    assert status(proxy, "smol-a")["value"] == "unloaded"
    assert still_running([first]) == []  # gone and reaped: no zombie, no orphan
    assert refused(port)
    assert device_used(proxy) == 300  # smol-b's alone
    logs = requests.get(f"{proxy.url}/v1/internal/model/logs", params={"model": "smol-a"}, timeout=10).json()
    text = "\n".join(logs["lines"])
    assert "model loaded" in text and SHUTDOWN_LINE not in text  # SIGKILL: it never began a shutdown
    assert status(proxy, "smol-a")["stage_seconds"]["exit"] < 2
    assert chat(proxy, "smol-a").status_code == 200  # back on the same port
    [second] = llama_servers_on(port)
    assert second != first and status(proxy, "smol-a")["loads"] == 2
