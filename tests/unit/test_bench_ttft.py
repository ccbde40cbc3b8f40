"""The TTFT rows' bookkeeping (issue 54, benchmarks/ttft_rows.py): each API against its llama-server
path, the pairs' order, the added time and its halves, when to stop, the first text of each dialect's
stream, the verdicts, and that the rows survive results.json. The measuring runs in `scripts/bench`."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from benchmarks import report, report_ratios, ttft_rows
from benchmarks.results import BenchmarkResults, Machine, TtftRow, load
from benchmarks.ttft_rows import TtftPlan


def row(differences: list[float], api: str = "/v1/completions", direct: float = 20.0) -> TtftRow:
    measured = TtftRow(api, "/v1/completions")
    for difference in differences:
        measured.add(direct, direct + difference)
    return measured


def test_every_api_is_measured_against_its_nearest_llama_server_path():
    paths = {api.path: api.direct_path for api in ttft_rows.apis("real")}
    assert paths == {
        "/v1/completions": "/v1/completions",
        "/v1/chat/completions": "/v1/chat/completions",
        "/v1/messages": "/v1/chat/completions",
        "/v1/responses": "/v1/chat/completions",
        "/api/chat": "/v1/chat/completions",
    }
    for api in ttft_rows.apis("real"):
        assert api.body["model"] == "real" and api.direct_body["stream"] is True


def test_pairs_swap_their_order_and_rounds_reverse_the_apis():
    assert [ttft_rows.pair_order(n) for n in range(3)] == [("direct", "proxy"), ("proxy", "direct"), ("direct", "proxy")]
    assert ttft_rows.api_order(["a", "b", "c"], 0) == ["a", "b", "c"]
    assert ttft_rows.api_order(["a", "b", "c"], 1) == ["c", "b", "a"]


def test_the_added_time_is_the_median_of_the_pairs_differences_and_its_halves_agree_or_not():
    steady = row([0.5, 0.6, 0.4, 0.5, 0.6, 0.5, 0.4, 0.6])
    assert steady.added_ms() == 0.5
    assert steady.halves_ms() == pytest.approx((0.55, 0.45))  # pairs 0, 1, 4, 5 and 2, 3, 6, 7
    assert math.isclose(steady.agreement_ms(), 0.1)
    drifting = row([0.5, 0.5, 2.0, 2.0, 0.5, 0.5, 2.0, 2.0])
    assert drifting.halves_ms() == (0.5, 2.0) and drifting.agreement_ms() == 1.5
    assert math.isnan(row([0.5, 0.5]).agreement_ms())  # the second half has no pair yet


def test_a_failed_side_leaves_its_pair_out_and_counts_it():
    measured = row([0.5])
    measured.add(None, 20.0)
    assert (measured.direct_ms, measured.proxy_ms, measured.errors, measured.attempts()) == ([20.0], [20.5], 1, 2)


def test_rounds_go_on_until_every_apis_halves_agree_or_the_most_pairs():
    plan = TtftPlan(min_pairs=8, max_pairs=20, step=4, tolerance_ms=0.3)
    agreed, apart = row([0.5] * 8), row([0.5, 0.5, 2.0, 2.0] * 2)
    assert not ttft_rows.settled([row([0.5] * 4)], plan)  # fewer than the plan's fewest
    assert ttft_rows.settled([agreed], plan)
    assert not ttft_rows.settled([agreed, apart], plan)
    assert ttft_rows.settled([row([0.5, 0.5, 2.0, 2.0] * 5)], plan)  # the most: apart, but done
    failing = TtftRow("/api/chat", "/v1/chat/completions", errors=20)
    assert ttft_rows.settled([failing], plan)  # pairs that all fail end too


def test_the_first_text_of_each_dialects_stream():
    anthropic = [
        b'event: message_start\ndata: {"type":"message_start","message":{}}\n\n',
        b'event: content_block_start\ndata: {"type":"content_block_start","index":0}\n\n',
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,',
        b'"delta":{"type":"text_delta","text":"In"}}\n\n',
    ]
    watch = ttft_rows.EventTextWatch(ttft_rows.has_anthropic_text)
    for piece in anthropic[:3]:
        watch.feed(piece)
    assert watch.seen_at is None  # the delta's frame is not whole yet
    watch.feed(anthropic[3])
    assert watch.seen_at is not None
    assert ttft_rows.has_responses_text({"type": "response.output_text.delta", "delta": "In"})
    assert not ttft_rows.has_responses_text({"type": "response.created", "response": {}})
    assert ttft_rows.has_openai_text({"choices": [{"index": 0, "text": " is"}]})
    assert not ttft_rows.has_openai_text({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
    assert ttft_rows.frame_data(b"data: [DONE]") is None


def results_with(rows: list[TtftRow]) -> BenchmarkResults:
    return BenchmarkResults(Machine("cpu", 2, 24.0, "k", "py", "llama", "proxy", "0"), ttft=rows)


def test_the_verdicts_and_the_report():
    rows = [row([0.5] * 8), row([0.6] * 8, "/v1/messages")]
    verdicts = {t.name: (t.measured, t.met) for t in report_ratios.measured_targets(results_with(rows))}
    added = next(v for name, v in verdicts.items() if name.startswith("TTFT added on every API"))
    assert added == ("/v1/completions +0.50 ms; /v1/messages +0.60 ms", True)
    slow = {t.name: t.met for t in ttft_rows.targets([row([1.5] * 8), row([0.5, 0.5, 2.0, 2.0] * 2)])}
    assert not any(slow.values())
    text = report.quick_markdown(results_with(rows))
    assert "| `/v1/messages` | `/v1/completions` | 20.00 | 20.60 | +0.60 | +0.60 / +0.60 | 0.00 | 8 | 0 |" in text


def test_ttft_rows_survive_results_json():
    results = results_with([row([0.5, 0.7, 0.4, 0.6])])
    loaded = load(json.loads(json.dumps(dataclasses.asdict(results))))
    assert loaded.ttft == results.ttft and loaded.ttft[0].added_ms() == results.ttft[0].added_ms()
