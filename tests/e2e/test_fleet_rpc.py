"""A model larger than either box's budget, pooled over llama.cpp's RPC backend: a host box
(127.0.0.2) and a box lending memory through its rpc-server (127.0.0.3), a front (127.0.0.4), a real
Redis, real llama-server and rpc-server processes. The model's memory is declared in the config (600
MiB) above each box's budget (400 MiB), so no box can start it alone."""

from __future__ import annotations

import pytest
import requests

from ..conftest import openai_client
from ..servers import (
    Proxy,
    RedisServer,
    box_config,
    command_line,
    descendants_of,
    eventually,
    fleet_box,
    kill_instance,
    still_running,
    stop,
)

SECRET = "a-fleet-secret-for-the-rpc-tests-0123456789"
MODEL = "big"
CONFIG = box_config(MODEL, 600, '--ctx-size, "1024", --parallel, "1", --threads, "1"')
LENT = 300


@pytest.fixture(scope="module")
def pool(provisioned, tmp_path_factory):
    directory = tmp_path_factory.mktemp("fleet-rpc")
    (directory / "secret").write_text(SECRET)
    redis_server = RedisServer().start()
    common = ["--fleet", redis_server.url, "--fleet-secret-file", str(directory / "secret")]
    host, lender = (_box(common, directory, provisioned, n, lend) for n, lend in ((2, None), (3, LENT)))
    front = Proxy(list(common), host="127.0.0.4")
    instances = [host, lender, front]
    try:
        for proxy in instances:
            proxy.launch()
        for proxy in instances:
            proxy.ready()
        eventually(lambda: _fleet_metric(front, "api_like_oai_fleet_boxes") == 2.0, "both boxes in the fleet")
        yield {"host": host, "lender": lender, "front": front}
    finally:
        stop(*(proxy.process for proxy in instances if proxy.process))
        redis_server.stop()


def _box(common, directory, provisioned, last_octet: int, lend: int | None) -> Proxy:
    return fleet_box(directory, last_octet - 2, common, provisioned, *(["--rpc-lend", str(lend)] if lend else []), config=CONFIG)


def _fleet_metric(front: Proxy, series: str) -> float | None:
    """The value of one series (its name and labels as /metrics writes them) on the front's /metrics."""
    values = dict(
        line.rsplit(" ", 1)
        for line in requests.get(front.url + "/metrics", timeout=10).text.splitlines()
        if line and not line.startswith("#")
    )
    return float(values[series]) if series in values else None


def _processes(proxy: Proxy, binary: str) -> list[list[str]]:
    return [argv for argv in map(command_line, descendants_of(proxy.process.pid)) if argv and argv[0].endswith(binary)]


def test_a_model_larger_than_either_box_answers_through_rpc_over_both(pool):
    host, lender, front = pool["host"], pool["lender"], pool["front"]
    raw = openai_client(front.url).chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hello."}], max_tokens=8
    )
    assert raw.parse().choices[0].message.content
    assert (raw.headers["X-Fleet-Box"], raw.headers["X-Fleet-Route"]) == (host.url, "rpc")
    [rpc_server] = _processes(lender, "rpc-server")
    endpoint = f"{rpc_server[rpc_server.index('-H') + 1]}:{rpc_server[rpc_server.index('-p') + 1]}"
    [llama_server] = _processes(host, "llama-server")
    assert llama_server[llama_server.index("--rpc") + 1] == endpoint
    assert _processes(lender, "llama-server") == []


def test_each_boxs_share_is_counted_against_its_budget(pool):
    host, lender, front = pool["host"], pool["lender"], pool["front"]
    eventually(
        lambda: _fleet_metric(front, f'api_like_oai_fleet_box_used_mib{{box="{host.url}"}}') == 600.0 - LENT,
        "the host's share used on the host",
    )
    assert _fleet_metric(front, f'api_like_oai_fleet_box_budget_mib{{box="{lender.url}"}}') == 400.0 - LENT

    def host_entry() -> tuple:
        cards = requests.get(front.url + "/v1/models", timeout=10).json()["data"]
        boxes = {box["box"]: box for box in next(card for card in cards if card["id"] == MODEL)["status"]["boxes"]}
        return boxes[host.url]["state"], boxes[host.url]["memory_mib"]

    # the box's record is written once a second: its state may still read "loading" just after the load
    eventually(lambda: host_entry() == ("loaded", 600 - LENT), "the host's record: loaded, with its share")


def test_a_killed_lender_leaves_no_rpc_server_behind(pool):
    lender = pool["lender"]
    rpc_servers = [
        pid for pid in descendants_of(lender.process.pid) if command_line(pid)[:1] and command_line(pid)[0].endswith("rpc-server")
    ]
    assert rpc_servers
    leftovers = kill_instance(lender.process)
    eventually(lambda: not still_running(leftovers), "the killed lender's member and rpc-server gone")
    eventually(lambda: _fleet_metric(pool["front"], "api_like_oai_fleet_boxes") == 1.0, "the lender out of the fleet")
