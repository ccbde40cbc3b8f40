"""The batch lane's and the WebSocket's bench rows (benchmarks/batch_lane.py, socket_turns.py; issues 51
and 50): their pure parts, targets judged honestly, the rows kept through results.json into results.md."""

from __future__ import annotations

import dataclasses
import json
import math

from benchmarks import batch_lane, report
from benchmarks.results import BatchLaneResult, BenchmarkResults, Machine, SocketResult, TargetCheck, load


def lane(lane_ms: list[float], plain_ms: list[float], lane_seconds: float = 10.0, errors: int = 0) -> BatchLaneResult:
    return BatchLaneResult(
        4, [100.0, 90.0, 110.0], lane_ms, plain_ms, 3, 8, lane_seconds, 400, 9.0, 400, errors, "0.10, 0.20, 0.30"
    )


def judged(results: BenchmarkResults) -> dict[str, TargetCheck]:
    """The rows' targets: "ttft" and "throughput" (issue 51), "socket" (issue 50)."""
    kinds = {
        "time to first token, p50, a batch": "ttft",
        "tokens per second in the lane": "throughput",
        "WebSocket vs HTTP": "socket",
    }
    return {kind: t for t in results.targets() for words, kind in kinds.items() if words in t.name}


def results_with(**parts) -> BenchmarkResults:
    return BenchmarkResults(Machine("cpu", 2, 24.0, "k", "py", "llama", "proxy", "0"), **parts)


def test_a_batch_file_is_openai_jsonl_with_a_custom_id_per_line():
    bodies = [batch_lane.line_body("lane", n, 32) for n in range(3)]
    rows = [json.loads(row) for row in batch_lane.batch_file(bodies).splitlines()]
    assert [row["custom_id"] for row in rows] == ["line-0", "line-1", "line-2"]
    assert {row["url"] for row in rows} == {"/v1/chat/completions"} and rows[1]["body"]["max_tokens"] == 32
    assert len({row["body"]["messages"][0]["content"] for row in rows}) == 3  # no two lines share a prompt


def test_a_metric_is_read_by_its_name_and_labels():
    text = (
        '# HELP x\napi_like_oai_batch_lines_total{outcome="completed"} 7.0\n'
        'api_like_oai_batch_lines_total{outcome="preempted"} 2.0\n'
    )
    assert batch_lane.metric_value(text, 'api_like_oai_batch_lines_total{outcome="preempted"}') == 2.0
    assert batch_lane.metric_value("", 'api_like_oai_batch_lines_total{outcome="preempted"}') == 0.0


def test_the_lane_is_judged_against_the_idle_box_and_its_lines_run_directly():
    met = judged(results_with(batch=lane([120.0, 110.0, 125.0, math.nan], [900.0, 1000.0, 1100.0], lane_seconds=9.5)))
    assert met["ttft"].met and met["ttft"].measured.startswith("1.20x")  # a failed chat (NaN) is not a time
    assert "without preemption, the lines as plain requests: 10.00x" in met["ttft"].measured
    assert met["throughput"].met and met["throughput"].measured.startswith("0.95x")


def test_a_slow_chat_a_slow_batch_or_an_error_misses_and_an_unmeasured_row_is_not_met():
    slow = judged(results_with(batch=lane([130.0], [900.0], lane_seconds=11.0)))
    assert not slow["ttft"].met and not slow["throughput"].met
    failing = judged(results_with(batch=lane([100.0], [900.0], errors=1)))
    assert not failing["ttft"].met and not failing["throughput"].met
    assert [t.met for t in judged(results_with()).values()] == [False, False, False]


def test_the_socket_must_be_no_slower_and_no_costlier_than_http():
    def met(socket_ms: float, socket_cpu: float) -> bool:
        return judged(results_with(socket=SocketResult(10, 2.0, socket_ms, 2000.0, socket_cpu, 0)))["socket"].met

    assert met(1.5, 1900.0) and not met(2.5, 1900.0) and not met(1.5, 2100.0)

    def met_in_pairs(first_ratio: float, cpu_ratio: float) -> bool:
        row = SocketResult(10, 2.0, 2.0, 2000.0, 2000.0, 0, 150, first_event_pair_ratios=[0.9, first_ratio, 1.1])
        row.cpu_pair_ratios = [0.9, cpu_ratio, 1.1]
        return judged(results_with(socket=row))["socket"].met

    assert met_in_pairs(0.98, 0.99) and not met_in_pairs(1.02, 0.99) and not met_in_pairs(0.98, 1.01)


def test_the_rows_survive_results_json_and_show_in_the_report():
    results = results_with(batch=lane([120.0, 110.0], [900.0]), socket=SocketResult(10, 2.0, 1.5, 2000.0, 1900.0, 0))
    results.measured_alone["batch"] = "2026-12-06 18:00 UTC, load average at its start 0.1"
    again = load(json.loads(json.dumps(dataclasses.asdict(results), default=str)))
    assert again.batch == results.batch and again.socket == results.socket
    text = report.markdown(again)
    assert "### 2g." in text and "the same lines as plain requests (no preemption)" in text
    assert "`scripts/bench --only batch`" in text and "### 2f." in text
