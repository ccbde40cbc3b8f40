"""The ratio rows' bookkeeping (issue 29): the ABBA order, each target restated against its neighbour in
the same row, the verdicts, and that the rows survive results.json. The measuring itself runs in
`scripts/bench --quick` and the whole `scripts/bench`."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics

import pytest

from benchmarks import ratios, report, report_ratios
from benchmarks.results import (
    BEFORE,
    ONE_LINE_CHAT,
    AgentTurnResult,
    BenchmarkResults,
    FrontCell,
    Machine,
    RatioRow,
    RatiosResult,
    halves,
    halves_spread,
    load,
)


def cpu_row(name: str, kind: str, floor: float, proxy: float, litellm: float, errors: int = 0) -> RatioRow:
    def cell(target: str, cost: float) -> FrontCell:
        per_request, per_token = (cost, math.nan) if kind == "request" else (cost * 64, cost)
        windows = [per_token if kind == "token" else per_request] * 4
        return FrontCell(target, 100, 8.0, per_request, per_token, errors if target == "proxy" else 0, window_costs=windows)

    return RatioRow(name, kind, 8, [cell("floor", floor), cell("proxy", proxy), cell("litellm", litellm)], "1.00")


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


def test_a_request_cost_row_adds_passes_until_its_halves_agree():
    plan = ratios.RatioPlan(rounds=4, request_rounds_max=10)
    checks = []

    def agreed_at(passes: int):
        def agreed() -> bool:
            checks.append(len(order))
            return len(order) >= passes * 2

        return agreed

    order: list[str] = []
    order.extend(target for target in ratios.request_passes(("floor", "proxy"), plan, agreed_at(6)))
    assert order == ["floor", "proxy", "proxy", "floor"] * 3  # 4 passes, then 2 more: agreed after 6
    assert checks == [8, 12]  # read after each pair of passes, once their windows ran
    order.clear()
    order.extend(ratios.request_passes(("floor", "proxy", "litellm"), plan, lambda: False))
    assert order[:20] == ["floor", "proxy", "proxy", "floor"] * 5 and order[20:] == ["litellm"] * 4  # at most 10


def test_the_halves_of_a_rows_passes_and_how_far_apart_they_are():
    floor = [100.0, 100.0, 100.0, 100.0, 100.0, 100.0]
    proxy = [110.0, 112.0, 130.0, 126.0, 111.0, 150.0]  # passes 0-1, 4-5 against 2-3: an outlier at 5
    assert halves(floor, proxy) == pytest.approx((1.115, 1.28))
    assert halves_spread(floor, proxy) == pytest.approx(0.165 / 1.1975)
    assert math.isnan(halves_spread(floor[:2], proxy[:2]))  # one half without a pass: not known yet
    row = cpu_row("non-streamed, instant upstream, 8 clients", "request", 100.0, 110.0, 900.0)
    assert row.floor_halves() == (1.1, 1.1) and row.floor_spread() == 0.0
    assert "1.10x / 1.10x, ±0.0% (4)" in report_ratios.ratios_section(results_with([row]))


def test_a_request_cost_row_whose_halves_disagree_misses_its_target():
    row = cpu_row("non-streamed, instant upstream, 8 clients", "request", 100.0, 110.0, 900.0)
    row.cell("proxy").window_costs = [110.0, 110.0, 130.0, 130.0]
    measured, met = ratio_targets(results_with([row]))[
        "request-cost rows: proxy ÷ floor, its two halves of passes apart (issue 54)"
    ]
    assert not met and "±16.7%" in measured
