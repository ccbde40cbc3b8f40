"""The Helm chart's pods as containers of the image scripts/test-container built: its Redis, one box and
one front, each run by podman with exactly the command, arguments, environment, volumes and security
context the chart renders (tests/helm_chart.py), as the kubelet would run them, for the release of one
box and one front and the same with InferencePools on. The box starts llama-server with SmolLM2 from the
models volume; the front relays a chat to it through the fleet in Redis.

No cluster runs here; podman stands in for the kubelet, and where Kubernetes does what podman cannot,
the test does it as Kubernetes would (each emulation is said where it is made):
- the pod network: a podman network of the release; a pod's IP is its container's fixed address there,
  which is also what the downward API gives the pod as POD_IP (so the box advertises it);
- a Service's DNS name: a network alias of the pod the Service selects (podman's DNS answers it);
- Secret and ConfigMap volumes: their rendered keys written as files (defaultMode, the fsGroup's);
  emptyDirs and volumeClaimTemplates: directories of the test; hostPath: the host's directory itself
  (the models volume's hostPath is the bundled model's directory);
- resources: memory and CPU limits and CPU requests set on the container's cgroup, as the kubelet sets
  them (no scheduler places the pods by their requests, or by a GPU);
- probes: run by the test as the kubelet runs them (readiness waited for, liveness checked);
- pods start in order (Redis, then the box and the front): the kubelet would restart a pod that came up
  before Redis, podman does not.
Not run: the endpoint picker (its image cannot be pulled here), the NetworkPolicies (nothing enforces
them here: the box's own refusal of calls without the fleet secret is tested instead), node placement
(no scheduler, no GPU). The chart's Redis image (redis:7.4 from Docker Hub, not reachable
here) is set in the values to the Debian redis-server image scripts/test-container builds, as a team
with a registry mirror would set it.

scripts/test-container runs this module with API_LIKE_OAI_TEST_IMAGE and API_LIKE_OAI_TEST_REDIS_IMAGE
(the images it built) and MODEL; the plain test run leaves tests/container/ out (tests/conftest.py)."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import secrets
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from api_like_oai import observability

from ..conftest import openai_client
from ..helm_chart import NAMESPACE, container, one, pod_environment, render, secrets_of, volume_files
from ..servers import RUN_VARIABLE, eventually

KEY, ADMIN_KEY = "sk-chart-pod-0123456789abcdef", "sk-chart-pod-admin-0123456789abcdef"
# this run's containers and networks: names of their own, and this label (scripts/test-container, which
# removes what a killed run left, names the run)
RUN = os.environ.get("API_LIKE_OAI_TEST_RUN") or secrets.token_hex(3)
LABEL = f"api-like-oai-test=chart-pods-{RUN}"
RELEASES = {
    "one box, one front": {},
    "InferencePools": {"inferencePool": {"enabled": True, "models": [{"model": "smol"}]}},
}
PULL = {"Never": "never", "IfNotPresent": "missing", "Always": "always"}
CHAT = {"model": "smol", "max_tokens": 8, "messages": [{"role": "user", "content": "Say hi"}]}


def image_values(image: str) -> dict:
    """An image's values: the one built here, never pulled (a name without a tag is podman's :latest)."""
    repository, _, tag = image.rpartition(":")
    if not repository or "/" in tag:
        repository, tag = image, "latest"
    return {"repository": repository, "tag": tag, "pullPolicy": "Never"}


def values(model: Path, extra: dict) -> dict:
    return {
        "image": image_values(os.environ["API_LIKE_OAI_TEST_IMAGE"]),
        "redis": {"image": image_values(os.environ["API_LIKE_OAI_TEST_REDIS_IMAGE"])},
        "front": {"replicas": 1, "workers": 1},
        "box": {"replicas": 1, "gpus": 0, "modelsVolume": {"hostPath": str(model.parent)}},
        "models": {
            "smol": {"model": f"/models/{model.name}", "args": ["--ctx-size", "2048", "--parallel", "2", "--threads", "1"]}
        },
        "keys": {"apiKeys": [KEY], "adminKeys": [ADMIN_KEY]},
    } | extra


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    # Without the test run's marker: podman's own helpers (conmon, aardvark-dns) are podman's to end;
    # the containers this module starts are found by their label and removed by its fixture.
    env = {name: value for name, value in os.environ.items() if name != RUN_VARIABLE}
    return subprocess.run(["podman", *args], check=check, text=True, capture_output=True, env=env)


@dataclass
class Pod:
    name: str  # the pod's name (its hostname); its container's is this with the run's suffix
    ip: str
    workload: dict

    @property
    def container(self) -> str:
        return f"{self.name}-{RUN}"

    @property
    def spec(self) -> dict:
        return container(self.workload)

    def port(self, port: int | str) -> int:
        """A probe's or Service's port: a number, or the name of one of the container's ports."""
        return port if isinstance(port, int) else next(p["containerPort"] for p in self.spec["ports"] if p["name"] == port)

    @property
    def url(self) -> str:
        return f"http://{self.ip}:{self.port('http')}"


def pod_name(workload: dict) -> str:
    """A StatefulSet's first pod's name; a Deployment's pods have a generated suffix (this stands for it)."""
    suffix = "0" if workload["kind"] == "StatefulSet" else "7d4b9c6f5-x2k8p"
    return f"{workload['metadata']['name']}-{suffix}"


def run(objects: list[dict], workload: dict, network: str, ip: str, where: Path) -> Pod:
    """The workload's pod started as the kubelet starts it: no `command` keeps the image's entrypoint,
    `args` replace its CMD, the environment is the rendered one (its Secrets' values read)."""
    pod = Pod(pod_name(workload), ip, workload)
    where.mkdir(parents=True)
    env = pod_environment(objects, workload, ip, pod_name=pod.name)  # POD_IP: the downward API's, emulated
    assert not [name for name, value in env.items() if "\n" in value]  # (an env file holds one line each)
    (where / "env").write_text("".join(f"{name}={value}\n" for name, value in env.items()))
    options = ["--name", pod.container, "--label", LABEL, "--hostname", pod.name, "--network", network, "--ip", ip]
    options += [f"--network-alias={alias}" for alias in service_names(objects, workload)]
    options += ["--env-file", str(where / "env"), "--pull", PULL[pod.spec["imagePullPolicy"]]]
    options += security_options(workload) + resource_options(pod.spec) + volume_options(objects, workload, where)
    if "command" in pod.spec:
        options += ["--entrypoint", json.dumps(pod.spec["command"])]
    podman("run", "--detach", *options, pod.spec["image"], *pod.spec.get("args", []))
    return pod


def service_names(objects: list[dict], workload: dict) -> list[str]:
    """The DNS names of the Services selecting the workload's pods (cluster DNS, emulated by aliases)."""
    labels = workload["spec"]["template"]["metadata"]["labels"]
    names = [o["metadata"]["name"] for o in objects if o["kind"] == "Service" and o["spec"]["selector"].items() <= labels.items()]
    return [alias for name in names for alias in (name, f"{name}.{NAMESPACE}.svc.cluster.local")]


def security_options(workload: dict) -> list[str]:
    """The pod's and the container's securityContext as podman's options."""
    pod = workload["spec"]["template"]["spec"].get("securityContext", {})
    own = container(workload).get("securityContext", {})
    user, group = own.get("runAsUser", pod.get("runAsUser")), own.get("runAsGroup", pod.get("runAsGroup"))
    if own.get("runAsNonRoot", pod.get("runAsNonRoot")):
        assert user not in (None, 0), "runAsNonRoot with no user but root"
    options = [f"--user={user}" + (f":{group}" if group is not None else "")] if user is not None else []
    options += [f"--group-add={pod['fsGroup']}"] if "fsGroup" in pod else []
    if own.get("readOnlyRootFilesystem"):
        options += ["--read-only", "--read-only-tmpfs=false"]  # (podman's tmpfs on /tmp and /run: a pod has none)
    if own.get("allowPrivilegeEscalation") is False:
        options.append("--security-opt=no-new-privileges")
    capabilities = own.get("capabilities", {})
    options += [f"--cap-drop={name}" for name in capabilities.get("drop", [])]
    options += [f"--cap-add={name}" for name in capabilities.get("add", [])]
    seccomp = own.get("seccompProfile", pod.get("seccompProfile", {"type": "RuntimeDefault"}))
    assert seccomp == {"type": "RuntimeDefault"}  # podman's default profile is its runtime default
    return options


QUANTITY = re.compile(r"([0-9.]+)(Ki|Mi|Gi|Ti|k|M|G|T|m|)")
UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "m": 1e-3, "": 1}


def quantity(value: str | int) -> float:
    number, unit = QUANTITY.fullmatch(str(value)).groups()
    return float(number) * UNITS[unit]


def resource_options(spec: dict) -> list[str]:
    """The container's resources as the kubelet gives them to its cgroup: a memory limit, a CPU limit
    (a CFS quota), CPU requests as shares. (A GPU request places a pod on a node: no scheduler here.)"""
    requests, limits = spec.get("resources", {}).get("requests", {}), spec.get("resources", {}).get("limits", {})
    options = [f"--memory={int(quantity(limits['memory']))}"] if "memory" in limits else []
    options += [f"--cpus={quantity(limits['cpu'])}"] if "cpu" in limits else []
    options += [f"--cpu-shares={max(2, int(quantity(requests['cpu']) * 1024))}"] if "cpu" in requests else []
    return options


def volume_options(objects: list[dict], workload: dict, where: Path) -> list[str]:
    """The container's volumeMounts as podman's volumes, each volume made as the kubelet makes it."""
    spec = workload["spec"]["template"]["spec"]
    volumes = {volume["name"]: volume for volume in spec.get("volumes", [])}
    volumes |= {t["metadata"]["name"]: {"claim": t} for t in workload["spec"].get("volumeClaimTemplates", [])}
    fs_group = spec.get("securityContext", {}).get("fsGroup", 0)
    options = []
    for mount in container(workload).get("volumeMounts", []):
        volume = volumes[mount["name"]]
        source = volume_source(objects, volume, where / "volumes" / mount["name"], fs_group)
        read_only = mount.get("readOnly") or "configMap" in volume or "secret" in volume  # (these always are)
        options.append(f"--volume={source}:{mount['mountPath']}" + (":ro" if read_only else ""))
    return options


def volume_source(objects: list[dict], volume: dict, directory: Path, fs_group: int) -> str:
    """The host directory of a volume: a hostPath's own; else a new one (an emptyDir, a claim's volume, a
    ConfigMap's or Secret's keys as files with its defaultMode), group-owned by the pod's fsGroup."""
    if "hostPath" in volume:
        path = volume["hostPath"]["path"]
        assert volume["hostPath"].get("type") != "Directory" or Path(path).is_dir()
        return path
    directory.mkdir(parents=True)
    os.chown(directory, 0, fs_group)
    directory.chmod(0o2777 if "emptyDir" in volume else 0o2775)
    mode = (volume.get("configMap") or volume.get("secret") or {}).get("defaultMode", 0o644)
    for name, text in volume_files(objects, volume).items():
        (directory / name).write_text(text)
        os.chown(directory / name, 0, fs_group)
        (directory / name).chmod(mode)
    return str(directory)


def probe_passes(pod: Pod, probe: dict) -> bool:
    """One run of a probe as the kubelet runs it: httpGet answered 200-399, tcpSocket accepted, exec 0."""
    timeout = probe.get("timeoutSeconds", 1)
    try:
        if "httpGet" in probe:
            get = probe["httpGet"]
            answer = requests.get(f"http://{pod.ip}:{pod.port(get['port'])}{get.get('path', '/')}", timeout=timeout)
            return 200 <= answer.status_code < 400
        if "tcpSocket" in probe:
            socket.create_connection((pod.ip, pod.port(probe["tcpSocket"]["port"])), timeout=timeout).close()
            return True
    except (requests.RequestException, OSError):
        return False
    return podman("exec", pod.container, *probe["exec"]["command"], check=False).returncode == 0


def wait_ready(pod: Pod, patience: float = 120.0) -> None:
    """Until the pod's readinessProbe passes; fails with its log's end if it stops or never does."""
    deadline = time.monotonic() + patience
    while not probe_passes(pod, pod.spec["readinessProbe"]):
        state = podman("inspect", "--format", "{{.State.Status}}", pod.container, check=False).stdout.strip()
        if state != "running" or time.monotonic() > deadline:
            log = podman("logs", "--tail", "40", pod.container, check=False)
            raise AssertionError(f"{pod.name} is {state}, not ready; its log's end:\n{log.stdout}{log.stderr}")
        time.sleep(1)


@dataclass
class Release:
    objects: list[dict]
    pods: dict[str, Pod]  # by component: redis, box, front
    pools: bool


@pytest.fixture(scope="module", params=list(RELEASES))
def release(request, tmp_path_factory):
    model = Path(os.environ["MODEL"])
    objects = render(values(model, RELEASES[request.param]))
    network = f"chart-pods-{RUN}-{list(RELEASES).index(request.param)}"
    podman("network", "create", "--label", LABEL, network)
    pods: dict[str, Pod] = {}
    try:
        subnet = podman("network", "inspect", "--format", "{{range .Subnets}}{{.Subnet}}{{end}}", network).stdout
        addresses = (str(address) for address in list(ipaddress.ip_network(subnet.strip()).hosts())[9:])
        where = tmp_path_factory.mktemp("chart-pods")
        for component, kind in (("redis", "StatefulSet"), ("box", "StatefulSet"), ("front", "Deployment")):
            workload = one(objects, kind, f"-{component}")
            pods[component] = run(objects, workload, network, next(addresses), where / component)
            if component == "redis":
                wait_ready(pods[component])
        for pod in pods.values():
            wait_ready(pod)
        yield Release(objects, pods, bool(RELEASES[request.param]))
    finally:
        remove(list(pods.values()), network)


def remove(pods: list[Pod], network: str) -> None:
    """Each pod stopped as the kubelet stops it (SIGTERM, then its grace period), then removed, Redis
    last (the box withdraws from the fleet there); no container or network of the release is left."""
    for pod in reversed(pods):
        grace = pod.workload["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
        podman("stop", "--time", str(grace), pod.container, check=False)
        podman("rm", "--force", pod.container, check=False)
    podman("network", "rm", "--force", network, check=False)
    left = podman("ps", "--all", "--format", "{{.Names}}", "--filter", f"label={LABEL}").stdout.split()
    assert left == [], f"containers left: {left}"


def test_each_pod_is_ready_and_alive_as_its_probes_say(release):
    for pod in release.pods.values():
        assert "readinessProbe" in pod.spec and "livenessProbe" in pod.spec, pod.name
        eventually(lambda pod=pod: probe_passes(pod, pod.spec["readinessProbe"]), f"{pod.name}'s readiness")
        eventually(lambda pod=pod: probe_passes(pod, pod.spec["livenessProbe"]), f"{pod.name}'s liveness")
    [box_probe] = [release.pods["box"].spec["readinessProbe"]["httpGet"]]
    assert box_probe["path"] == "/health"


def test_the_box_joins_the_fleet_at_its_pod_address_and_the_front_relays_a_chat_to_it(release):
    front, box = release.pods["front"], release.pods["box"]
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}  # (who sees every box's address; a key sees `box 1`)
    models = lambda: requests.get(f"{front.url}/v1/models", headers=headers, timeout=10).json()["data"]  # noqa: E731
    eventually(lambda: "smol" in {card["id"] for card in models()}, "the box's model listed by the front", timeout=60)
    [card] = [card for card in models() if card["id"] == "smol"]
    assert [where["box"] for where in card["status"]["boxes"]] == [box.url]  # the pod's IP, as the box advertised it
    reply = openai_client(front.url, api_key=KEY).chat.completions.create(
        model="smol", messages=[{"role": "user", "content": "Say hello."}], max_tokens=8
    )
    assert reply.choices[0].message.content
    assert requests.post(f"{front.url}/v1/chat/completions", json=CHAT, timeout=10).status_code == 401  # the keys' Secret


def test_the_box_takes_a_call_only_with_the_fleet_secret(release):
    """What the NetworkPolicy means (only fronts reach boxes), as far as the box itself holds it: a call
    without the fleet secret, or with a wrong one, is refused; with the Secret's, it is answered."""
    box = release.pods["box"]
    fleet_secret = next(data["fleet-secret"] for data in secrets_of(release.objects).values() if "fleet-secret" in data)
    chat = lambda headers: requests.post(f"{box.url}/v1/chat/completions", json=CHAT, headers=headers, timeout=120)  # noqa: E731
    assert chat({}).status_code == 401
    assert chat({"X-Fleet-Secret": "not-the-fleet-secret-0123456789"}).status_code == 401
    reply = chat({"X-Fleet-Secret": fleet_secret})
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"]
    # A key of the release's is answered too (boxes hold the keys' Secret): only the NetworkPolicy,
    # which nothing enforces here, keeps clients on the fronts (docs/kubernetes.md says so).
    assert chat({"Authorization": f"Bearer {KEY}"}).status_code == 200


POOL_GAUGES = (observability.POOL_WAITING, observability.POOL_RUNNING, observability.POOL_KV_USAGE)


def test_the_box_exports_the_pool_gauges_without_a_key_only_with_inference_pools(release):
    box = release.pods["box"]
    assert ("--open-pool-metrics" in box.spec["args"]) is release.pools
    # a model has gauges once the box has started it: a chat through the front starts it
    chat = requests.post(
        f"{release.pods['front'].url}/v1/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {KEY}"}, timeout=120
    )
    assert chat.status_code == 200
    open_reply = requests.get(f"{box.url}/metrics/pool", timeout=10)
    if not release.pools:
        assert open_reply.status_code == 401
    admin_reply = requests.get(f"{box.url}/metrics/pool", headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=10)
    text = (open_reply if release.pools else admin_reply).text
    for gauge in POOL_GAUGES:
        assert re.search(rf'^{gauge}\{{model="smol"\}} \d', text, re.M), gauge
    assert f'{observability.POOL_CACHE_INFO}{{block_size="64",model="smol",num_gpu_blocks="32"}} 1.0' in text
    assert requests.get(f"{box.url}/metrics", timeout=10).status_code == 401  # the rest of /metrics: an admin's
