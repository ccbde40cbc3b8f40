"""Results -> benchmarks/results.md (Markdown tables) and benchmarks/results.png (matplotlib)."""

from __future__ import annotations

import math
from pathlib import Path

from . import batch_lane, ollama_rows, rerank_row, ttft_rows
from .dashboard import dashboard_section
from .report_ratios import measured_targets, ratios_section
from .report_swaps import swaps_section
from .results import BenchmarkResults, CapacityResult, GenerationResult, SocketResult, percentile
from .socket_turns import SOCKET_TOKENS
from .tables import number, percent, table
from .workload import CHAT_MESSAGES, GENERATED_TOKENS, PROMPT, SEED, mode_name


def machine_section(results: BenchmarkResults) -> str:
    m = results.machine
    rows = [
        ["CPU", f"{m.cpu_model}, {m.cores} cores"],
        ["memory", f"{m.memory_gib:.1f} GiB"],
        ["kernel", m.kernel],
        ["python", m.python],
        ["llama.cpp", m.llama_cpp],
        ["proxy server", m.proxy_server],
        ["load average at start", m.load_average],
        ["benchmark wall time", f"{results.duration_s / 60:.1f} min"],
    ]
    return "## Machine\n\n" + table(["", ""], rows)


def targets_section(results: BenchmarkResults) -> str:
    judged = [*results.targets(), *ttft_rows.targets(results.ttft)]
    rows = [[t.name, t.goal, t.measured, "**met**" if t.met else "**missed**"] for t in judged]
    return "\n\n".join(
        filter(
            None,
            ["## Targets", table(["target", "goal", "measured", "verdict"], rows), missed_note(results), noise_note(results)],
        )
    )


def missed_note(results: BenchmarkResults) -> str:
    if all(t.met for t in results.targets()):
        return ""
    return (
        "Why the missed targets are missed, from profiles of the proxy under this benchmark's load, and what "
        "each change bought: `benchmarks/PROFILE.md`."
    )


def noise_note(results: BenchmarkResults) -> str:
    """A warning when processes outside the benchmark used the CPU while it measured."""
    shares = [r.other_cpu_share for r in results.generation + results.capacity + results.chat_vs_completions]
    worst = max(shares, default=0.0)
    if worst < 0.2:
        return ""
    return (
        f"**Noise:** processes outside the benchmark kept up to {worst:.2f} of the {results.machine.cores} cores "
        "busy while it measured (the “other” columns). llama.cpp's two threads wait for each other by spinning, "
        "so on 2 cores any extra load slows generation a lot and unevenly; the alternation spreads it over "
        "both targets, but single rows can be far off. Re-run on a quiet machine before reading small "
        "differences."
    )


def generation_row(r: GenerationResult) -> list[str]:
    ttft = [number(r.ttft_p50_ms), number(r.ttft_p95_ms)] if r.streamed else ["–", "–"]
    cpu = number(r.proxy_cpu_ms_per_request, 2) if r.proxy_cpu_ms_per_request is not None else "–"
    count = f"{r.requests}*" if r.cut_short else str(r.requests)
    return [
        str(r.llama_threads),
        r.endpoint,
        mode_name(r.streamed),
        str(r.clients),
        r.target,
        count,
        *ttft,
        number(r.total_p50_ms),
        number(r.total_p95_ms),
        number(r.tokens_per_s),
        cpu,
    ]


def cut_short_note(results: BenchmarkResults) -> str:
    if not any(r.cut_short for r in results.generation):
        return ""
    return (
        "\n\n\\* fewer rounds than planned: this workload's share of the time budget ran out "
        "(generation was slow, usually because other processes took the CPU)."
    )


def difference_row(direct: GenerationResult, proxy: GenerationResult) -> list[str]:
    ttft = number(proxy.ttft_p50_ms - direct.ttft_p50_ms, 2) if direct.streamed else "–"
    return [
        str(direct.llama_threads),
        direct.endpoint,
        mode_name(direct.streamed),
        str(direct.clients),
        ttft,
        number(proxy.total_p50_ms - direct.total_p50_ms, 2),
        percent(proxy.tokens_per_s / direct.tokens_per_s, 1),
        number(direct.other_cpu_share, 2),
    ]


def generation_section(results: BenchmarkResults) -> str:
    checks = "; ".join(check.describe() for check in results.output_checks)
    header = [
        "llama threads",
        "endpoint",
        "mode",
        "clients",
        "target",
        "n",
        "TTFT p50 ms",
        "TTFT p95 ms",
        "total p50 ms",
        "total p95 ms",
        "tokens/s",
        "proxy CPU ms/req",
    ]
    rows = [generation_row(r) for pair in results.generation_pairs() for r in pair]
    differences = [difference_row(d, p) for d, p in results.generation_pairs()]
    return "\n\n".join(
        [
            "## 1. Real generation: llama-server's own OpenAI API vs the proxy",
            "llama-server runs with `--ctx-size 4096 --parallel 4 --seed 42`, once with `--threads 2` (as before) and "
            "once with `--threads` one less than the cores (“llama threads”); the proxy in front of it "
            "with no template flag (the model's own template, as llama-server uses). "
            f"Same request to both: completion prompt {PROMPT!r}, chat messages {CHAT_MESSAGES}; temperature 0, "
            f"seed {SEED}, max_tokens {GENERATED_TOKENS}. Both run {GENERATED_TOKENS} tokens without `ignore_eos` "
            f"(the proxy rejects that field). Output check: {checks}. Rounds of `clients` concurrent requests "
            "alternate between the targets (ABBA), after one warm-up round each. TTFT is the arrival of the first "
            "frame with generated text; tokens/s is per request, tokens / total time, median.",
            table(header, rows) + cut_short_note(results),
            "What the proxy adds (proxy − direct at p50; tokens/s as a share of direct), and how many cores other "
            "processes on the machine kept busy meanwhile (not the benchmark's; noise that hits both targets):",
            table(
                [
                    "llama threads",
                    "endpoint",
                    "mode",
                    "clients",
                    "TTFT added ms",
                    "total added ms",
                    "tokens/s vs direct",
                    "other CPU, cores",
                ],
                differences,
            ),
        ]
    )


def capacity_row(r: CapacityResult) -> list[str]:
    per_event = number(r.proxy_cpu_us_per_event, 1) if r.proxy_cpu_us_per_event is not None else "–"
    return [
        r.endpoint,
        mode_name(r.streamed),
        str(r.clients),
        number(r.requests_per_s, 0),
        number(r.events_per_s, 0) if r.streamed else "–",
        number(r.latency_p50_ms, 2),
        number(r.proxy_cpu_us_per_request, 0),
        per_event,
        f"{r.proxy_cpu_share:.2f} / {r.upstream_cpu_share:.2f} / {r.client_cpu_share:.2f} / {r.other_cpu_share:.2f}",
        percent(r.cpu_spread),
        str(r.errors),
    ]


CAPACITY_HEADER = [
    "endpoint",
    "mode",
    "clients",
    "req/s",
    "events/s",
    "latency p50 ms",
    "proxy CPU µs/req",
    "proxy CPU µs/event",
    "CPU cores: proxy / fake / client / other",
    "CPU/req spread",
    "errors",
]


def capacity_section(results: BenchmarkResults) -> str:
    return "\n\n".join(
        [
            "## 2. Capacity: the proxy in front of an instant upstream",
            f"`benchmarks/fake_llamacpp.py` answers `/completion` at once ({GENERATED_TOKENS} tokens; streamed: one "
            "chunked SSE event per token plus the final event). Closed loop: each client sends the next request as "
            "soon as the previous answer is complete, on its own keep-alive connection. Each row sums windows "
            "from separate passes over all rows, so a slow spell of the machine hits every row. CPU is the proxy's "
            "gunicorn master + worker from /proc; “all-in” per event is the streamed run's CPU divided by the "
            "events it relayed, so it includes the per-request cost.",
            table(CAPACITY_HEADER, [capacity_row(r) for r in results.capacity]),
            f"Marginal CPU of one more relayed event (64-token stream minus 1-token stream, per request): "
            f"**{number(results.marginal_cpu_us_per_event)} µs**. Peak memory during the load (sum of VmHWM, "
            f"master + worker): **{number(results.peak_rss_mb)} MB**.",
            client_note(results),
        ]
    )


def client_note(results: BenchmarkResults) -> str:
    busiest = max(results.capacity, key=lambda r: r.proxy_cpu_share + r.upstream_cpu_share + r.client_cpu_share, default=None)
    if busiest is None:
        return ""
    used = busiest.proxy_cpu_share + busiest.upstream_cpu_share + busiest.client_cpu_share
    return (
        f"The load generator and the fake upstream share the {results.machine.cores} cores with the proxy: "
        f"at the busiest point ({busiest.endpoint} {mode_name(busiest.streamed)}, {busiest.clients} clients) the "
        f"proxy used {busiest.proxy_cpu_share:.2f} cores, the fake {busiest.upstream_cpu_share:.2f}, the client "
        f"{busiest.client_cpu_share:.2f} ({used:.2f} of {results.machine.cores}). One gunicorn worker runs "
        "Python under one GIL, so the proxy cannot use much more than one core; where it stays below 1.0 the "
        "others took CPU it could have used, and its req/s here are a lower bound."
    )


def paced_row(r) -> list[str]:
    return [
        r.worker_class,
        r.connections,
        str(r.clients),
        f"{r.interval_ms:g}",
        number(r.tokens_per_s, 0),
        number(r.carried_share, 2),
        number(r.proxy_cpu_us_per_token, 1),
        f"{r.proxy_cpu_share:.2f} / {r.other_cpu_share:.2f}",
        str(r.errors),
    ]


def paced_section(results: BenchmarkResults) -> str:
    header = [
        "worker",
        "client connections",
        "streams",
        "ms between tokens",
        "tokens/s relayed",
        "share of what the streams carry",
        "proxy CPU µs per token (all-in)",
        "CPU cores: proxy / other",
        "errors",
    ]
    parts = [
        "### 2b. Streams paced like a real model: CPU per token and queueing, gevent vs gthread",
        "The instant upstream writes all events of an answer at once, so the proxy reads many per system call. "
        "A real llama-server sends one token at a time, and every token then wakes the proxy. Here the fake "
        f"sends each chat stream's {GENERATED_TOKENS} tokens on a fixed schedule, one every N ms, and the "
        "clients (back to back, their starts spread over one interval) read them through the proxy. Tokens are "
        "counted as they arrive inside the measurement window; “share of what the streams carry” is tokens "
        "relayed / (streams × tokens per stream / the stream's length at the upstream's pace): 1.0 means the "
        "proxy made no stream wait. CPU per token is all the proxy's CPU in the window (requests, role and "
        "finish frames included) divided by the tokens relayed. `gthread` is the worker before issue 13 "
        "(`--worker-class gthread`, 32 threads): a stream beyond the 32nd waits for a thread. “new per stream”: "
        "each stream on a client connection of its own, closed after it (curl, many SDKs, agents' side requests).",
        table(header, [paced_row(r) for r in results.paced]),
    ]
    m = results.many_streams
    if m is not None:
        parts += [
            f"### 2c. {m.streams} concurrent streams through one worker",
            f"{m.streams} chat streams of {m.tokens} tokens, one token every {m.interval_ms:g} ms, all started within "
            "one interval and read to the end (every frame and `[DONE]`), through the default single worker.",
            table(
                [
                    "streams",
                    "whole",
                    "time, first start to last end",
                    "the upstream's pace alone",
                    "proxy CPU µs per token",
                    "proxy peak RSS (master + worker)",
                ],
                [
                    [
                        str(m.streams),
                        str(m.whole),
                        f"{m.seconds:.2f} s",
                        f"{m.ideal_seconds:.2f} s",
                        number(m.proxy_cpu_us_per_token, 1),
                        f"{m.peak_rss_mb:.0f} MB",
                    ]
                ],
            ),
        ]
    return "\n\n".join(parts)


def gateway_section(results: BenchmarkResults) -> str:
    if not results.gateway:
        return ""
    rows = [
        [
            str(g.rate),
            str(g.requests),
            number(g.direct_p50_ms, 2),
            number(g.proxy_p50_ms, 2),
            number(g.added_p50_ms, 2),
            number(g.direct_p99_ms, 2),
            number(g.proxy_p99_ms, 2),
            number(g.added_p99_ms, 2),
            str(g.errors),
        ]
        for g in results.gateway
    ]
    return "\n\n".join(
        [
            "### 2d. Added latency at a fixed request rate (the form gateways publish)",
            f"Open loop: requests are sent at a fixed rate whatever the answers take, non-streamed, {GENERATED_TOKENS} "
            "tokens, against the instant fake; the same generation straight to the fake's `/completion` (“direct”) "
            "and through the proxy's `/v1/completions`, alternately. Added latency is proxy − direct at the same "
            "percentile. The proxy reads the upstream answer as a stream even here, batched (the tokens that arrive "
            "together are one event).",
            table(
                [
                    "req/s",
                    "requests",
                    "direct p50 ms",
                    "proxy p50 ms",
                    "added p50 ms",
                    "direct p99 ms",
                    "proxy p99 ms",
                    "added p99 ms",
                    "errors",
                ],
                rows,
            ),
        ]
    )


def comparison_verdict(completion: CapacityResult, chat: CapacityResult) -> str:
    """Chat's extra CPU per request against the window-to-window spread of the two measurements."""
    extra = chat.proxy_cpu_us_per_request / completion.proxy_cpu_us_per_request - 1
    measured = (
        f"{mode_name(completion.streamed)}: chat {extra:+.1%} CPU per request, "
        f"{chat.requests_per_s / completion.requests_per_s - 1:+.1%} req/s"
    )
    noise = max(completion.cpu_spread, chat.cpu_spread)
    if math.isnan(noise):
        return measured + " (one window each: no noise estimate)"
    verdict = "the same within noise" if abs(extra) <= noise else "**a real difference**"
    return f"{measured}; windows of one row differ by up to {percent(noise)}, so {verdict}"


def comparison_section(results: BenchmarkResults) -> str:
    if not results.chat_vs_completions:
        return ""
    rows = [capacity_row(r) for r in results.chat_vs_completions]
    pairs = zip(results.chat_vs_completions[::2], results.chat_vs_completions[1::2], strict=True)
    return "\n\n".join(
        [
            f"## 3. Chat vs completions for the same final prompt (instant upstream, "
            f"{results.chat_vs_completions[0].clients} clients)",
            "The chat request's rendered prompt (from `/v1/internal/chat-prompt`, the model's own template) and its "
            "stop strings are sent as a completion; windows alternate between the two. “CPU/req spread” is how far "
            "the windows of one row differ from each other, (max − min) / mean: the noise to judge a difference by.",
            table(CAPACITY_HEADER, rows),
            "; ".join(comparison_verdict(c, chat) for c, chat in pairs) + ".",
        ]
    )


def startup_section(results: BenchmarkResults) -> str:
    s = results.startup
    if s is None:
        return ""
    runs = ", ".join(f"{value:.2f}" for value in s.seconds)
    names = ["master"] + ["worker"] * (len(s.idle_rss_per_process_mb) - 1)
    processes = ", ".join(f"{name} {mb:.1f}" for name, mb in zip(names, s.idle_rss_per_process_mb, strict=True))
    return "\n\n".join(
        [
            "## 4. Start-up and idle memory",
            table(
                ["measure", "value"],
                [
                    ["start-up to the first answered /v1/completions, median", f"{s.median_seconds:.2f} s (runs: {runs})"],
                    ["idle RSS, gunicorn master + worker summed", f"{s.idle_rss_mb:.1f} MB ({processes})"],
                    ["idle PSS (shared pages counted once)", f"{s.idle_pss_mb:.1f} MB"],
                    *_models_dir_rows(results),
                ],
            ),
        ]
    )


def _models_dir_rows(results: BenchmarkResults) -> list[list[str]]:
    """Issue 42: a --models-dir of ten GGUF files (SmolLM2 and gemma-3-270m, five names each)."""
    m = results.models_dir_startup
    if m is None or not m.seconds:
        return []
    runs = ", ".join(f"{value:.2f}" for value in m.seconds)
    return [
        [
            f"start-up with `--models-dir` of {m.files} GGUF files to the first answered /v1/models, median "
            "(a data directory of its own each run: no header read before)",
            f"{m.median_seconds:.2f} s (runs: {runs})",
        ],
        [
            "the same with a folder of one file, alternated with it (the proxy's own start-up at this load)",
            f"{m.one_file_median_seconds:.2f} s",
        ],
        [
            "each file's GGUF header read, no cache (slowest, median)",
            f"{max(m.header_ms):.1f} ms, {sorted(m.header_ms)[len(m.header_ms) // 2]:.1f} ms",
        ],
    ]


def _measured_alone_note(results: BenchmarkResults, part: str, what: str) -> str:
    """A sentence saying that `part` was measured again alone (`--only PART`), or nothing."""
    when = results.measured_alone.get(part)
    if when is None:
        return ""
    return (
        f" {what} was measured again on its own after the whole run (`scripts/bench --only {part}`, {when}); "
        "the other parts are the whole run's."
    )


def tool_call_section(results: BenchmarkResults) -> str:
    r = results.tool_call
    if r is None:
        return ""
    return "\n\n".join(
        [
            "### 2d. A streamed tool call against plain text (issue 10)",
            f"The same streamed chat of {r.tokens} tokens from the instant upstream, {r.clients} clients: once as plain "
            "text, once with `tools`, which the fake answers with a `<tool_call>{...}</tool_call>` the proxy parses "
            "into `tool_calls` deltas (markers held back, the call's head checked, the arguments streamed). The "
            "proxy's CPU per upstream token, median of alternating windows."
            + _measured_alone_note(results, "tool-call", "This row"),
            table(
                ["answer", "proxy CPU µs per token", "errors"],
                [
                    ["plain text", number(r.plain_cpu_us_per_token, 1), "-"],
                    [
                        "tool call" + ("" if r.calls_parsed else " (NOT parsed)"),
                        number(r.tool_call_cpu_us_per_token, 1),
                        str(r.errors),
                    ],
                    ["extra for the tool call", f"{r.extra_share:+.0%}", ""],
                ],
            ),
        ]
    )


def routing_section(results: BenchmarkResults) -> str:
    r = results.routing
    if r is None:
        return ""
    header = [
        "turn",
        *(
            f"{mode}: {column}"
            for mode in ("least-busy", "prefix")
            for column in ("prompt tokens", "prefilled", "from cache", "TTFT mean ms", "TTFT p50 ms")
        ),
    ]
    return "\n\n".join(
        [
            "## 5. Routing across upstreams: least-busy vs prefix (issue 20)",
            f"Two llama-servers (`{r.upstream_flags}`, the bundled model) behind one proxy model, started afresh "
            f"for each mode. {r.sessions} sessions at once, {r.turns} turns each, every session with its own system "
            f"prompt of about {r.prefix_tokens:,} tokens; each turn sends the whole history with a new question, "
            f"streamed, greedy, {r.reply_tokens} tokens, {r.pause_seconds[0]:g}–{r.pause_seconds[1]:g} s (seeded) after "
            "the session's last answer, as an agent runs a tool in between. No session "
            "keys are sent, so prefix routing places first turns by load and later turns by their prompt. "
            "“Prefilled” is the prompt tokens llama.cpp computed (prompt − cached, from the answers' "
            "`usage.prompt_tokens_details.cached_tokens`); “from cache” the share of the prompt it did not; "
            "values are the means over the sessions (TTFT also the median). "
            f"The row took {r.seconds / 60:.1f} min; load average at its start: {r.load_average} (`scripts/bench "
            "--only routing` measures this row alone and keeps the other parts' numbers).",
            table(header, [_routing_turn_row(r, turn) for turn in range(1, r.turns + 1)] + [_routing_turn_row(r, None)]),
            f"Of the {len(r.later_turns('prefix'))} later turns, least-busy routing had llama.cpp read "
            f"{r.read_again('least-busy')} prompts again from (nearly) the start, because the session had moved to the "
            f"other server; prefix routing {r.read_again('prefix')}. Least-busy moves a session when, as its turn "
            "begins, the other server has fewer requests in flight; a moved turn waits for the whole prompt, and so "
            "do the turns queued behind it on that server, which is why the TTFT target is judged on the mean (the "
            "median of turns hides a minority of moved turns). " + _routing_noise_note(r, results.machine.cores),
        ]
    )


def _routing_noise_note(r, cores: int) -> str:
    load = float(r.load_average.split(",")[0]) if r.load_average else 0.0
    if load <= cores:
        return ""
    return (
        f"**Noise:** the load average was {load:.1f} on {cores} cores when this row started: other processes "
        "took most of the CPU, so every time here is many times a quiet machine's (and the row took that much "
        "longer); both modes ran under it."
    )


def _routing_turn_row(r, turn: int | None) -> list[str]:
    cells = [str(turn) if turn else f"**2–{r.turns}**"]
    for mode in ("least-busy", "prefix"):
        turns = [s for s in r.samples if s.routing == mode and (s.turn == turn if turn else s.turn > 1)]
        cells += [
            number(_mean([s.prompt_tokens for s in turns]), 0),
            number(_mean([s.prefilled_tokens for s in turns]), 0),
            percent(_mean([s.cached_share for s in turns])),
            number(_mean([s.ttft_ms for s in turns]), 0),
            number(percentile([s.ttft_ms for s in turns], 0.5), 0),
        ]
    return cells


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def socket_section(results: BenchmarkResults) -> str:
    r = results.socket
    if r is None:
        return ""
    parts = [
        "### 2f. An agent session over a Responses WebSocket (issue 50)",
        f"A {r.turns}-turn session (`store: false`, {SOCKET_TOKENS} tokens a turn from the instant upstream), "
        "one client: over HTTP, streamed POSTs on one keep-alive connection sending the whole conversation "
        "each turn; over one WebSocket, each turn only its new message and `previous_response_id`. "
        + _socket_method(r)
        + _measured_alone_note(results, "socket", "This row"),
        _pair_note(r),
        table(
            ["transport", "first event ms", "proxy CPU µs per turn", "errors"],
            [
                [
                    "HTTP (SSE)",
                    _with_spread(r.http_first_event_p50_ms, r.http_first_event_quartiles_ms, 2),
                    _with_spread(r.http_cpu_us_per_turn, r.http_cpu_quartiles_us, 0),
                    "-",
                ],
                [
                    "WebSocket",
                    _with_spread(r.socket_first_event_p50_ms, r.socket_first_event_quartiles_ms, 2),
                    _with_spread(r.socket_cpu_us_per_turn, r.socket_cpu_quartiles_us, 0),
                    str(r.errors),
                ],
            ],
        ),
    ]
    return "\n\n".join(part for part in parts if part)


def _socket_method(r: SocketResult) -> str:
    if not r.sessions:
        return (
            "Windows of ten sessions alternate. Time to the first event, p50 of every turn; proxy CPU per turn, "
            "the median of the windows."
        )
    return (
        f"{r.sessions} sessions of each, in pairs whose order alternates. Each session gives the median time to "
        "first event of its turns and the proxy's CPU per turn (its handshake and teardown included, read in "
        "nanoseconds from the scheduler); the table gives the median over the sessions, their quartiles in brackets."
    )


def _pair_note(r: SocketResult) -> str:
    if len(r.cpu_pair_ratios) != 3:
        return ""
    first, cpu = r.first_event_pair_ratios, r.cpu_pair_ratios
    return (
        f"Socket ÷ HTTP within each pair (its two sessions back to back, under the same load), the median [quartiles] "
        f"of the pairs: first event {first[1]:.3f} [{first[0]:.3f}–{first[2]:.3f}], proxy CPU per turn "
        f"{cpu[1]:.3f} [{cpu[0]:.3f}–{cpu[2]:.3f}]."
    )


def _with_spread(median: float, quartiles: list[float], digits: int) -> str:
    if len(quartiles) != 2:
        return number(median, digits)
    return f"{number(median, digits)} [{number(quartiles[0], digits)}–{number(quartiles[1], digits)}]"


def store_section(results: BenchmarkResults) -> str:
    r = results.store
    if r is None:
        return ""
    return "\n\n".join(
        [
            "### 2e. Storing a response (issue 17)",
            f"The same non-streamed `/v1/responses` request ({GENERATED_TOKENS} tokens from the instant upstream), "
            f"{r.clients} client, with `store: false` and with `store: true` on the default SQLite store (written "
            "as in_progress before generating, then as answered); alternating windows. Latency p50 of every "
            "sample, proxy CPU per request the median of the windows."
            + ("" if r.retrievable else " The stored answer did NOT come back the same from GET."),
            table(
                ["request", "latency p50 ms", "proxy CPU µs per request", "errors"],
                [
                    ["store: false", number(r.stateless_p50_ms, 2), number(r.stateless_cpu_us_per_request, 0), "-"],
                    ["store: true (SQLite)", number(r.stored_p50_ms, 2), number(r.stored_cpu_us_per_request, 0), str(r.errors)],
                    [
                        "added by storing",
                        f"{r.added_p50_ms:+.2f}",
                        f"{r.stored_cpu_us_per_request - r.stateless_cpu_us_per_request:+.0f}",
                        "",
                    ],
                ],
            ),
        ]
    )


def agent_turns_section(results: BenchmarkResults) -> str:
    if not results.agent_turns:
        return ""
    rows = [
        [
            t.name,
            f"{t.bytes / 1000:.0f} KB",
            str(t.tools),
            number(t.cold_cpu_ms, 2),
            number(t.warm_cpu_ms, 2),
            number(t.cold_hold_max_ms, 2),
            number(t.warm_hold_max_ms, 2),
            ", ".join(t.removed) or "none",
        ]
        for t in results.agent_turns
    ]
    parts = [
        "## 6. Agent turns: requests recorded from Claude Code and Codex CLI",
        "`benchmarks/fixtures/` holds requests as the real programs sent them. `benchmarks/agent_turns.py` replays "
        "each to the app in a process of its own built as the gevent worker builds it (patched first), called as "
        "gunicorn calls it, in front of the fake upstream serving Qwen2.5's template (the fixtures' model: native "
        "tools, Hermes calls, a lazy grammar) and answering with two tokens. Cold: every tool's schema and the "
        f"system prompt changed, so nothing derived from them is cached; warm: the same turn again. CPU is the "
        f"whole process's per turn (the grammar built in a pool thread included), median of {results.agent_turns[0].rounds} "
        "turns; the hold is the longest CPU stretch one turn ran without a switch to gevent's hub (the event loop "
        "relays nothing meanwhile), the maximum over the turns. “Taken out”: parts the proxy still refused, so "
        "the turn was replayed without them (benchmarks/agent_turns.py, REFUSED_PARTS)."
        + _measured_alone_note(results, "agents", "This part (6 and 6b)"),
        table(["turn", "body", "tools", "cold CPU ms", "warm CPU ms", "cold hold max ms", "warm hold max ms", "taken out"], rows),
    ]
    r = results.stalled_streams
    if r is not None:
        parts += [
            "### 6b. No stalled streams",
            f"{r.clients} chat streams paced at one token every {r.interval_ms:g} ms through the default single worker, "
            f"alone, and for as long beside `{r.turn}` replayed back to back on one more connection (through "
            "the same worker, to a second upstream answering two tokens), in alternating windows. The gap between "
            "two tokens of one stream, as the client sees it (the client, both fakes and the proxy share the cores: "
            "the gaps alone show how much the machine itself delays a token).",
            table(
                ["", "gaps", "p99 ms", "max ms"],
                [
                    ["streams alone", str(r.gaps_alone), number(r.p99_alone_ms, 2), number(r.max_alone_ms, 2)],
                    ["beside the turns", str(r.gaps_with_turns), number(r.p99_with_turns_ms, 2), number(r.max_with_turns_ms, 2)],
                ],
            ),
            f"Turns answered meanwhile: {r.turns} ({r.turn_errors} refused); the proxy's CPU per turn from /proc "
            f"(the run beside the turns minus the run alone): {number(r.proxy_cpu_ms_per_turn, 2)} ms.",
        ]
    return "\n\n".join(parts)


def markdown(results: BenchmarkResults) -> str:
    sections = [
        "# Benchmark: what the proxy costs, measured against llama.cpp itself",
        "Produced by `scripts/bench`. Every number below comes from one run on the machine described.",
        machine_section(results),
        targets_section(results),
        ratios_section(results),
        ollama_rows.section(results.ollama, _measured_alone_note(results, "ollama", "This part")),
        ttft_rows.section(results.ttft, _measured_alone_note(results, "ttft", "This part")),
        generation_section(results),
        capacity_section(results),
        paced_section(results),
        tool_call_section(results),
        store_section(results),
        socket_section(results),
        batch_lane.section(results.batch, _measured_alone_note(results, "batch", "This row")),
        gateway_section(results),
        comparison_section(results),
        startup_section(results),
        routing_section(results),
        agent_turns_section(results),
        swaps_section(results),
        dashboard_section(results),
    ]
    sections = [section for section in sections if section]
    return "\n\n".join(sections) + "\n"


def quick_markdown(results: BenchmarkResults) -> str:
    """quick.md: what `scripts/bench --quick` measured, its targets, and the machine it ran on."""
    rows = [[t.name, t.goal, t.measured, "**met**" if t.met else "**missed**"] for t in measured_targets(results)]
    sections = [
        "# scripts/bench --quick: the proxy against its neighbours (the regression guard)",
        "Short windows: read the ratios, and run it twice before believing a change of a few percent. "
        "Run it before merging anything on the request path; the whole `scripts/bench` writes results.md.",
        machine_section(results),
        "## Targets",
        table(["target", "goal", "measured", "verdict"], rows),
        ratios_section(results),
        ttft_rows.section(results.ttft),
        ollama_rows.section(results.ollama),
        rerank_row.section(results.rerank),
        tool_call_section(results),
        agent_turns_section(results),
    ]
    return "\n\n".join(section for section in sections if section) + "\n"


def chart(results: BenchmarkResults, path: Path) -> None:
    """Four panels: TTFT and tokens/s direct vs proxy; req/s and CPU per event against the fake."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 2, figsize=(13, 9))
    ttft_panel(axes[0][0], results)
    tokens_panel(axes[0][1], results)
    capacity_panel(axes[1][0], results)
    event_cpu_panel(axes[1][1], results)
    figure.suptitle(f"api-like-oai vs llama-server — {results.machine.cpu_model}, {results.machine.cores} cores")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def ttft_panel(axis, results: BenchmarkResults) -> None:
    pairs = [(d, p) for d, p in results.generation_pairs() if d.streamed]
    grouped_bars(
        axis,
        [f"{d.endpoint}\n{d.clients}c t{d.llama_threads}" for d, _ in pairs],
        {"direct": [d.ttft_p50_ms for d, _ in pairs], "proxy": [p.ttft_p50_ms for _, p in pairs]},
        "time to first token, p50 (ms, streamed)",
    )


def tokens_panel(axis, results: BenchmarkResults) -> None:
    pairs = results.generation_pairs()
    grouped_bars(
        axis,
        [f"{d.endpoint}\n{mode_name(d.streamed)} {d.clients}c t{d.llama_threads}" for d, _ in pairs],
        {"direct": [d.tokens_per_s for d, _ in pairs], "proxy": [p.tokens_per_s for _, p in pairs]},
        f"tokens/s per request ({GENERATED_TOKENS} tokens, median)",
    )


def capacity_panel(axis, results: BenchmarkResults) -> None:
    by_mode = {mode_name(s): [r for r in results.capacity if r.streamed == s] for s in (False, True)}
    grouped_bars(
        axis,
        [str(r.clients) for r in by_mode["whole"]],
        {f"{mode} req/s": [r.requests_per_s for r in rows] for mode, rows in by_mode.items()},
        "proxy req/s vs concurrent clients (instant upstream)",
        target=1000,
    )


def event_cpu_panel(axis, results: BenchmarkResults) -> None:
    labels = [f"{r.clients}@{r.interval_ms:g}ms" for r in results.paced if r.worker_class == "gthread"]
    series = {
        f"{worker} {connections}": [
            r.proxy_cpu_us_per_token for r in results.paced if r.worker_class == worker and r.connections == connections
        ]
        for worker, connections in (("gevent", "keep-alive"), ("gevent", "new per stream"), ("gthread", "keep-alive"))
    }
    grouped_bars(axis, labels, series, "proxy CPU µs per token, paced upstream (all-in)", target=40)


def grouped_bars(axis, labels: list[str], series: dict[str, list[float]], title: str, target: float | None = None):
    width = 0.8 / max(len(series), 1)
    for offset, (name, values) in enumerate(series.items()):
        positions = [i + (offset - (len(series) - 1) / 2) * width for i in range(len(labels))]
        bars = axis.bar(positions, values, width, label=name)
        axis.bar_label(bars, fmt="%.0f" if max(values, default=0) >= 100 else "%.1f", fontsize=7)
    if target is not None:
        axis.axhline(target, color="red", linestyle="--", linewidth=1, label=f"target {target:g}")
    axis.set_xticks(range(len(labels)), labels, fontsize=8)
    axis.set_title(title, fontsize=10)
    axis.legend(fontsize=8)
