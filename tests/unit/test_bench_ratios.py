"""The ratio rows' bookkeeping (issue 29): the ABBA order, each target restated against its neighbour in
the same row, the verdicts, and that the rows survive results.json. The measuring itself runs in
`scripts/bench --quick` and the whole `scripts/bench`."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import time

import pytest

from benchmarks import ratios, report, report_ratios
from benchmarks.results import (
    BEFORE,
    ONE_LINE_CHAT,
    REQUEST_ERROR_TARGET,
    AgentTurnResult,
    BenchmarkResults,
    FrontCell,
    Machine,
    RatioRow,
    RatiosResult,
    block_error,
    load,
)


def cpu_row(name: str, kind: str, floor: float, proxy: float, litellm: float, errors: int = 0) -> RatioRow:
    def cell(target: str, cost: float) -> FrontCell:
        per_request, per_token = (cost, math.nan) if kind == "request" else (cost * 64, cost)
        windows = [per_token if kind == "token" else per_request] * 4
        return FrontCell(target, 100, 8.0, per_request, per_token, errors if target == "proxy" else 0, window_costs=windows)

    cells = [cell("floor", floor), cell("proxy", proxy), cell("litellm", litellm)]
    return RatioRow(name, kind, 8, cells, "1.00", block_seconds=2.0 if kind == "request" else 0.0)


def generation_row(
    direct_ttft: float, proxy_ttft: float, litellm_ttft: float, proxy_rate: float, litellm_rate: float
) -> RatioRow:
    cells = [
        FrontCell("direct", 12, 10.0, math.nan, math.nan, 0, direct_ttft, 100.0),
        FrontCell("proxy", 12, 10.0, 9000.0, math.nan, 0, proxy_ttft, proxy_rate),
        FrontCell("litellm", 12, 10.0, 90000.0, math.nan, 0, litellm_ttft, litellm_rate),
    ]
    return RatioRow("real generation, streamed chat, 1 client", "generation", 1, cells, "1.00")


def results_with(rows: list[RatioRow]) -> BenchmarkResults:
    return BenchmarkResults(
        Machine("cpu", 2, 24.0, "k", "py", "llama", "proxy", "0"),
        ratios=RatiosResult("2026-12-02 12:00 UTC", "1.00", 1, "litellm", rows),
    )


def ratio_targets(results: BenchmarkResults) -> dict[str, tuple[str, bool]]:
    names = ("proxy ÷ floor", "(ratio rows)", "LiteLLM")
    return {t.name: (t.measured, t.met) for t in results.targets() if any(name in t.name for name in names)}


def test_targets_alternate_abba():
    assert list(ratios.passes(("floor", "proxy", "litellm"), 4)) == [
        "floor",
        "proxy",
        "litellm",
        "litellm",
        "proxy",
        "floor",
        "floor",
        "proxy",
        "litellm",
        "litellm",
        "proxy",
        "floor",
    ]


def test_costs_are_restated_against_the_floor_of_the_same_row():
    row = cpu_row("paced 16 streams @ 8 ms, keep-alive", "token", 50.0, 60.0, 600.0)
    assert row.cost("proxy") == 60.0 and row.over_floor("proxy") == 1.2 and row.over_floor("litellm") == 12.0
    assert row.ahead_of_litellm()


def test_generation_is_restated_against_direct():
    row = generation_row(20.0, 20.5, 35.0, 99.5, 90.0)
    assert row.ttft_added_ms("proxy") == 0.5 and row.ttft_added_ms("litellm") == 15.0
    assert row.tokens_ratio("proxy") == 0.995 and row.ahead_of_litellm()
    assert not generation_row(20.0, 36.0, 35.0, 99.5, 90.0).ahead_of_litellm()


def test_every_ratio_target_met_within_its_bound():
    rows = [
        cpu_row("non-streamed, instant upstream, 8 clients", "request", 600.0, 700.0, 9000.0),
        cpu_row("paced 16 streams @ 8 ms, keep-alive", "token", 50.0, 62.0, 600.0),
        generation_row(20.0, 20.8, 35.0, 99.2, 90.0),
    ]
    verdicts = ratio_targets(results_with(rows))
    assert len(verdicts) == 6 and all(met for _, met in verdicts.values()), verdicts


def test_a_ratio_past_its_bound_or_a_row_with_errors_is_missed():
    over = results_with(
        [
            cpu_row("non-streamed, instant upstream, 8 clients", "request", 600.0, 800.0, 9000.0),
            cpu_row("paced 16 streams @ 8 ms, keep-alive", "token", 50.0, 55.0, 600.0, errors=3),
        ]
    )
    verdicts = ratio_targets(over)
    whole = next(v for name, v in verdicts.items() if name.startswith("non-streamed"))
    paced = next(v for name, v in verdicts.items() if name.startswith("paced"))
    assert whole == ("non-streamed, instant upstream, 8 clients: 1.33x", False)
    assert not paced[1] and "3 errors" in paced[0]


def test_behind_litellm_on_one_row_misses_the_litellm_target():
    verdicts = ratio_targets(
        results_with([cpu_row("streamed 64 tokens, instant upstream, 8 clients", "request", 600.0, 700.0, 650.0)])
    )
    measured, met = next(v for name, v in verdicts.items() if "LiteLLM" in name)
    assert not met and "BEHIND" in measured


def test_unmeasured_ratio_targets_are_missed_not_passed():
    verdicts = ratio_targets(BenchmarkResults(Machine("cpu", 2, 24.0, "k", "py", "llama", "proxy", "0")))
    assert verdicts and all(measured == "not measured" and not met for measured, met in verdicts.values())


def test_warm_agent_turn_is_judged_against_a_one_line_chat():
    def turn(name: str, warm_ms: float) -> AgentTurnResult:
        return AgentTurnResult(name, 1000, 0, [], 5, warm_ms, warm_ms, 0.1, 0.1)

    results = BenchmarkResults(
        Machine("cpu", 2, 24.0, "k", "py", "llama", "proxy", "0"),
        agent_turns=[turn(ONE_LINE_CHAT, 1.0), turn("codex_turn", 1.8), turn("claude_code_turn", 2.5)],
    )
    warm = next(t for t in results.targets() if t.name.startswith("agent turn replayed warm"))
    assert not warm.met and "claude_code_turn 2.5x" in warm.measured


def test_ratio_rows_survive_results_json_and_show_in_the_report():
    results = results_with(
        [
            cpu_row("non-streamed, instant upstream, 8 clients", "request", 600.0, 700.0, 9000.0),
            generation_row(20.0, 20.8, 35.0, 99.2, 90.0),
        ]
    )
    again = load(json.loads(json.dumps(dataclasses.asdict(results), default=str)))
    assert json.dumps(dataclasses.asdict(again.ratios)) == json.dumps(dataclasses.asdict(results.ratios))  # NaN too
    text = report.markdown(again)
    assert "1.17x" in text and "15.00" in text  # proxy ÷ floor; LiteLLM's TTFT added


def test_litellm_failures_count_against_litellm_alone():
    row = cpu_row("non-streamed, instant upstream, 8 clients", "request", 600.0, 700.0, 9000.0)
    row.cell("litellm").errors = 5
    verdicts = ratio_targets(results_with([row]))
    assert next(met for name, (_, met) in verdicts.items() if name.startswith("non-streamed"))
    assert row.errors() == 0 and row.errors(("litellm",)) == 5 and row.ahead_of_litellm()
    row.cell("proxy").errors = 6
    assert not row.ahead_of_litellm()


def against_row(proxy_windows: list[float], before_windows: list[float], floor_windows: list[float]) -> RatioRow:
    """A paced row with the proxy at an earlier revision beside this tree's (`--against`)."""

    def cell(target: str, windows: list[float]) -> FrontCell:
        cost = statistics.median(windows)
        return FrontCell(target, 100, 8.0, cost * 64, cost, 0, window_costs=windows)

    cells = [cell("floor", floor_windows), cell("proxy", proxy_windows), cell(BEFORE, before_windows)]
    return RatioRow("paced 16 streams @ 8 ms, keep-alive", "token", 16, [*cells, cell("litellm", [600.0, 600.0])], "1.00")


def against_verdict(rows: list[RatioRow]) -> tuple[str, bool]:
    results = results_with(rows)
    results.ratios.against = "main~1 (abc1234)"
    check = next(t for t in report_ratios.measured_targets(results) if "the proxy at main~1" in t.name)
    return check.measured, check.met


def test_a_row_no_worse_than_the_earlier_proxy_within_its_noise_is_met():
    # the floor's windows differ by 10% of their median: a proxy 6% dearer than before is within that
    row = against_row([63.0, 64.0], [60.0, 60.0], [50.0, 55.0])
    assert math.isclose(row.noise(), 5.0 / 52.5)
    measured, met = against_verdict([row])
    assert met and "1.06x (noise 10%)" in measured


def test_a_row_worse_than_the_earlier_proxy_beyond_its_noise_is_missed():
    row = against_row([70.0, 71.0], [60.0, 61.0], [50.0, 51.0])
    measured, met = against_verdict([row])
    assert not met and "1.17x" in measured


def test_the_earlier_proxy_shows_in_its_own_table_and_survives_results_json():
    results = results_with([against_row([63.0, 64.0], [60.0, 60.0], [50.0, 55.0])])
    results.ratios.against = "main~1 (abc1234)"
    again = load(json.loads(json.dumps(dataclasses.asdict(results), default=str)))
    assert again.ratios.against == "main~1 (abc1234)" and again.ratios.rows[0].cell(BEFORE).window_costs == [60.0, 60.0]
    text = report.quick_markdown(again)
    assert "The proxy beside itself at main~1 (abc1234)" in text and "1.058x" in text and "±10%" in text


def test_without_against_there_is_no_verdict_on_an_earlier_proxy():
    results = results_with([cpu_row("non-streamed, instant upstream, 8 clients", "request", 600.0, 700.0, 9000.0)])
    assert not any("the proxy at" in t.name for t in report_ratios.measured_targets(results))


def test_litellm_windows_come_after_the_fronts_compared_closely():
    # LiteLLM's cut requests keep it busy after its window: no window of the floor or the proxy follows one
    order = ratios.window_order(("floor", "proxy", BEFORE, "litellm"), 2)
    assert order == ["floor", "proxy", BEFORE, BEFORE, "proxy", "floor", "litellm", "litellm"]


def blocks_row(floor: list[float], proxy: list[float], before: list[float] | None = None) -> RatioRow:
    """A non-streamed request-cost row whose floor and proxy (and earlier proxy) cost these in its blocks."""

    def cell(target: str, blocks: list[float]) -> FrontCell:
        return FrontCell(target, 1000, 30.0, statistics.mean(blocks), math.nan, 0, window_costs=blocks)

    cells = [cell("floor", floor), cell("proxy", proxy), *([cell(BEFORE, before)] if before else [])]
    row = RatioRow("non-streamed, instant upstream, 8 clients", "request", 8, cells, "1.00", block_seconds=2.0)
    row.cells.append(FrontCell("litellm", 50, 6.0, 9000.0, math.nan, 0, window_costs=[9000.0, 9000.0]))
    return row


def test_a_request_cost_rows_error_is_the_spread_of_its_blocks_ratios_over_their_root():
    floor = [100.0, 200.0, 100.0, 100.0]  # the machine twice as slow in block 1: the ratio holds
    proxy = [250.0, 500.0, 230.0, 270.0]
    ratios_ = [2.5, 2.5, 2.3, 2.7]
    expected = statistics.stdev(ratios_) / 2 / 2.5
    assert block_error(floor, proxy) == pytest.approx(expected)
    assert block_error([100.0] * 3, [250.0] * 3) == 0.0
    assert math.isnan(block_error(floor[:2], proxy[:2]))  # two blocks: not known yet
    # a block where the front answered nothing (∞) or the floor spent nothing is left out
    assert block_error([*floor, 0.0], [*proxy, 300.0]) == pytest.approx(expected)
    assert block_error([*floor, 100.0], [*proxy, math.inf]) == pytest.approx(expected)


def test_a_request_cost_rows_error_is_reported_and_judged_against_its_bound():
    steady = blocks_row([100.0, 100.0, 100.0, 100.0], [250.0, 252.0, 248.0, 250.0])
    measured, met = ratio_targets(results_with([steady]))[REQUEST_ERROR_TARGET]
    assert met and "±0.3%" in measured
    assert "±0.3% (4 × 2 s)" in report_ratios.ratios_section(results_with([steady]))
    drifting = blocks_row([100.0, 100.0, 100.0, 100.0], [230.0, 250.0, 270.0, 290.0])
    measured, met = ratio_targets(results_with([drifting]))[REQUEST_ERROR_TARGET]
    assert not met and "±5.0%" in measured
    paced = cpu_row("paced 16 streams @ 8 ms, keep-alive", "token", 60.0, 61.0, 600.0)
    assert report_ratios._cpu_row(paced)[5] == "–"  # no blocks in a paced row


def test_against_a_request_cost_rows_noise_is_twice_its_error_of_this_over_the_earlier_proxy():
    row = blocks_row([100.0] * 4, [250.0, 252.0, 248.0, 250.0], before=[240.0, 240.0, 240.0, 240.0])
    assert row.noise() == pytest.approx(2 * block_error(row.cell(BEFORE).window_costs, row.cell("proxy").window_costs))
    measured, met = against_verdict([row])
    assert not met and "1.04x (noise 1%)" in measured  # 4% dearer, known within 1%: a change
    row.cell("proxy").window_costs = [230.0, 270.0, 220.0, 280.0]  # the same mean, known within 12%
    measured, met = against_verdict([row])
    assert met and "(noise 12%)" in measured


def test_a_block_adds_each_fronts_cpu_answers_and_errors_and_its_cost_in_it():
    spent = {"floor": ratios._Totals(), "proxy": ratios._Totals()}
    before = {"floor": (1_000_000_000, 100, 0), "proxy": (2_000_000_000, 50, 0)}
    after = {"floor": (1_450_000_000, 1100, 0), "proxy": (3_200_000_000, 450, 2)}
    ratios._add_block(spent, before, after, 1.0)
    ratios._add_block(spent, after, {"floor": (1_950_000_000, 2100, 0), "proxy": (3_200_000_000, 450, 2)}, 1.0)
    assert spent["floor"].windows == [450.0, 500.0] and spent["floor"].requests == 2000
    assert spent["proxy"].windows[0] == 3000.0 and math.isnan(spent["proxy"].windows[1])  # nothing spent, none answered
    assert spent["proxy"].errors == 2 and spent["proxy"].seconds == 2.0
    assert spent["proxy"].cpu == pytest.approx(1.2)


def test_blocks_are_added_until_every_front_over_the_floor_is_known_within_the_plan():
    plan = ratios.RatioPlan(request_error=0.02)
    spent = {"floor": ratios._Totals(windows=[100.0] * 4), "proxy": ratios._Totals(windows=[250.0, 251.0, 249.0, 250.0])}
    assert ratios._known(spent, plan)
    spent[BEFORE] = ratios._Totals(windows=[200.0, 260.0, 220.0, 280.0])
    assert not ratios._known(spent, plan)  # the earlier proxy not yet known
    assert not ratios._known({"floor": ratios._Totals(windows=[100.0] * 2), "proxy": ratios._Totals(windows=[250.0] * 2)}, plan)


def test_a_request_cost_row_of_a_run_before_the_blocks_has_no_standard_error_to_meet_its_target_with():
    """results.json of an earlier whole run (separate windows, no blocks) shown beside a part measured
    alone: its windows are no blocks, so its error is unknown, not a false ±0% that meets the target."""
    old = cpu_row("non-streamed, instant upstream, 8 clients", "request", 600.0, 700.0, 9000.0)
    old.block_seconds = 0.0
    assert math.isnan(old.floor_error())
    verdicts = ratio_targets(results_with([old]))
    assert not next(met for name, (_, met) in verdicts.items() if name.startswith("request-cost rows"))


def test_while_a_request_cost_row_runs_the_fronts_have_the_last_core_and_the_rest_the_others():
    """cores_apart: the same placement in every run (issue 54), each thread's own restored after; on one
    core, nothing moves."""
    import os
    import subprocess
    import sys

    cores = sorted(os.sched_getaffinity(0))
    sleeper = "import threading, time; threading.Thread(target=time.sleep, args=(30,)).start()"
    front = subprocess.Popen([sys.executable, "-c", sleeper])
    try:
        deadline = time.monotonic() + 10
        while len(os.listdir(f"/proc/{front.pid}/task")) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        threads = [int(thread) for thread in os.listdir(f"/proc/{front.pid}/task")]
        with ratios.cores_apart([front.pid], [os.getpid()]):
            front_cores, own_cores = {cores[-1]}, set(cores[:-1]) or set(cores)
            assert all(os.sched_getaffinity(thread) == front_cores for thread in threads)
            assert os.sched_getaffinity(0) == own_cores
        assert all(os.sched_getaffinity(thread) == set(cores) for thread in threads)
        assert os.sched_getaffinity(0) == set(cores)
    finally:
        front.kill()
        front.wait()
