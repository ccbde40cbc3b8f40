"""The swaps part's section of results.md (issue 24): models on demand against llama-server's router mode."""

from __future__ import annotations

from .results import BenchmarkResults, SwapsResult, percentile
from .swaps import AGENT_ARGS, STAGES
from .tables import number, table

COLUMNS = [
    "",
    "answered in the window",
    "answered after it",
    "failed",
    "swaps (loads)",
    "TTFT p50 s",
    "TTFT max s",
    "waited for a swap",
    "their TTFT p50 s",
    "their TTFT max s",
]


def swaps_section(results: BenchmarkResults) -> str:
    s = results.swaps
    if s is None:
        return ""
    parts = [
        "## 7. Models on demand against llama-server's router mode (issue 24)",
        _workload_text(s),
        table(COLUMNS, [_setup_row(s, setup) for setup in ("router", "proxy")]),
        "\n".join(
            f"- window {number}, {setup.setup}: `{setup.command}` (load average at its start "
            f"{setup.load_average}; {setup.loads} swaps)"
            for number, setup in enumerate(s.setups, 1)
        ),
    ]
    if s.of("proxy open") and s.of("router open"):
        parts += [_open_text(s), table(COLUMNS, [_setup_row(s, setup) for setup in ("router open", "proxy open")])]
    staged = [setup for setup in s.setups if setup.stage_s and setup.loads]
    if staged:
        parts += [
            _stages_text(),
            table(
                ["window", "swaps (loads)", *(f"{stage} ms" for stage in STAGES)],
                [_stage_row(number, setup) for number, setup in enumerate(s.setups, 1) if setup in staged],
            ),
        ]
    if s.loads:
        parts += [
            _loads_text(s),
            table(
                [
                    "model",
                    "llama-server alone to /health 200, p50 ms",
                    "proxy POST /models/load, p50 ms",
                    "added",
                    "supervisor's start of that child, p50 ms",
                    "added above it, p50",
                ],
                [_load_row(t) for t in s.loads],
            ),
        ]
    if s.agent:
        parts += [
            _agent_text(s),
            table(
                [
                    "slot_save",
                    "prompt tokens",
                    "cold s",
                    "warm s",
                    "swap to gemma3 s",
                    "swap back s",
                    "turn after the swap s",
                    "vs warm",
                ],
                [_agent_row(t) for t in s.agent],
            ),
        ]
    return "\n\n".join(parts)


def _workload_text(s: SwapsResult) -> str:
    return (
        f"Two real models, `{s.models[0]}` (SmolLM2-135M Q4_1) and `{s.models[1]}` (gemma-3-270m Q4_K_M, from "
        "`scripts/provision-bench-models`), in one folder; memory for one. The same workload against each side, one "
        f"after the other: {s.clients} clients at once, each sending streamed chat requests one after the other for "
        f"{s.seconds:g} s, alternating the two models (half start with each), `max_tokens` {s.max_tokens}, in "
        f"{s.windows('router') + s.windows('proxy')} windows, the sides in the order below (the machine's load "
        "drifts; the counts are over all of a side's windows); each "
        f"model's llama-server runs with `{s.llama_args}`. Router mode is llama-server without `--model`, with "
        "`--models-dir` and `--models-max 1` (it evicts by count); the proxy has `--models-dir` and a memory budget "
        "from its own estimates that holds either model but not both. TTFT is to the first generated text (the "
        "proxy's keep-alive comments while a client waits are not text). A request “waited for a swap” when a poll "
        "of the side's `GET /models` (every 0.2 s) saw its model not loaded between its sending and its first "
        f"token. Measured {s.measured_at} (`scripts/bench --only swaps` measures this part alone and keeps the "
        "other parts' numbers)."
    )


def _open_text(s: SwapsResult) -> str:
    return (
        f"The open-loop workload (issue 42): requests sent every {1 / s.open_rate:.2g} s for {s.seconds:g} s "
        f"whether or not the earlier ones were answered, four of every five for `{s.models[0]}` and the fifth for "
        f"`{s.models[1]}`, streamed, `max_tokens` {s.max_tokens}; one window each side, each on a fresh server. "
        "Where requests for both models wait at once, the proxy serves all of a model's waiting requests before "
        "it swaps (collating); router mode swaps as they come."
    )


def _stages_text() -> str:
    return (
        "A swap's stages as the supervisor timed them, per swap (the window's total over its loads): `drain`, a "
        "model's last requests running after it was chosen to make room; `stop`, from then to its signal (its slots "
        "saved, with `slot_save`); `exit`, the signal to the process gone (SIGKILL since issue 42: the model is "
        "idle and saved; SIGTERM before, ~150 ms of llama-server's shutdown); `start`, the spawn; `health`, the spawn to "
        "`/health` 200; `restore`, its slots restored. Router mode does not publish its stages."
    )


def _stage_row(number: int, setup) -> list[str]:
    return [
        f"{number}, {setup.setup}",
        str(setup.loads),
        *(number_text(setup.stage_s.get(stage, 0.0) * 1000 / setup.loads) for stage in STAGES),
    ]


def number_text(value: float) -> str:
    return number(value, 0 if value >= 10 else 1)


def _setup_row(s: SwapsResult, setup: str) -> list[str]:
    requests = s.of(setup)
    ttfts = [r.ttft_ms / 1000 for r in requests if r.ok]
    waited = [r.ttft_ms / 1000 for r in requests if r.ok and r.waited_for_swap]
    late = sum(r.ok and r.ended_s > s.seconds for r in requests)
    loads = s.swaps(setup)
    return [
        setup,
        str(s.answered(setup)),
        str(late),
        str(s.failed(setup)),
        str(loads),
        number(percentile(ttfts, 0.5), 2),
        number(max(ttfts, default=float("nan")), 1),
        str(len(waited)),
        number(percentile(waited, 0.5), 2),
        number(max(waited, default=float("nan")), 1),
    ]


def _loads_text(s: SwapsResult) -> str:
    return (
        "The cost of a load: each model's llama-server started directly with the same flags, timed from the "
        "start of the process to `/health` 200 (polled every 20 ms, as the proxy polls it), alternated with the "
        f"proxy's `POST /models/load` of it with nothing else loaded (then `/models/unload`), {len(s.loads[0].proxy_ms)} "
        "of each. “Added” is the difference of the medians; the last two columns set each load against the start "
        "of the very llama-server it waited for, as the supervisor timed it (the `load_seconds` in the model's "
        "status), which leaves out the drift between two separate starts."
    )


def _load_row(t) -> list[str]:
    return [
        t.model,
        number(percentile(t.direct_ms, 0.5), 0),
        number(percentile(t.proxy_ms, 0.5), 0),
        f"{t.added_ms:+.0f} ms",
        number(percentile(t.proxy_child_ms, 0.5), 0),
        f"{t.added_in_run_ms:+.0f} ms",
    ]


def _agent_text(s: SwapsResult) -> str:
    return (
        f"An agent turn after a swap: `{s.agent_turn}` (Codex CLI's third turn, after two `exec_command` "
        f"rounds; cut so that this busy machine reads it in a minute or two, see `swaps.AGENT_TURN`), "
        f"replayed to `/v1/responses` for `{s.models[0]}` (`{' '.join(AGENT_ARGS)}`) on a proxy with "
        f"`--max-loaded 1`, not streamed, `max_output_tokens` 8: cold (nothing cached), warm (the same turn again), "
        f"then `POST /models/load {s.models[1]}` (the swap out: `{s.models[0]}` saved if `slot_save`, and stopped) "
        f"and one request to it, `POST /models/load {s.models[0]}` (the swap back: started, its slot restored if "
        "`slot_save`), and the turn again. The swaps are timed apart from the turn after them; a proxy of its own "
        "for each setting. (The answers' `usage.input_tokens_details.cached_tokens` said 0 even for warm turns, "
        "so the times, not the usage, show what came from the cache.)"
    )


def _agent_row(t) -> list[str]:
    return [
        str(t.slot_save).lower(),
        f"{t.prompt_tokens:,}",
        number(t.cold_ms / 1000, 2),
        number(t.warm_ms / 1000, 2),
        number(t.swap_out_ms / 1000, 2),
        number(t.swap_back_ms / 1000, 2),
        number(t.after_swap_ms / 1000, 2),
        f"{t.after_swap_ratio:.1f}x",
    ]
