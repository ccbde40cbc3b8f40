"""The start-up row with a --models-dir of ten GGUF files (issue 42): judged against ≤ 1 s and ≤ 50 ms a
file, shown in part 4's table, and kept through results.json. The measuring itself runs in scripts/bench."""

from __future__ import annotations

import dataclasses
import json

from benchmarks import report
from benchmarks.results import BenchmarkResults, Machine, ModelsDirStartupResult, StartupResult, load


def judged(seconds: list[float], header_ms: list[float]) -> tuple[BenchmarkResults, dict]:
    results = BenchmarkResults(
        Machine("cpu", 2, 24.0, "k", "py", "llama", "proxy", "0"),
        startup=StartupResult([0.7], 40.0, 30.0, [20.0, 20.0]),
        models_dir_startup=ModelsDirStartupResult(10, seconds, header_ms, [0.55]),
    )
    return results, {t.name: t for t in results.targets() if "issue 42" in t.name}


def test_met_when_the_median_start_and_the_slowest_file_are_within_their_targets():
    results, targets = judged([0.6, 0.9, 1.4], [8.0] * 5 + [30.0] * 5)
    assert [t.met for t in targets.values()] == [True, True]
    section = report.startup_section(results)
    assert "0.90 s" in section and "30.0 ms" in section and "0.55 s" in section  # and one file's, beside it


def test_missed_when_one_file_is_slow_or_the_start_is():
    _, targets = judged([1.2], [8.0] * 9 + [51.0])
    assert [t.met for t in targets.values()] == [False, False]
    _, unmeasured = judged([], [])
    assert [t.measured for t in unmeasured.values()] == ["not measured"] * 2


def test_kept_through_results_json():
    results, _ = judged([0.5], [10.0])
    assert load(json.loads(json.dumps(dataclasses.asdict(results)))).models_dir_startup == results.models_dir_startup
