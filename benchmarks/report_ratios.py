"""The ratio rows' section of results.md (issue 29), and the targets quick.md (report.py) judges."""

from __future__ import annotations

import math

from . import ollama_rows, rerank_row, ttft_rows
from .results import BEFORE, REQUEST_ERROR_BOUND, BenchmarkResults, RatioRow, RatiosResult, TargetCheck
from .tables import number, table

NAMES = {"direct": "llama-server direct", "floor": "floor", "proxy": "proxy", "litellm": "LiteLLM"}


def ratios_section(results: BenchmarkResults) -> str:
    r = results.ratios
    if r is None:
        return ""
    cpu_rows = [row for row in r.rows if row.kind != "generation"]
    generation = r.of_kind("generation")
    parts = ["## 0. The proxy beside its neighbours, in one sitting (issue 29)", _intro(r)]
    bound = f"{REQUEST_ERROR_BOUND:.1%}"
    if cpu_rows:
        parts += [
            "CPU of each target's whole process tree, per request or per relayed token (µs), and each "
            "restated against the floor of the same row (∞: the target finished nothing in its windows, still "
            "busy with the requests of its earlier windows; windows end by cutting the requests in flight). "
            "The request-cost rows (instant upstream) interleave the floor and the proxy under the same 8 "
            "clients, a quarter-second each in turn (ABBA), their CPU read in nanoseconds at the end of each "
            "block of 4 passes; ± is the standard error of proxy ÷ floor over those blocks (two runs whose "
            "errors are 1.8% agree within 5% 19 times in 20; next blocks are alike, which that understates), "
            f"and blocks are added until it is within {bound} (or 120 s; 90 in `--quick`). LiteLLM's windows "
            "follow theirs:",
            table(
                [
                    "row",
                    "floor",
                    "proxy",
                    "LiteLLM",
                    "proxy ÷ floor",
                    "± (blocks)",
                    "LiteLLM ÷ floor",
                    "LiteLLM ÷ proxy",
                    "errors (floor, proxy / LiteLLM)",
                    "load after",
                ],
                [_cpu_row(row) for row in cpu_rows],
            ),
        ]
    if r.against:
        parts += _against_part(r)
    if generation:
        parts += [
            "Real generation: the same streamed chat (64 tokens, greedy, seeded) to llama-server's own "
            "OpenAI API, through the proxy and through LiteLLM; time to the first text and tokens/s (medians), "
            "each restated against direct; the fronts' CPU per request (µs):",
            table(
                [
                    "row",
                    "direct TTFT ms",
                    "tokens/s direct",
                    "proxy TTFT added ms",
                    "proxy tokens/s ÷ direct",
                    "LiteLLM TTFT added ms",
                    "LiteLLM tokens/s ÷ direct",
                    "proxy CPU µs/req",
                    "LiteLLM CPU µs/req",
                    "requests each",
                    "failed (direct, proxy / LiteLLM)",
                    "load after",
                ],
                [_generation_row(row) for row in generation],
            ),
        ]
    return "\n\n".join(parts)


def _against_part(r: RatiosResult) -> list[str]:
    """`--against REV`: the proxy at REV ran as one more target of the same rows, its windows alternating
    with this tree's (ABBA), so the two are compared in one sitting, against each other and the floor."""
    rows = [row for row in r.rows if row.cell(BEFORE)]
    return [
        f"The proxy beside itself at {r.against} (`--against`): one more target of the same rows, its windows "
        "(phases in the request-cost rows) alternating with this tree's. Noise: in a request-cost row, twice "
        "the standard error of this ÷ earlier over the row's blocks; in another, the widest spread, (max − "
        "min) ÷ median, among the floor's, the proxy's and the earlier proxy's window costs in that row; a "
        "ratio within 1 ± noise is no change the row can see. For real generation, the time to the first "
        "text each adds to llama-server direct:",
        table(
            ["row", "at " + r.against, "this tree", "this ÷ earlier", "noise", "earlier ÷ floor", "this ÷ floor"],
            [_against_row(row) for row in rows],
        ),
    ]


def _against_row(row: RatioRow) -> list[str]:
    if row.kind == "generation":
        added = (f"{row.ttft_added_ms(t):+.2f} ms TTFT" for t in (BEFORE, "proxy"))
        return [row.name, *added, "", "", "", ""]
    return [
        row.name,
        *_costs(row, (BEFORE, "proxy"), 1),
        f"{_finite(row.cost('proxy') / row.cost(BEFORE), 3)}x",
        f"±{number(row.noise() * 100, 0)}%",
        f"{_finite(row.over_floor(BEFORE), 2)}x",
        f"{_finite(row.over_floor('proxy'), 2)}x",
    ]


def _intro(r: RatiosResult) -> str:
    return (
        f"Measured {r.measured_at} in {r.seconds / 60:.1f} min, load average at the start {r.load_average}. "
        "Every row alternates its targets window by window (A B C, then C B A, ...; LiteLLM's windows after the "
        "others', since the requests a window cuts keep it busy for seconds after), so the machine's other load "
        "falls on all of them alike; the ratios are the result, the absolute numbers only information (they "
        "move with the machine by a third from hour to hour). The floor is `benchmarks/floor_app.py`: a bare "
        "Flask app under the proxy's own gunicorn gevent worker and HTTP client that parses the body, sends one "
        "request to `/completion` and writes the JSON, or one SSE event per upstream event. LiteLLM: "
        f"{r.litellm}, in front of the same upstreams' OpenAI API. llama-server runs with `--threads "
        f"{r.llama_threads}` (one less than the cores)."
    )


def _costs(row: RatioRow, targets: tuple[str, ...], digits: int) -> list[str]:
    unit = "token" if row.kind == "token" else "req"
    return [f"{_finite(row.cost(t), digits)} µs/{unit}" for t in targets]


def _cpu_row(row: RatioRow) -> list[str]:
    return [
        row.name,
        *_costs(row, ("floor", "proxy", "litellm"), 0),
        f"{_finite(row.over_floor('proxy'), 2)}x",
        _error(row),
        f"{_finite(row.over_floor('litellm'), 2)}x",
        f"{_finite(row.cost('litellm') / row.cost('proxy'), 1)}x",
        f"{row.errors()} / {row.errors(('litellm',))}",
        row.load_average,
    ]


def _error(row: RatioRow) -> str:
    """A request-cost row's standard error of proxy ÷ floor (a share) and its blocks; – for other rows."""
    floor = row.cell("floor")
    error = row.floor_error()
    if row.kind != "request" or math.isnan(error):
        return "–"
    return f"±{number(error * 100, 1)}% ({len(floor.window_costs)} × {row.block_seconds:.0f} s)"


def _finite(value: float, digits: int) -> str:
    return "∞" if value == math.inf else number(value, digits)


def _generation_row(row: RatioRow) -> list[str]:
    direct, proxy, litellm = (row.cell(t) for t in ("direct", "proxy", "litellm"))
    return [
        row.name,
        number(direct.ttft_p50_ms),
        number(direct.tokens_per_s),
        number(row.ttft_added_ms("proxy"), 2),
        number(row.tokens_ratio("proxy"), 3),
        number(row.ttft_added_ms("litellm"), 2),
        number(row.tokens_ratio("litellm"), 3),
        number(proxy.cpu_us_per_request, 0),
        number(litellm.cpu_us_per_request, 0),
        str(min(direct.requests, proxy.requests, litellm.requests)),
        f"{row.errors()} / {row.errors(('litellm',))}",
        row.load_average,
    ]


# The targets `--quick` judges: each against a neighbour measured in the same run.
QUICK_TARGETS = (
    "non-streamed CPU per request, proxy ÷ floor",
    "paced streams: CPU per relayed token",
    "TTFT added vs llama-server direct, p50 (ratio rows)",
    "streamed tokens/s through the proxy ÷ direct",
    "ahead of LiteLLM",
    "streamed tool call",
    "agent turn replayed warm",
    "CPU rows: proxy ÷ the proxy at",
    "request-cost rows",
)


def measured_targets(results: BenchmarkResults) -> list[TargetCheck]:
    """The targets `--quick` judges."""
    return [
        *(t for t in results.targets() if t.name.startswith(QUICK_TARGETS)),
        *ollama_rows.targets(results.ollama),
        *rerank_row.targets(results.rerank),
        *ttft_rows.targets(results.ttft),
    ]
