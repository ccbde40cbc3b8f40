"""A model's occupancy for an inference pool's picker (supervisor/occupancy.py, pure), the KV layout read
from its command line (LaunchSpec.kv_unified), and the gauges written from it (observability.pool_metrics)."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from api_like_oai.observability import pool_metrics
from api_like_oai.supervisor.occupancy import occupancy, parse_slots
from api_like_oai.supervisor.spec import LaunchSpec


def slot(n_ctx: int, processing: bool, tokens: int | None = None, key: str = "n_prompt_tokens") -> dict:
    return {"n_ctx": n_ctx, "is_processing": processing, **({key: tokens} if tokens is not None else {})}


def test_running_is_the_processing_slots_and_waiting_the_leases_beyond_them_plus_the_load_queue():
    replicas = [[slot(1024, True, 300), slot(1024, False, 100)], [slot(1024, True, 50), slot(1024, True, 10)]]
    found = occupancy(in_flight=7, queued=2, replicas_slots=replicas, unified=False)
    assert (found.running, found.waiting) == (3, 2 + 7 - 3)
    assert (found.kv_used_tokens, found.kv_size_tokens) == (460, 4096)
    assert found.to_json()["kv_utilisation"] == 460 / 4096
    assert found.to_json()["blocks"] == 4096 // 64


def test_waiting_never_goes_below_the_queue_when_slots_were_read_after_a_lease_ended():
    assert occupancy(in_flight=0, queued=1, replicas_slots=[[slot(512, True, 10)]], unified=False).waiting == 1


def test_a_unified_cache_is_one_slots_size_however_many_slots_report_it():
    replicas = [[slot(2048, False, 1024), slot(2048, True, 1024), slot(2048, False), slot(2048, False)]]
    found = occupancy(in_flight=1, queued=0, replicas_slots=replicas, unified=True)
    assert found.kv_size_tokens == 2048 and found.kv_utilisation == 1.0


def test_n_past_is_read_where_llama_server_reports_it():
    assert occupancy(0, 0, [[slot(100, False, 40, key="n_past")]], unified=False).kv_used_tokens == 40


def test_no_replica_answering_is_nothing_used_of_nothing():
    found = occupancy(2, 0, [], unified=True)
    assert (found.waiting, found.running, found.kv_size_tokens, found.kv_utilisation) == (2, 0, 0, 0.0)


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (200, b'[{"id": 0, "n_ctx": 8}, 3]', [{"id": 0, "n_ctx": 8}]),
        (503, b"[]", None),
        (200, b"{}", None),
        (200, b"<html>", None),
    ],
)
def test_parse_slots_keeps_only_a_list_of_slots(status, body, expected):
    assert parse_slots(status, body) == expected


@pytest.mark.parametrize(
    ("args", "unified"),
    [
        ((), True),  # llama-server picks the slots: unified by its default
        (("--parallel", "2"), False),
        (("-np", "-1"), True),
        (("--parallel=4", "--kv-unified"), True),
        (("-kvu", "-no-kvu"), False),  # the last flag wins
    ],
)
def test_kv_unified_follows_llama_servers_flags(args, unified):
    assert LaunchSpec("m", "/m.gguf", (8001,), args=args).kv_unified is unified


def test_pool_metrics_write_one_series_per_model_under_the_names_the_picker_is_configured_with():
    text = pool_metrics({"models": {"qwen": occupancy(5, 1, [[slot(4096, True, 1024), slot(4096, True, 0)]], False).to_json()}})
    samples = {sample.name: sample for family in text_string_to_metric_families(text.decode()) for sample in family.samples}
    assert samples["api_like_oai_pool_requests_waiting"].value == 4.0
    assert samples["api_like_oai_pool_requests_running"].value == 2.0
    assert samples["api_like_oai_pool_kv_cache_usage_perc"].value == 1024 / 8192
    assert samples["api_like_oai_pool_cache_config_info"].labels == {"model": "qwen", "block_size": "64", "num_gpu_blocks": "128"}
