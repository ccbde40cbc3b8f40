"""The endpoint picker's file discovery written from the fleet's records (fleet/discovery.py)."""

from __future__ import annotations

import yaml

from api_like_oai.fleet.discovery import endpoints, resolve_ipv4, write_if_changed


def record(address: str, *models: str) -> dict:
    return {"address": address, "models": {name: {"state": "unloaded"} for name in models}}


def test_every_box_serving_the_model_at_its_ipv4_address_in_address_order():
    records = [
        record("http://10.0.0.9:8081", "qwen", "llama"),
        record("http://10.0.0.2:9000", "qwen"),
        record("http://10.0.0.3:8081", "llama"),
    ]
    assert endpoints(records, "qwen") == {
        "endpoints": [
            {
                "name": "box-10-0-0-2-9000",
                "namespace": "api-like-oai",
                "address": "10.0.0.2",
                "port": "9000",
                "labels": {"model": "qwen", "llm-d.ai/engine-type": "api-like-oai"},
            },
            {
                "name": "box-10-0-0-9-8081",
                "namespace": "api-like-oai",
                "address": "10.0.0.9",
                "port": "8081",
                "labels": {"model": "qwen", "llm-d.ai/engine-type": "api-like-oai"},
            },
        ]
    }


def test_a_named_box_is_resolved_and_one_without_an_ipv4_address_left_out():
    records = [
        record("http://gpu-1.lan:8081", "qwen"),
        record("http://[fd00::1]:8081", "qwen"),
        record("http://localhost:8081", "qwen"),
    ]
    found = endpoints(records, "qwen", resolve=lambda host: {"gpu-1.lan": "192.168.1.20"}.get(host))
    assert [(endpoint["address"], endpoint["port"]) for endpoint in found["endpoints"]] == [("192.168.1.20", "8081")]
    assert resolve_ipv4("localhost") == "127.0.0.1" and resolve_ipv4("fd00::1") is None


def test_the_file_is_replaced_whole_and_only_when_it_changes(tmp_path):
    path = tmp_path / "endpoints.yaml"
    document = endpoints([record("http://10.0.0.2:8081", "qwen")], "qwen")
    assert write_if_changed(str(path), document) is True
    written = path.stat().st_ino
    assert write_if_changed(str(path), document) is False and path.stat().st_ino == written
    assert yaml.safe_load(path.read_text()) == document
    assert write_if_changed(str(path), {"endpoints": []}) is True and path.stat().st_ino != written
    assert [p.name for p in tmp_path.iterdir()] == ["endpoints.yaml"]  # no temporary file left


def test_the_manuals_example_is_what_the_command_writes():
    import re
    from pathlib import Path

    manual = (Path(__file__).resolve().parents[2] / "docs" / "kubernetes.md").read_text()
    [example] = [
        yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", manual, re.S) if block.startswith("endpoints:")
    ]
    records = [record("http://10.0.0.3:8081", "qwen-coder"), record("http://10.0.0.2:8081", "qwen-coder", "llama-8b")]
    assert example == endpoints(records, "qwen-coder")
