"""The chart's pods as processes: a box and a front started from the command lines and environments the
chart renders (their Secret and ConfigMap volumes written to files, the models volume standing for the
bundled model's directory, the image's PATH and XDG_DATA_HOME), sharing a real Redis (the chart's
external-Redis values) and the box starting a real llama-server. Each runs as its securityContext says
(readOnlyRootFilesystem): on a read-only root file system but for its emptyDirs (/data, /tmp), in a
mount namespace of its own (tests/read_only_root.sh; the tests run as root). No cluster runs here: what
Kubernetes adds (scheduling, Services, probes, NetworkPolicies) is checked only as schemas
(tests/unit/test_helm_chart.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import requests

from ..conftest import openai_client
from ..helm_chart import container, in_place, mounted_files, one, pod_environment, render
from ..servers import Proxy, RedisServer, eventually, free_port, launch_all, stop

KEY = "sk-chart-test-0123456789abcdef"
READ_ONLY_ROOT = Path(__file__).resolve().parents[1] / "read_only_root.sh"
DATA, TMP = "/data", "/tmp"  # noqa: S108 - the pods' emptyDir mount paths, which stand for directories here
BOX_IP, FRONT_IP = "127.0.0.12", "127.0.0.13"  # each pod's address: a loopback address of its own


def values(redis_url: str, model: Path, box_port: int) -> dict:
    return {
        "redis": {"enabled": False, "url": redis_url},
        "front": {"replicas": 1, "workers": 1},
        "box": {"replicas": 1, "gpus": 0, "port": box_port, "modelsVolume": {"hostPath": str(model.parent)}},
        "models": {
            "smol": {"model": f"/models/{model.name}", "args": ["--ctx-size", "2048", "--parallel", "2", "--threads", "1"]}
        },
        "keys": {"apiKeys": [KEY]},
        "inferencePool": {"enabled": True, "models": [{"model": "smol"}]},
    }


def pod(objects: list[dict], workload: dict, ip: str, port: int, where: Path, model_dir: Path, llama_server: str) -> Proxy:
    """The workload's container as a process: its args, its environment with the pod's paths here."""
    mounts = mounted_files(objects, workload, where)
    if "/models" in mounts:
        mounts["/models"] = model_dir  # the hostPath volume: the directory the model files are in
    for config in mounts["/etc/api-like-oai"].glob("*.yaml"):
        config.write_text(in_place(config.read_text(), mounts))
    env = {name: in_place(value, mounts) for name, value in pod_environment(objects, workload, ip).items()}
    image_env = {"PATH": f"{Path(llama_server).parent}:{os.environ['PATH']}", "XDG_DATA_HOME": str(mounts[DATA])}
    # The pod's /tmp is an emptyDir; here it is a directory elsewhere, which TMPDIR names.
    image_env |= {"TMPDIR": str(mounts[TMP]), "PYTHONDONTWRITEBYTECODE": "1"}
    assert container(workload)["securityContext"]["readOnlyRootFilesystem"] is True
    writable = [str(mounts[DATA]), str(mounts[TMP])]
    command = ("unshare", "-m", str(READ_ONLY_ROOT), *writable, "--", sys.executable, "-m", "api_like_oai")
    return Proxy(list(container(workload).get("args", [])), port=port, host=ip, env=image_env | env, command=command)


@pytest.fixture(scope="module")
def fleet(provisioned, tmp_path_factory):
    where = tmp_path_factory.mktemp("chart-fleet")
    model = Path(provisioned["MODEL"])
    redis_server = RedisServer().start()
    box_port = free_port()
    objects = render(values(redis_server.url, model, box_port))
    box = pod(
        objects, one(objects, "StatefulSet", "-box"), BOX_IP, box_port, where / "box", model.parent, provisioned["LLAMA_SERVER"]
    )
    front = pod(
        objects,
        one(objects, "Deployment", "-front"),
        FRONT_IP,
        free_port(),
        where / "front",
        model.parent,
        provisioned["LLAMA_SERVER"],
    )
    try:
        launch_all([box, front])
        yield {"box": box, "front": front}
    finally:
        stop(*(proxy.process for proxy in (box, front) if proxy.process))
        redis_server.stop()


def test_the_front_relays_to_the_box_that_joined_the_fleet_at_its_pod_address(fleet):
    front, box = fleet["front"], fleet["box"]
    models = lambda: requests.get(f"{front.url}/v1/models", headers={"Authorization": f"Bearer {KEY}"}, timeout=10).json()  # noqa: E731
    eventually(lambda: "smol" in {card["id"] for card in models()["data"]}, "the box's model listed by the front")
    [card] = [card for card in models()["data"] if card["id"] == "smol"]
    assert [where["box"] for where in card["status"]["boxes"]] == [f"http://{BOX_IP}:{box.port}"]
    reply = openai_client(front.url, api_key=KEY).chat.completions.create(
        model="smol", messages=[{"role": "user", "content": "Say hello."}], max_tokens=8
    )
    assert reply.choices[0].message.content
    assert requests.get(f"{front.url}/v1/models", timeout=10).status_code == 401  # the keys' Secret holds


def test_the_box_serves_its_pool_gauges_to_the_picker_without_a_key(fleet):
    reply = requests.get(f"{fleet['box'].url}/metrics/pool", timeout=10)
    assert reply.status_code == 200
    assert 'api_like_oai_pool_cache_config_info{block_size="64",model="smol",num_gpu_blocks="32"} 1.0' in reply.text
    assert requests.get(f"{fleet['box'].url}/metrics", timeout=10).status_code == 401
