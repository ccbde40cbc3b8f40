"""The Helm chart, rendered by Helm's own engine (tests/helm_chart.py) for the value sets a team sets,
every object validated against Kubernetes' schemas (kubernetes-validate, strict: no unknown field)
and the custom resources against their CRDs' openAPIV3Schema (tests/kubernetes/); wrong values fail
as `helm install` fails them; the command lines it renders parse into the fleet they mean."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from api_like_oai import observability
from api_like_oai.arguments import parse_settings

from ..helm_chart import (
    CHART,
    INFERENCE_POOLS,
    NAMESPACE,
    ONE_BOX_ONE_FRONT,
    ROOT,
    VALUE_SETS,
    container,
    in_place,
    mounted_files,
    one,
    pod_environment,
    render,
)

CRDS = ROOT / "tests" / "kubernetes"
CUSTOM_RESOURCES = {
    ("inference.networking.k8s.io/v1", "InferencePool"): CRDS / "inferencepools.inference.networking.k8s.io-v1.6.0.yaml",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): CRDS / "servicemonitors.monitoring.coreos.com-v0.93.0.yaml",
}
KUBERNETES_VERSIONS = ["1.30.0", "1.37.0"]  # the chart's kubeVersion floor, and the newest schemas


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict]]:
    return {name: render(values) for name, values in VALUE_SETS.items()}


def crd_schema(path: Path) -> dict:
    [version] = yaml.safe_load(path.read_text())["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def validate(resource: dict, kubernetes_version: str) -> None:
    crd = CUSTOM_RESOURCES.get((resource["apiVersion"], resource["kind"]))
    if crd is not None:
        jsonschema.validate(resource, crd_schema(crd))
        if resource["kind"] == "InferencePool":  # the CRD's two CEL rules (x-kubernetes-validations), which jsonschema skips
            picker, ports = resource["spec"]["endpointPickerRef"], [port["number"] for port in resource["spec"]["targetPorts"]]
            assert picker.get("kind", "Service") != "Service" or "port" in picker, "port is required when kind is 'Service'"
            assert len(set(ports)) == len(ports), "port number must be unique"
    else:
        kubernetes_validate.validate(resource, kubernetes_version, strict=True)


@pytest.mark.parametrize("kubernetes_version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("value_set", list(VALUE_SETS))
def test_every_rendered_object_is_valid(rendered, value_set, kubernetes_version):
    objects = rendered[value_set]
    assert {"Deployment", "Service", "ConfigMap"} <= {o["kind"] for o in objects}
    for resource in objects:
        validate(resource, kubernetes_version)


def test_the_validation_refuses_what_kubernetes_would(rendered):
    front = copy.deepcopy(one(rendered["one box, one front"], "Deployment", "-front"))
    front["spec"]["template"]["spec"]["containers"][0]["imagePullPolicies"] = "IfNotPresent"  # no such field
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(front, "1.37.0")
    service = copy.deepcopy(one(rendered["one box, one front"], "Service", "-box"))
    service["spec"]["ports"][0]["port"] = "8081"  # a string
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(service, "1.37.0")
    pool = copy.deepcopy(one(rendered["InferencePools"], "InferencePool", "qwen-coder"))
    pool["spec"]["targetPorts"] = [{"number": port} for port in range(8000, 8009)]  # at most 8
    with pytest.raises(jsonschema.ValidationError):
        validate(pool, "1.37.0")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"box": {"kind": "Deployment"}}, "/box/kind"),
        ({"front": {"replicas": 0}}, "/front/replicas"),
        ({"boxes": {}}, "additional properties 'boxes'"),
        ({"redis": {"url": "http://redis:6379"}}, "/redis/url"),
        ({"inferencePool": {"enabled": True}}, "models"),
        (
            {"inferencePool": {"enabled": True, "models": [{"model": "qwen", "name": "Qwen_Coder"}]}},
            "/inferencePool/models/0/name",
        ),
        ({"keys": {"apiKeys": ["short"]}}, "/keys/apiKeys/0"),
    ],
)
def test_a_wrong_value_fails_at_install(values, message):
    import helm_python

    with pytest.raises(helm_python.HelmValuesError, match=re.escape(message)):
        render({"box": {"modelsVolume": {"hostPath": "/srv/models"}}} | values)


def test_a_box_needs_its_models_volume():
    import helm_python

    with pytest.raises(helm_python.HelmError, match="box.modelsVolume"):
        render({})


def test_the_chart_passes_helm_lint():
    import helm_python

    assert helm_python.lint(str(CHART))["errors"] == []


def test_gpu_boxes_and_autoscaled_fronts(rendered):
    objects = rendered["GPU boxes, fronts with an HPA"]
    boxes = one(objects, "StatefulSet", "-box")
    assert boxes["spec"]["replicas"] == 4
    assert (
        container(boxes)["resources"]["requests"]["nvidia.com/gpu"]
        == container(boxes)["resources"]["limits"]["nvidia.com/gpu"]
        == 2
    )
    assert container(boxes)["image"] == "registry.example.com/ai/api-like-oai:0.1.0-cuda"  # the CUDA build on GPUs
    assert boxes["spec"]["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert boxes["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "500Gi"
    autoscaler = one(objects, "HorizontalPodAutoscaler")
    front = one(objects, "Deployment", "-front")
    assert autoscaler["spec"]["scaleTargetRef"]["name"] == front["metadata"]["name"]
    assert "replicas" not in front["spec"]  # the HPA owns it: two fronts at least
    assert (autoscaler["spec"]["minReplicas"], autoscaler["spec"]["maxReplicas"]) == (2, 8)
    assert container(front)["image"] == "registry.example.com/ai/api-like-oai:0.1.0"
    assert [metric["type"] for metric in autoscaler["spec"]["metrics"]] == ["Resource", "Pods"]
    assert {o["metadata"]["name"] for o in objects if o["kind"] == "PodDisruptionBudget"} == {
        "ai-api-like-oai-front",
        "ai-api-like-oai-box",
    }


def test_an_external_redis_runs_no_redis_of_its_own(rendered):
    objects = rendered["external Redis"]
    assert [o for o in objects if "redis" in o["metadata"]["name"] and o["kind"] in ("StatefulSet", "NetworkPolicy")] == []
    boxes = one(objects, "DaemonSet", "-box")
    env = pod_environment(objects, boxes, "10.0.0.7", {"team-keys": {}})
    assert env["API_LIKE_OAI_FLEET"] == env["API_LIKE_OAI_STORE"] == "redis://redis.data.svc.cluster.local:6379/3"
    assert one(objects, "ServiceMonitor")["spec"]["endpoints"][0]["path"] == "/metrics"
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "PodDisruptionBudget"] == ["ai-api-like-oai-front"]


def test_only_fronts_reach_boxes_unless_pools_add_their_gateway(rendered):
    def box_peers(objects):
        policy = one(objects, "NetworkPolicy", "-box")
        return [peer.get("podSelector", peer) for rule in policy["spec"]["ingress"] for peer in rule["from"]]

    [front] = box_peers(rendered["one box, one front"])
    assert front["matchLabels"]["app.kubernetes.io/component"] == "front"
    components = [
        peer.get("matchLabels", {}).get("app.kubernetes.io/component") for peer in box_peers(rendered["InferencePools"])
    ]
    assert components == ["front", "epp", None]  # None: the gateway's namespace


def test_one_inference_pool_per_model_over_the_boxes_serving_it(rendered):
    objects = rendered["InferencePools"]
    pools = {o["metadata"]["name"]: o for o in objects if o["kind"] == "InferencePool"}
    assert set(pools) == {"qwen-coder", "llama-8b"}
    box_labels = one(objects, "StatefulSet", "-box")["spec"]["template"]["metadata"]["labels"]
    services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}
    for pool in pools.values():
        assert pool["spec"]["selector"]["matchLabels"].items() <= box_labels.items()
        assert pool["spec"]["targetPorts"] == [{"number": 8081}]
        picker = services[pool["spec"]["endpointPickerRef"]["name"]]
        assert 9002 in [port["port"] for port in picker["spec"]["ports"]]
    assert "--open-pool-metrics" in container(one(objects, "StatefulSet", "-box"))["args"]


METRIC_SPEC = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\{model="(?P<model>[^"]*)"\}$')


@pytest.mark.parametrize(("pool", "model"), [("qwen-coder", "qwen-coder"), ("llama-8b", "Llama-3.1-8B")])
def test_each_pickers_config_reads_its_models_series_from_the_boxes(rendered, pool, model):
    [config_map] = [
        o for o in rendered["InferencePools"] if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith(f"-epp-{pool}")
    ]
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    plugins = {plugin.get("name", plugin["type"]): plugin for plugin in config["plugins"]}
    assert plugins["pool-metrics"]["parameters"]["path"] == "/metrics/pool"
    [engine] = plugins["pool-gauges"]["parameters"]["engineConfigs"]
    assert plugins["pool-gauges"]["parameters"]["defaultEngine"] == engine["name"] == "api-like-oai"
    specs = {
        key: METRIC_SPEC.match(engine[key]).groupdict()
        for key in ("queuedRequestsSpec", "runningRequestsSpec", "kvUsageSpec", "cacheInfoSpec")
    }
    assert {spec["model"] for spec in specs.values()} == {model}
    assert [spec["name"] for spec in specs.values()] == [
        observability.POOL_WAITING,
        observability.POOL_RUNNING,
        observability.POOL_KV_USAGE,
        observability.POOL_CACHE_INFO,
    ]
    scored = [entry["pluginRef"] for entry in config["schedulingProfiles"][0]["plugins"]]
    assert scored == ["queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer", "session-affinity-scorer"]
    assert {plugin["type"] for plugin in config["plugins"]} >= set(scored)


def settings_of(objects: list[dict], workload: dict, tmp_path: Path, monkeypatch):
    """Settings as the rendered container's command line and environment make them, its volumes here."""
    mounts = mounted_files(objects, workload, tmp_path, {"team-keys": {"api-keys": "sk-a\n", "admin-keys": ""}})
    env = pod_environment(objects, workload, "10.1.2.3", {"team-keys": {}})
    for name in [name for name in os.environ if name.startswith("API_LIKE_OAI_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, in_place(value, mounts))
    return parse_settings(container(workload).get("args", []))


def test_the_rendered_command_lines_make_a_box_and_a_front_of_one_fleet(tmp_path, monkeypatch):
    objects = render(INFERENCE_POOLS)
    box = settings_of(objects, one(objects, "StatefulSet", "-box"), tmp_path / "box", monkeypatch)
    front = settings_of(objects, one(objects, "Deployment", "-front"), tmp_path / "front", monkeypatch)
    assert box.fleet.advertise == "http://10.1.2.3:8081" and front.fleet.advertise is None
    assert box.fleet.redis_url == front.fleet.redis_url == "redis://ai-api-like-oai-redis:6379/0"
    assert box.fleet.secret == front.fleet.secret != ""
    assert box.open_pool_metrics and not front.open_pool_metrics
    assert {spec.name for spec in box.supervisor.models} == {"qwen-coder", "Llama-3.1-8B"}
    assert front.models == () and front.supervisor is None
    assert NAMESPACE == "inference"


def test_a_teams_extra_env_reaches_the_box_as_the_kubelet_makes_it():
    """box.extraEnv after the chart's variables: the downward API's fields, $(VAR) references to
    variables before it, and a team's own Secret (what tests/container runs the box with)."""
    extra = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": "k8s.pod.name=$(POD_NAME),k8s.pod.ip=$(POD_IP)"},
        {"name": "OTEL_EXPORTER_OTLP_HEADERS", "valueFrom": {"secretKeyRef": {"name": "otel", "key": "headers"}}},
    ]
    objects = render(ONE_BOX_ONE_FRONT | {"box": ONE_BOX_ONE_FRONT["box"] | {"extraEnv": extra}})
    boxes = one(objects, "StatefulSet", "-box")
    validate(boxes, "1.37.0")
    env = pod_environment(objects, boxes, "10.0.0.7", {"otel": {"headers": "authorization=Bearer x"}}, pod_name="ai-box-0")
    assert env["OTEL_RESOURCE_ATTRIBUTES"] == "k8s.pod.name=ai-box-0,k8s.pod.ip=10.0.0.7"
    assert env["OTEL_EXPORTER_OTLP_HEADERS"] == "authorization=Bearer x"
    assert env["API_LIKE_OAI_ADVERTISE"] == "http://10.0.0.7:8081"
    assert list(env)[-3:] == [variable["name"] for variable in extra]


def test_the_manuals_picker_config_without_kubernetes_is_the_charts_with_the_file_discovery_added(rendered):
    manual = (ROOT / "docs" / "kubernetes.md").read_text()
    [standalone] = [
        yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", manual, re.S) if "file-discovery" in block
    ]
    [config_map] = [
        o for o in rendered["InferencePools"] if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-epp-qwen-coder")
    ]
    chart = yaml.safe_load(config_map["data"]["config.yaml"])
    discovery = {"name": "boxes", "type": "file-discovery", "parameters": {"path": "/etc/epp/endpoints.yaml", "watchFile": True}}
    assert standalone["plugins"] == [discovery, *chart["plugins"]]
    assert standalone["dataLayer"] == {"discovery": {"pluginRef": "boxes"}, **chart["dataLayer"]}
    assert {key: value for key, value in standalone.items() if key not in ("plugins", "dataLayer")} == {
        key: value for key, value in chart.items() if key not in ("plugins", "dataLayer")
    }


def test_the_manuals_values_install_as_they_are(rendered):
    manual = (ROOT / "docs" / "kubernetes.md").read_text()
    blocks = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", manual, re.S)]
    team = next(block for block in blocks if "image" in block and "box" in block)
    pools = next(block for block in blocks if "inferencePool" in block)
    objects = render(team | pools)
    for resource in objects:
        validate(resource, "1.37.0")
    assert {o["metadata"]["name"] for o in objects if o["kind"] == "InferencePool"} == {"qwen-coder", "llama-8b"}


WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet")


@pytest.mark.parametrize("value_set", list(VALUE_SETS))
def test_every_selector_selects_the_pods_it_means(rendered, value_set):
    """What the API server and the controllers hold that the schemas do not: a workload's selector
    matches its own pods, and each Service, budget, policy and pool selects some workload's pods."""
    objects = rendered[value_set]
    pods = {o["metadata"]["name"]: o["spec"]["template"]["metadata"]["labels"] for o in objects if o["kind"] in WORKLOADS}

    def selects(selector: dict) -> list[str]:
        return [name for name, labels in pods.items() if selector.items() <= labels.items()]

    for workload in (o for o in objects if o["kind"] in WORKLOADS):
        assert selects(workload["spec"]["selector"]["matchLabels"]) == [workload["metadata"]["name"]]
    selectors = [o["spec"]["selector"] for o in objects if o["kind"] == "Service"]
    selectors += [o["spec"]["selector"]["matchLabels"] for o in objects if o["kind"] in ("PodDisruptionBudget", "InferencePool")]
    selectors += [o["spec"]["podSelector"]["matchLabels"] for o in objects if o["kind"] == "NetworkPolicy"]
    assert [selector for selector in selectors if len(selects(selector)) != 1] == []
    for workload in (o for o in objects if o["kind"] == "StatefulSet"):
        assert workload["spec"]["serviceName"] in {o["metadata"]["name"] for o in objects if o["kind"] == "Service"}
