"""The Helm chart (deploy/helm/api-like-oai) rendered as `helm template` renders it: by Helm's own Go
SDK (v4, through the pinned helm-python-sdk wheel, which bundles it), with values.schema.json checked
as `helm install` checks it. Shared by the chart's unit test and the fleet started from its command lines."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "helm" / "api-like-oai"
RELEASE, NAMESPACE = "ai", "inference"

# The value sets, each as a team would write its values file.
ONE_BOX_ONE_FRONT = {
    "front": {"replicas": 1},
    "box": {"replicas": 1, "gpus": 0, "modelsVolume": {"hostPath": "/srv/models"}},
    "models": {"smol": {"model": "/models/SmolLM2-135M-Instruct.Q4_1.gguf", "args": ["--ctx-size", "2048"]}},
    "keys": {"apiKeys": ["sk-team-0123456789abcdef"]},
}
GPU_BOXES_AND_AUTOSCALED_FRONTS = {
    "front": {
        "replicas": 2,
        "autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 8, "requestsInFlight": {"enabled": True}},
    },
    "image": {"repository": "registry.example.com/ai/api-like-oai", "tag": "0.1.0"},
    "box": {
        "image": {"repository": "registry.example.com/ai/api-like-oai", "tag": "0.1.0-cuda"},
        "replicas": 4,
        "gpus": 2,
        "memoryBudgetMiB": 150000,
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        "modelsVolume": {"volumeClaimTemplate": {"enabled": True, "size": "500Gi", "storageClassName": "fast"}},
    },
    "models": {
        "qwen-coder": {"model": "/models/qwen2.5-coder-32b-instruct-q4_k_m.gguf", "args": ["--n-gpu-layers", "999"]},
        "llama-70b": {"model": "/models/llama-3.3-70b-instruct-q4_k_m.gguf", "args": ["--n-gpu-layers", "999"]},
    },
    "keys": {"existingSecret": "team-keys"},
}
EXTERNAL_REDIS = {
    "redis": {"enabled": False, "url": "redis://redis.data.svc.cluster.local:6379/3"},
    "box": {"kind": "DaemonSet", "modelsVolume": {"persistentVolumeClaim": "gguf-library"}, "nodeSelector": {"gpu": "true"}},
    "serviceMonitor": {"enabled": True, "bearerTokenSecret": {"name": "team-keys", "key": "admin-keys"}},
    "networkPolicy": {"metricsFrom": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]},
}
INFERENCE_POOLS = {
    "box": {"replicas": 3, "modelsVolume": {"hostPath": "/srv/models"}},
    "models": {
        "qwen-coder": {"model": "/models/qwen2.5-coder-7b-instruct-q4_k_m.gguf", "args": ["--parallel", "4"]},
        "Llama-3.1-8B": {"model": "/models/llama-3.1-8b-instruct-q4_k_m.gguf"},
    },
    "inferencePool": {"enabled": True, "models": [{"model": "qwen-coder"}, {"model": "Llama-3.1-8B", "name": "llama-8b"}]},
    "networkPolicy": {"gatewayFrom": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "istio-system"}}}]},
}
VALUE_SETS = {
    "one box, one front": ONE_BOX_ONE_FRONT,
    "GPU boxes, fronts with an HPA": GPU_BOXES_AND_AUTOSCALED_FRONTS,
    "external Redis": EXTERNAL_REDIS,
    "InferencePools": INFERENCE_POOLS,
}


def render(values: dict) -> list[dict]:
    """Every object the chart renders with `values` (HelmValuesError for values its schema refuses)."""
    import helm_python

    with helm_python.Chart.load(str(CHART)) as chart:
        manifests = chart.render(values, name=RELEASE, namespace=NAMESPACE)
    return [
        document
        for path, text in sorted(manifests.items())
        if path.endswith(".yaml")
        for document in yaml.safe_load_all(text)
        if document
    ]


def one(objects: list[dict], kind: str, suffix: str = "") -> dict:
    """The one object of `kind` whose name ends with `suffix`."""
    [found] = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
    return found


def container(workload: dict) -> dict:
    return workload["spec"]["template"]["spec"]["containers"][0]


def pod_environment(
    objects: list[dict], workload: dict, pod_ip: str, external_secrets: dict | None = None, pod_name: str = ""
) -> dict[str, str]:
    """The container's environment as the kubelet makes it: envFrom's ConfigMaps and Secrets first (each
    key under the source's prefix), then env in order, where $(VAR) references to variables defined
    before are expanded, the downward API gives the pod's IP, name and namespace, and secretKeyRef and
    configMapKeyRef read the rendered Secrets and ConfigMaps (else `external_secrets`)."""
    sources = {"secret": secrets_of(objects, external_secrets), "configMap": config_maps_of(objects)}
    env: dict[str, str] = {}
    for source in container(workload).get("envFrom", []):
        kind = "configMap" if "configMapRef" in source else "secret"
        data = sources[kind][source[f"{kind}Ref"]["name"]]
        env |= {source.get("prefix", "") + key: value for key, value in data.items()}
    downward = {"status.podIP": pod_ip, "metadata.name": pod_name, "metadata.namespace": NAMESPACE}
    for variable in container(workload).get("env", []):
        source = variable.get("valueFrom")
        if source is None:
            value = variable["value"]
            for name, known in env.items():
                value = value.replace(f"$({name})", known)
        elif "fieldRef" in source:
            value = downward[source["fieldRef"]["fieldPath"]]  # another field: a KeyError, to be added here
        else:
            kind = "configMap" if "configMapKeyRef" in source else "secret"
            reference = source[f"{kind}KeyRef"]
            value = sources[kind][reference["name"]][reference["key"]]
        env[variable["name"]] = value
    return env


def secret_data(secret: dict) -> dict[str, str]:
    import base64

    decoded = {key: base64.b64decode(value).decode() for key, value in (secret.get("data") or {}).items()}
    return decoded | dict(secret.get("stringData") or {})


def secrets_of(objects: list[dict], external_secrets: dict | None = None) -> dict[str, dict[str, str]]:
    """Each Secret's keys: the rendered ones', and `external_secrets` (those a team makes itself)."""
    return {**(external_secrets or {}), **{o["metadata"]["name"]: secret_data(o) for o in objects if o["kind"] == "Secret"}}


def config_maps_of(objects: list[dict]) -> dict[str, dict[str, str]]:
    return {o["metadata"]["name"]: o["data"] for o in objects if o["kind"] == "ConfigMap"}


def volume_files(objects: list[dict], volume: dict, external_secrets: dict | None = None) -> dict[str, str]:
    """The files a ConfigMap or Secret volume holds ({} for any other volume)."""
    if "configMap" in volume:
        return config_maps_of(objects)[volume["configMap"]["name"]]
    if "secret" in volume:
        return secrets_of(objects, external_secrets)[volume["secret"]["secretName"]]
    return {}


def mounted_files(objects: list[dict], workload: dict, where: Path, external_secrets: dict | None = None) -> dict[str, Path]:
    """The container's ConfigMap and Secret volumes written under `where`, and its other mounts as
    empty directories there: {mount path in the pod: the directory standing for it here}."""
    volumes = {volume["name"]: volume for volume in workload["spec"]["template"]["spec"]["volumes"]}
    mounts: dict[str, Path] = {}
    for mount in container(workload)["volumeMounts"]:
        directory = where / mount["name"]
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in volume_files(objects, volumes.get(mount["name"], {}), external_secrets).items():
            (directory / name).write_text(text)
        mounts[mount["mountPath"]] = directory
    return mounts


def in_place(value: str, mounts: dict[str, Path]) -> str:
    """`value` with each of the pod's mount paths replaced by the directory standing for it here (in
    one pass: a directory here may itself lie under a path that is a mount in the pod, /tmp)."""
    import re

    pattern = "|".join(re.escape(path) for path in sorted(mounts, key=len, reverse=True))
    return re.sub(rf"(?<![^\s:=])({pattern})(?=/|$|\s)", lambda match: str(mounts[match.group(1)]), value)
