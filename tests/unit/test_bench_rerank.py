"""The rerank bench row's arithmetic and report (benchmarks/rerank_row.py, issue 40)."""

from __future__ import annotations

import json

from benchmarks.rerank_row import body, section, targets
from benchmarks.results import RerankRow, load


def test_the_row_is_restated_against_the_direct_calls_time():
    row = RerankRow("8 documents", {"direct": 4.0, "proxy": 5.0}, 800.0, {"direct": 90, "proxy": 80}, 0, "1.0")
    assert (row.time_ratio, row.cpu_share) == (1.25, 0.2)
    assert [check.met for check in targets([row])] == [True, True]
    slow = RerankRow("slow", {"direct": 4.0, "proxy": 7.0}, 2400.0, {"direct": 9, "proxy": 9}, 0, "1.0")
    assert [check.met for check in targets([slow])] == [False, False]
    assert "0.20x" in targets([row])[0].measured and "| 1.25x |" in section([row])
    assert targets([]) == [] and section([]) == ""


def test_the_row_survives_results_json():
    row = RerankRow("8 documents", {"direct": 4.0, "proxy": 5.0}, 800.0, {"direct": 90, "proxy": 80}, 0, "1.0")
    from dataclasses import asdict

    from benchmarks.results import BenchmarkResults, Machine

    machine = Machine(**{name: "" for name in Machine.__dataclass_fields__})
    raw = json.loads(json.dumps(asdict(BenchmarkResults(machine, rerank=[row]))))
    assert load(raw).rerank == [row]


def test_the_body_asks_for_a_page_of_candidates_and_the_top_three():
    assert body(None).keys() == {"query", "documents", "top_n"} and body("ranker")["model"] == "ranker"
    assert len(body(None)["documents"]) == 8 and body(None)["top_n"] == 3
