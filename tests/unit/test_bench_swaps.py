"""The swaps benchmark part's bookkeeping (issue 24): what counts as answered, how it is judged against
router mode, and that `--only swaps` keeps the other parts' numbers when it merges into results.json.
The measuring itself runs against real llama-servers in `scripts/bench --only swaps`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from benchmarks import report, swaps
from benchmarks.results import AgentSwapTurn, BenchmarkResults, LoadTiming, Machine, SwapRequest, SwapSetup, SwapsResult, load


def request(setup: str, sent_s: float, ttft_ms: float, total_ms: float, ok: bool = True, waited: bool = False):
    return SwapRequest(setup, 0, "smollm2", sent_s, ttft_ms, total_ms, ok, waited, "" if ok else "cut")


def measured(
    proxy_requests: list[SwapRequest], proxy_loads: int = 2, in_run_ms: float = 10.0, after_swap_ms: float = 1500.0
) -> SwapsResult:
    result = SwapsResult(["smollm2", "gemma3"], 8, 60.0, 8, "--ctx-size 4096")
    result.setups = [SwapSetup("router", "llama-server ...", 9), SwapSetup("proxy", "api-like-oai ...", proxy_loads)]
    result.requests = [
        request("router", 1, 40_000, 41_000, waited=True),
        request("router", 50, 1_000, 20_000),
        request("router", 30, 500, 900, ok=False),
        *proxy_requests,
    ]
    result.loads = [LoadTiming("smollm2", [1000, 1100], [1020 + in_run_ms, 1110 + in_run_ms], [1020, 1110])]
    result.agent = [
        AgentSwapTurn(False, 1700, 60_000, 1000, 3000, 3000, 60_000, 0),
        AgentSwapTurn(True, 1700, 60_000, 1000, 3000, 3500, after_swap_ms, 1690),
    ]
    return result


def swap_targets(result: SwapsResult) -> list:
    results = BenchmarkResults(Machine("cpu", 2, 24.0, "k", "py", "llama", "proxy", "0"), swaps=result)
    return [t for t in results.targets() if "issue 24" in t.name]


def test_answered_counts_whole_answers_ended_within_the_window():
    result = measured(
        [request("proxy", 10, 2_000, 3_000), request("proxy", 59, 500, 2_000), request("proxy", 20, 100, 200, ok=False)]
    )
    assert result.answered("proxy") == 1  # the one ending at 61 s is answered late, the cut one failed
    assert result.failed("proxy") == 1 and result.answered("router") == 1


def test_targets_met_when_the_proxy_fails_nothing_swaps_less_answers_more_and_waits_less():
    result = measured([request("proxy", 1, 5_000, 6_000), request("proxy", 10, 1_000, 2_000)])
    assert [t.met for t in swap_targets(result)] == [True] * 6


def test_targets_missed_on_a_failed_request_more_swaps_fewer_answers_a_slower_worst_a_costly_load_a_slow_turn():
    result = measured(
        [request("proxy", 1, 45_000, 46_000), request("proxy", 50, 100, 200, ok=False)],
        proxy_loads=12,
        in_run_ms=80,
        after_swap_ms=2_500,
    )
    assert [t.met for t in swap_targets(result)] == [False] * 6
    assert "not measured" in swap_targets(SwapsResult(["a", "b"], 8, 60.0, 8, ""))[0].measured


def test_merging_the_part_into_results_json_keeps_the_other_parts_and_renders_its_section():
    whole_run = json.loads((Path(report.__file__).parent / "results.json").read_text())
    merged = load(whole_run)
    merged.swaps = measured([request("proxy", 1, 5_000, 6_000, waited=True)])
    again = load(json.loads(json.dumps(dataclasses.asdict(merged), default=str)))
    assert again.swaps == merged.swaps
    assert again.routing == load(whole_run).routing and again.startup == load(whole_run).startup
    text = report.markdown(again)
    assert "## 7. Models on demand against llama-server's router mode" in text
    assert "| proxy | 1 | 0 | 0 | 2 | 5.00 | 5.0 | 1 | 5.00 | 5.0 |" in text
    assert "window 2, proxy: `api-like-oai ...`" in text


def test_the_agent_turn_keeps_the_tool_it_calls_and_drops_the_base_instructions():
    body = swaps.agent_body()
    assert [tool["name"] for tool in body["tools"]] == ["exec_command"]
    assert body["input"][0]["role"] == "developer" and "skills_instructions" in json.dumps(body["input"][0])
    assert [item["type"] for item in body["input"]].count("function_call_output") == 2


def test_the_open_loop_rows_and_the_swap_stages_are_rendered_per_swap():
    result = measured([request("proxy", 1, 5_000, 6_000)])
    result.open_rate = 2.0
    result.requests += [
        request("router open", 1, 9_000, 9_500),
        request("proxy open", 1, 3_000, 3_500),
        request("proxy open", 2, 100, 200, ok=False),
    ]
    result.setups += [
        SwapSetup("proxy open", "api-like-oai ...", 4, stage_s={"drain": 2.0, "exit": 0.4, "health": 1.2}),
        SwapSetup("router open", "llama-server ...", 7),
    ]
    text = report.markdown(
        load(
            json.loads(
                json.dumps(
                    dataclasses.asdict(BenchmarkResults(Machine("cpu", 2, 24.0, "k", "py", "llama", "proxy", "0"), swaps=result)),
                    default=str,
                )
            )
        )
    )
    assert "| router open | 1 | 0 | 0 | 7 |" in text and "| proxy open | 1 | 0 | 1 | 4 |" in text
    assert "| 3, proxy open | 4 | 500 | 0.0 | 100 | 0.0 | 300 | 0.0 |" in text  # per swap: the totals / 4
    assert [t.met for t in swap_targets(result)][:1] == [True]  # the closed-loop targets see only their rows
