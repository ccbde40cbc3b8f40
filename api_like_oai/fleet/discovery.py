"""The endpoint picker's file discovery for a fleet outside Kubernetes: the llm-d router's EPP can run
without Kubernetes, reading its pool's endpoints from a YAML file it watches (its `file-discovery`
plugin). `api-like-oai fleet endpoints` writes that file from the boxes' records in Redis, for one
model: every box that serves it, at its advertised address, labelled with the model. The EPP then
scrapes each box's /metrics/pool (the box started with --open-pool-metrics) as in a cluster.

The file is replaced in one rename, which the plugin's watcher takes as a new file (a partly written
one is never read); it is rewritten only when its endpoints change.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import tempfile
from collections.abc import Callable
from urllib.parse import urlsplit

import yaml

NAMESPACE = "api-like-oai"  # the endpoints' namespace in the EPP's datastore (its names are unique within it)
ENGINE_LABEL = "llm-d.ai/engine-type"  # the picker's engineConfigs entry for the boxes' gauges


def resolve_ipv4(host: str) -> str | None:
    """The IPv4 address of `host` (the plugin takes no names and no IPv6), or None if it has none."""
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        pass
    try:
        return socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except OSError:
        return None


def endpoints(records: list[dict], model: str, resolve: Callable[[str], str | None] = resolve_ipv4) -> dict:
    """The file-discovery document for `model`: each box whose record lists it (loaded or not: a box
    starts it on demand), in address order; a box whose host has no IPv4 address is left out."""
    found = []
    for record in sorted(records, key=lambda record: record["address"]):
        if model not in record.get("models", {}):
            continue
        parts = urlsplit(record["address"])
        address = resolve(parts.hostname or "")
        if address is None or parts.port is None:
            continue
        found.append(
            {
                "name": f"box-{address.replace('.', '-')}-{parts.port}",
                "namespace": NAMESPACE,
                "address": address,
                "port": str(parts.port),
                "labels": {"model": model, ENGINE_LABEL: "api-like-oai"},
            }
        )
    return {"endpoints": found}


def write_if_changed(path: str, document: dict) -> bool:
    """Write `document` as YAML to `path` by one rename, unless the file already holds it; whether it wrote."""
    text = yaml.safe_dump(document, sort_keys=False)
    try:
        with open(path, encoding="utf-8") as current:
            if current.read() == text:
                return False
    except OSError:
        pass
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(prefix=".endpoints-", dir=directory)
    with os.fdopen(handle, "w", encoding="utf-8") as file:
        file.write(text)
    os.chmod(temporary, 0o644)
    os.replace(temporary, path)
    return True
