"""`python -m benchmarks [--quick | --smoke]`: the body of scripts/bench.

Starts llama-server (LLAMA_SERVER, MODEL from the environment), the fake upstream and the proxy
through its CLI, measures, and writes results.md, results.png and results.json here.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from importlib import metadata
from pathlib import Path

from . import agent_turns as agent_turns_module
from . import (
    agents,
    capacity,
    gateway,
    generation,
    ollama_rows,
    ratios,
    report,
    report_ratios,
    rerank_row,
    servers,
    startup,
    ttft_rows,
    workload,
)
from . import batch_lane as batch_part
from . import dashboard as dashboard_row
from . import fleet as fleet_row
from . import keys as keys_row
from . import paced as paced_part
from . import routing as routing_row
from . import socket_turns as socket_part
from . import store as store_part
from . import swaps as swaps_row
from . import tool_call as tool_call_part
from .capacity import CapacityRig
from .generation import GenerationRig
from .processes import Service
from .results import BEFORE, BenchmarkResults, Machine, RatiosResult, load
from .servers import fake_upstream, llama_server, proxy
from .workload import Plan

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
STARTED = time.perf_counter()


def progress(message: str) -> None:
    print(f"[bench {time.perf_counter() - STARTED:5.0f}s] {message}", file=sys.stderr, flush=True)


def copy_props(llama: Service) -> Path:
    """The real server's /props in a file, so the fake serves the same chat template and tokens."""
    with urllib.request.urlopen(llama.url + "/props", timeout=10) as response:  # noqa: S310 - loopback only
        props = response.read()
    path = Path(tempfile.gettempdir()) / f"api-like-oai-bench-props-{os.getpid()}.json"
    path.write_bytes(props)
    return path


def describe_machine(llama_binary: str) -> Machine:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    cpu_model = next(
        (line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")),
        platform.processor() or "unknown",
    )
    meminfo = Path("/proc/meminfo").read_text().split()
    memory_gib = int(meminfo[meminfo.index("MemTotal:") + 1]) / 2**20
    version = subprocess.run([llama_binary, "--version"], capture_output=True, text=True, timeout=30)
    llama_cpp = next(
        (line.strip() for line in (version.stdout + version.stderr).splitlines() if line.startswith("version")), "unknown"
    )
    server = (
        f"api-like-oai {metadata.version('api-like-oai')} on gunicorn {metadata.version('gunicorn')} with "
        f"gevent {metadata.version('gevent')} (defaults: 1 worker, `--worker-class gevent`), "
        f"Flask {metadata.version('flask')}, urllib3 {metadata.version('urllib3')}"
    )
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    return Machine(
        cpu_model,
        os.cpu_count() or 0,
        memory_gib,
        platform.release(),
        f"{platform.python_implementation()} {platform.python_version()}",
        llama_cpp,
        server,
        load,
    )


def measure_proxy_alone(results: BenchmarkResults, plan: Plan, props_path: Path, stack: ExitStack) -> None:
    """Parts 4, 2 and 3: everything that runs against the fake upstream."""
    fake = fake_upstream(props_path).start()
    stack.callback(fake.stop)
    progress("start-up and idle memory")
    results.startup = startup.measure_startup(lambda: proxy(fake.url), plan.startup_runs)
    loaded = proxy(fake.url).start()
    stack.callback(loaded.stop)
    rig = CapacityRig(loaded, fake, plan)
    progress("capacity against the instant upstream")
    results.capacity = asyncio.run(capacity.capacity_table(rig, progress))
    long_stream = next(r for r in results.capacity if r.streamed and r.clients == plan.reference_clients)
    results.marginal_cpu_us_per_event = asyncio.run(capacity.marginal_cpu_per_event(rig, long_stream))
    progress("chat vs completions for the same prompt")
    results.chat_vs_completions = asyncio.run(capacity.chat_vs_completions(rig))
    measure_tool_call(results, plan, props_path, stack, rig)
    measure_store(results, plan, fake, stack)
    progress(f"gateway table: fixed rates {gateway.GATEWAY_RATES} req/s")
    results.gateway = [asyncio.run(gateway.gateway_row(loaded, fake, rate, plan)) for rate in gateway.GATEWAY_RATES]
    results.peak_rss_mb = loaded.tree().peak_rss_mb()
    loaded.stop()
    fake.stop()
    measure_agent_turns(results, plan, props_path, stack)
    measure_paced(results, plan, props_path, stack)
    measure_dashboard(results, plan, props_path)
    measure_many_streams(results, plan, props_path, stack)


def measure_tool_call(
    results: BenchmarkResults, plan: Plan, props_path: Path, stack: ExitStack, rig: CapacityRig | None = None
) -> None:
    """Part 2d: a streamed tool call against plain text, on `rig` or on a proxy and fake of its own."""
    if rig is None:
        fake = fake_upstream(props_path).start()
        stack.callback(fake.stop)
        loaded = proxy(fake.url).start()
        stack.callback(loaded.stop)
        rig = CapacityRig(loaded, fake, plan)
    progress("a streamed tool call against plain text")
    results.tool_call = asyncio.run(tool_call_part.tool_call_row(rig, plan.reference_clients))


def measure_store(results: BenchmarkResults, plan: Plan, fake: Service, stack: ExitStack) -> None:
    """Part 2e: a stored Responses answer against a stateless one, on a proxy with its own SQLite store."""
    progress("a stored Responses answer against a stateless one (SQLite store)")
    store_dir = tempfile.mkdtemp(prefix="api-like-oai-bench-store-")
    stack.callback(shutil.rmtree, store_dir, ignore_errors=True)
    stored = proxy(fake.url, "--store", f"sqlite://{store_dir}/store.sqlite3").start()
    stack.callback(stored.stop)
    results.store = asyncio.run(store_part.store_row(CapacityRig(stored, fake, plan)))
    measure_socket(results, CapacityRig(stored, fake, plan))
    stored.stop()


def measure_socket(results: BenchmarkResults, rig: CapacityRig) -> None:
    """Part 2f: a 10-turn agent session over one Responses WebSocket against the same turns over HTTP."""
    progress("a 10-turn agent session over one Responses WebSocket against HTTP")
    results.socket = socket_part.socket_row(rig)


def measure_socket_alone(results: BenchmarkResults, plan: Plan, props_path: Path, stack: ExitStack) -> None:
    """`--only socket`: part 2f on a proxy and an instant fake of its own."""
    fake = fake_upstream(props_path).start()
    stack.callback(fake.stop)
    loaded = proxy(fake.url).start()
    stack.callback(loaded.stop)
    measure_socket(results, CapacityRig(loaded, fake, plan))


def measure_agent_turns(results: BenchmarkResults, plan: Plan, props_path: Path, stack: ExitStack) -> None:
    """Part 5: recorded agent turns, in-process; then beside 16 paced streams through one worker."""
    turn_fake = fake_upstream(agents.agent_props(props_path), answer_tokens=2).start()
    stack.callback(turn_fake.stop)
    progress("agent turns: recorded Claude Code and Codex requests, cold and warm")
    results.agent_turns = agents.agent_turns(turn_fake.url, plan.agent_turn_rounds)
    paced = fake_upstream(props_path, paced_part.PACED_TOKEN_INTERVAL_MS).start()
    stack.callback(paced.stop)
    config = two_model_config(paced.url, turn_fake.url)
    stack.callback(config.unlink)
    both = proxy(paced.url, "--config", str(config)).start()
    stack.callback(both.stop)
    progress("no stalled streams: 16 paced streams beside Claude Code turns")
    turn = agents.replayable_turn(both.url, agents.STALLED_TURN)
    results.stalled_streams = asyncio.run(agents.stalled_streams(both, turn, plan))
    for service in (both, paced, turn_fake):
        service.stop()


def two_model_config(paced_url: str, agent_url: str) -> Path:
    """A config file: `bench` (the paced streams) on one upstream, the recorded agents' model names on another."""
    names = sorted({agent_turns_module.load(name)["body"]["model"] for name in agent_turns_module.TURNS})
    path = Path(tempfile.gettempdir()) / f"api-like-oai-bench-config-{os.getpid()}.yaml"
    path.write_text(
        f"default_model: bench\nmodels:\n  bench:\n    upstreams: [{paced_url}]\n"
        f"  agent:\n    upstreams: [{agent_url}]\n    aliases: [{', '.join(names)}]\n"
    )
    return path


def measure_paced(results: BenchmarkResults, plan: Plan, props_path: Path, stack: ExitStack) -> None:
    """Part 2b: the proxy's CPU per token when tokens come one at a time, as a real model sends
    them, with the default worker and with gthread (the worker before issue 13)."""
    for worker_class in ("gevent", "gthread"):
        for interval_ms in sorted({interval for _, interval in paced_part.PACED_LOADS}):
            fake = fake_upstream(props_path, interval_ms).start()
            stack.callback(fake.stop)
            loaded = proxy(fake.url, "--worker-class", worker_class).start()
            stack.callback(loaded.stop)
            rig = CapacityRig(loaded, fake, plan)
            for clients, interval in paced_part.PACED_LOADS:
                for new_connections in (False, True) if worker_class == "gevent" else (False,):
                    if interval == interval_ms:
                        progress(
                            f"paced upstream, {worker_class}: {clients} streams @ {interval:g} ms"
                            f"{', a new connection per stream' if new_connections else ''}"
                        )
                        results.paced.append(
                            asyncio.run(paced_part.paced_row(rig, worker_class, clients, interval, new_connections))
                        )
            loaded.stop()
            fake.stop()


def measure_dashboard(results: BenchmarkResults, plan: Plan, props_path: Path) -> None:
    """Issue 26: the proxy's CPU per token with the dashboard's event stream open vs closed (dashboard.py)."""
    results.dashboard = dashboard_row.dashboard_row(
        lambda interval: fake_upstream(props_path, interval), proxy, plan, progress, rounds=1 if plan.repeats == 1 else 6
    )


def measure_many_streams(results: BenchmarkResults, plan: Plan, props_path: Path, stack: ExitStack) -> None:
    """Part 2c: many concurrent paced streams through one worker."""
    progress(f"{plan.many_streams} concurrent paced streams")
    fake = fake_upstream(props_path, paced_part.MANY_STREAMS_INTERVAL_MS).start()
    stack.callback(fake.stop)
    loaded = proxy(fake.url).start()
    stack.callback(loaded.stop)
    results.many_streams = asyncio.run(
        paced_part.many_streams(
            loaded, fake, plan.many_streams, paced_part.MANY_STREAMS_TOKENS, paced_part.MANY_STREAMS_INTERVAL_MS
        )
    )
    loaded.stop()
    fake.stop()


def measure_real_generation(results: BenchmarkResults, plan: Plan, llama: Service, stack: ExitStack, threads: int) -> None:
    """Part 1: the same requests to llama-server's own OpenAI API and through the proxy."""
    in_front = proxy(llama.url).start()
    stack.callback(in_front.stop)
    if not results.output_checks:
        results.output_checks = [generation.check_same_output(llama.url, in_front.url, endpoint) for endpoint in workload.PATHS]
    rig = GenerationRig(llama, in_front, plan)
    measured = asyncio.run(generation.generation_table(rig, progress))
    for result in measured:
        result.llama_threads = threads
    results.generation += measured
    in_front.stop()


def llama_thread_variants() -> list[int]:
    """llama-server's --threads as the benchmark always ran it (2), and one less than the cores."""
    return sorted({2, max((os.cpu_count() or 2) - 1, 1)}, reverse=True)


# The parts measured into files of their own (`--only keys|fleet`), shown in results.md too as they last ran.
OWN_FILE_PARTS = ("keys-results.md", "fleet-results.md")


def write_outputs(results: BenchmarkResults, output_dir: Path, chart: bool = True) -> str:
    text = report.markdown(results)
    for name in OWN_FILE_PARTS:
        part = output_dir / name
        if part.exists():
            text = text.rstrip("\n") + f"\n\n<!-- from {name} (`scripts/bench --only ...`) -->\n" + part.read_text()
    (output_dir / "results.md").write_text(text)
    if chart:  # the chart shows parts 1-3 only
        report.chart(results, output_dir / "results.png")
    raw = {**dataclasses.asdict(results), "targets": [dataclasses.asdict(t) for t in results.targets()]}
    (output_dir / "results.json").write_text(json.dumps(raw, indent=1, default=str) + "\n")
    return text


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/bench", description="What the proxy costs, against llama.cpp itself.")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="the regression guard: the ratio rows (the proxy against the floor, LiteLLM and llama-server), "
        "the tool call and the agent turns against their neighbours, in under 3 minutes; "
        "writes quick.md and quick.json",
    )
    parser.add_argument(
        "--against",
        metavar="REV",
        help="with --quick: run the proxy at git revision REV (a temporary worktree) as one more target of the "
        "ratio rows, alternating with this tree's, and judge every CPU row against it within the row's noise",
    )
    parser.add_argument("--smoke", action="store_true", help="every part, briefly (numbers not meaningful)")
    parser.add_argument("--output-dir", type=Path, default=HERE, help="where results.* go (default: %(default)s)")
    parser.add_argument(
        "--only",
        choices=[
            "routing",
            "agents",
            "tool-call",
            "swaps",
            "keys",
            "dashboard",
            "fleet",
            "startup",
            "ollama",
            "socket",
            "batch",
            "ttft",
        ],
        help="measure this part alone and merge it into the output dir's results.json",
    )
    return parser.parse_args(argv)


def measure_ratios(
    results: BenchmarkResults,
    plan: ratios.RatioPlan,
    stack: ExitStack,
    against: str | None = None,
    ttft_plan: ttft_rows.TtftPlan | None = None,
) -> Path:
    """Issue 29: the ratio rows, each alternating the proxy with the floor and LiteLLM's proxy (fake
    upstreams) or with llama-server direct and LiteLLM (real generation), in one sitting; with `against`,
    the proxy at that revision too; then the TTFT rows of every API (issue 54) by `ttft_plan`. Returns
    llama-server's /props in a file, for the parts after it."""
    started, load_at_start = time.perf_counter(), ", ".join(f"{n:.2f}" for n in os.getloadavg())
    begun = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    threads = max((os.cpu_count() or 2) - 1, 1)
    progress(f"ratio rows: starting llama-server --threads {threads}, the fakes, the floor, the proxy and LiteLLM")
    llama = llama_server(os.environ["LLAMA_SERVER"], os.environ["MODEL"], threads).start()
    stack.callback(llama.stop)
    props_path = copy_props(llama)
    stack.callback(props_path.unlink)
    fakes = {
        ratios.INSTANT: fake_upstream(props_path),
        **{name: fake_upstream(props_path, interval) for name, interval in ratios.PACED_INTERVALS.items()},
    }
    upstreams = {**{name: fake.url for name, fake in fakes.items()}, ratios.REAL: llama.url}
    fronts = {"floor": servers.floor(upstreams), "proxy": servers.proxy_for_models(upstreams)}
    if against:
        fronts[BEFORE] = servers.proxy_for_models(upstreams, stack.enter_context(servers.checkout_of(against)), BEFORE)
    fronts["litellm"] = servers.litellm(upstreams)
    for service in (*fakes.values(), *fronts.values()):
        stack.callback(service.stop)
    with ThreadPoolExecutor(len(fakes) + len(fronts)) as starting:  # at once: LiteLLM alone takes 20 s and more
        list(starting.map(Service.start, (*fakes.values(), *fronts.values())))
    rows = ratios.instant_and_paced_rows(fronts, plan, progress)
    rows += ratios.generation_rows(llama, fronts, plan, threads, progress)
    results.ollama = ollama_rows.measure(llama, fronts["proxy"], plan, progress)
    if ttft_plan is not None:
        results.ttft = ttft_rows.measure(llama, fronts["proxy"], ratios.REAL, ttft_plan, progress)
    results.ratios = RatiosResult(
        begun,
        load_at_start,
        threads,
        f"litellm[proxy]=={servers.LITELLM_VERSION}, `litellm --num_workers 1`",
        rows,
        time.perf_counter() - started,
        servers.described(against) if against else "",
    )
    for service in (*fronts.values(), *fakes.values(), llama):
        service.stop()
    return props_path


def quick_guard(args: argparse.Namespace) -> int:
    """`--quick`: the ratio rows, the rerank row, the streamed tool call against text and the agent turns
    against a one-line chat, briefly; quick.md and quick.json in the output directory (results.* are left alone)."""
    results = BenchmarkResults(describe_machine(os.environ["LLAMA_SERVER"]))
    plan = dataclasses.replace(Plan.quick(), repeats=4, capacity_seconds=1.5, agent_turn_rounds=10)
    with ExitStack() as stack:
        props_path = measure_ratios(
            results, ratios.RatioPlan.quick(args.against is not None), stack, args.against, ttft_rows.TtftPlan.quick()
        )
        results.rerank = rerank_row.measure(os.environ["LLAMA_SERVER"], ratios.RatioPlan.quick(), progress)
        measure_tool_call(results, plan, props_path, stack)
        turn_fake = fake_upstream(agents.agent_props(props_path), answer_tokens=2).start()
        stack.callback(turn_fake.stop)
        progress("agent turns against a one-line chat")
        results.agent_turns = agents.agent_turns(turn_fake.url, plan.agent_turn_rounds)
    results.duration_s = time.perf_counter() - STARTED
    args.output_dir.mkdir(parents=True, exist_ok=True)
    text = report.quick_markdown(results)
    (args.output_dir / "quick.md").write_text(text)
    raw = {**dataclasses.asdict(results), "targets": [dataclasses.asdict(t) for t in report_ratios.measured_targets(results)]}
    (args.output_dir / "quick.json").write_text(json.dumps(raw, indent=1, default=str) + "\n")
    print(text)
    progress(f"done in {results.duration_s:.0f} s; {args.output_dir}/quick.md")
    return 0


def measure_routing(results: BenchmarkResults, quick: bool) -> None:
    """Part 5: least-busy vs prefix routing over two real llama-servers."""
    plan = routing_row.RoutingPlan.quick() if quick else routing_row.RoutingPlan()
    results.routing = routing_row.routing_row(os.environ["LLAMA_SERVER"], os.environ["MODEL"], plan, progress)


def measure_batch(results: BenchmarkResults, quick: bool) -> None:
    """Issue 51: chats beside a batch (in the lane, and as plain requests), and the lane's throughput."""
    plan = batch_part.BatchPlan.quick() if quick else batch_part.BatchPlan()
    results.batch = batch_part.batch_row(os.environ["LLAMA_SERVER"], os.environ["MODEL"], plan, progress)


def _when_and_load() -> str:
    """When a part measured alone ran, and under what load."""
    return (
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
        f"at its start {', '.join(f'{n:.2f}' for n in os.getloadavg())}"
    )


def measure_swaps(results: BenchmarkResults, quick: bool) -> None:
    """Issue 24: models on demand against llama-server's router mode, two real models, memory for one."""
    plan = swaps_row.SwapPlan.quick() if quick else swaps_row.SwapPlan()
    results.swaps = swaps_row.swaps_row(
        os.environ["LLAMA_SERVER"], os.environ["MODEL"], os.environ["GEMMA_MODEL"], plan, progress
    )


def measure_models_dir_startup(results: BenchmarkResults, plan: Plan) -> None:
    """Issue 42: start-up with a --models-dir of ten real GGUF files."""
    progress("start-up with --models-dir of 10 GGUF files")
    results.models_dir_startup = startup.measure_models_dir_startup(
        os.environ["LLAMA_SERVER"], os.environ["MODEL"], os.environ["GEMMA_MODEL"], plan.startup_runs
    )


def measure_ollama(results: BenchmarkResults, quick: bool) -> None:
    """Issue 38 alone (`--only ollama`): /api/chat beside /v1/chat/completions of one proxy, before the
    instant fake and the real llama-server (no floor, no LiteLLM: the OpenAI route is the neighbour)."""
    threads = max((os.cpu_count() or 2) - 1, 1)
    with ExitStack() as stack:
        llama = llama_server(os.environ["LLAMA_SERVER"], os.environ["MODEL"], threads).start()
        stack.callback(llama.stop)
        props_path = copy_props(llama)
        stack.callback(props_path.unlink)
        fake = fake_upstream(props_path)
        proxy = servers.proxy_for_models({ratios.INSTANT: fake.url, ratios.REAL: llama.url})
        for service in (fake, proxy):
            stack.callback(service.stop)
            service.start()
        plan = ratios.RatioPlan.quick() if quick else ratios.RatioPlan()
        results.ollama = ollama_rows.measure(llama, proxy, plan, progress)


def ttft_plan(args: argparse.Namespace) -> ttft_rows.TtftPlan:
    """The TTFT rows' plan: a few pairs for `--smoke`, the quick one for `--quick`, else the whole."""
    if args.smoke:
        return ttft_rows.TtftPlan(min_pairs=2, max_pairs=4, step=2)
    return ttft_rows.TtftPlan.quick() if args.quick else ttft_rows.TtftPlan()


def measure_ttft(results: BenchmarkResults, plan: ttft_rows.TtftPlan) -> None:
    """Issue 54 alone (`--only ttft`): every API's first token through a proxy and direct, one real llama-server."""
    threads = max((os.cpu_count() or 2) - 1, 1)
    with ExitStack() as stack:
        llama = llama_server(os.environ["LLAMA_SERVER"], os.environ["MODEL"], threads).start()
        stack.callback(llama.stop)
        proxy = servers.proxy_for_models({ratios.REAL: llama.url})
        stack.callback(proxy.stop)
        proxy.start()
        results.ttft = ttft_rows.measure(llama, proxy, ratios.REAL, plan, progress)


def only_part(args: argparse.Namespace, plan: Plan) -> int:
    """`--only PART`: this part measured now, the others' numbers kept from results.json."""
    previous = args.output_dir / "results.json"
    if args.only in ("keys", "fleet"):  # its own keys|fleet-results.md/json, then shown in results.md too
        part = keys_row.keys_part if args.only == "keys" else fleet_row.fleet_part
        status = part(args.output_dir, args.quick_plans, progress)
        if previous.exists():
            write_outputs(load(json.loads(previous.read_text())), args.output_dir, chart=False)
        return status
    results = (
        load(json.loads(previous.read_text()))
        if previous.exists()
        else BenchmarkResults(describe_machine(os.environ["LLAMA_SERVER"]))
    )
    if args.only == "routing":
        measure_routing(results, args.quick_plans)
    elif args.only == "swaps":
        measure_swaps(results, args.quick_plans)
    elif args.only == "startup":
        measure_models_dir_startup(results, plan)
    elif args.only == "batch":
        results.measured_alone["batch"] = _when_and_load()
        measure_batch(results, args.quick_plans)
    elif args.only in ("ollama", "ttft"):
        results.measured_alone[args.only] = _when_and_load()
        if args.only == "ollama":
            measure_ollama(results, args.quick_plans)
        else:
            measure_ttft(results, ttft_plan(args))
    else:
        results.measured_alone[args.only] = _when_and_load()
        with ExitStack() as stack:
            props_path = real_props(stack)
            if args.only == "agents":
                measure_agent_turns(results, plan, props_path, stack)
            elif args.only == "dashboard":
                measure_dashboard(results, plan, props_path)
            elif args.only == "socket":
                measure_socket_alone(results, plan, props_path, stack)
            else:
                measure_tool_call(results, plan, props_path, stack)
    print(write_outputs(results, args.output_dir, chart=False))
    return 0


def real_props(stack: ExitStack) -> Path:
    """llama-server's /props for the bundled model, in a file (the server stopped again)."""
    llama = llama_server(os.environ["LLAMA_SERVER"], os.environ["MODEL"]).start()
    stack.callback(llama.stop)
    props_path = copy_props(llama)
    stack.callback(props_path.unlink)
    llama.stop()
    return props_path


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.against and not args.quick:
        sys.exit("scripts/bench: --against REV goes with --quick")
    plan = Plan.quick() if args.smoke else Plan()
    args.quick_plans = args.quick or args.smoke  # the routing and swaps parts' short plans
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind, so every started server is stopped
    args.output_dir.mkdir(parents=True, exist_ok=True)  # before any part: a new directory lost a whole run
    if args.only:
        return only_part(args, plan)
    if args.quick:
        return quick_guard(args)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # a thousand streams need a thousand sockets here
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    binary, model = os.environ["LLAMA_SERVER"], os.environ["MODEL"]
    results = BenchmarkResults(describe_machine(binary))
    with ExitStack() as stack:
        props_path = measure_ratios(
            results, ratios.RatioPlan.quick() if args.smoke else ratios.RatioPlan(), stack, ttft_plan=ttft_plan(args)
        )
        for threads in llama_thread_variants():
            progress(f"starting llama-server --threads {threads}")
            llama = llama_server(binary, model, threads).start()
            stack.callback(llama.stop)
            if props_path is None:
                props_path = copy_props(llama)
                stack.callback(props_path.unlink)
            measure_real_generation(results, plan, llama, stack, threads)
            llama.stop()  # the rest runs against the fake upstream alone
        measure_routing(results, args.quick_plans)
        measure_batch(results, args.quick_plans)
        measure_swaps(results, args.quick_plans)
        measure_models_dir_startup(results, plan)
        measure_proxy_alone(results, plan, props_path, stack)
        keys_row.keys_part(args.output_dir, args.quick_plans, progress)
    results.duration_s = time.perf_counter() - STARTED
    args.output_dir.mkdir(parents=True, exist_ok=True)
    print(write_outputs(results, args.output_dir))
    progress(f"done; results in {args.output_dir}/results.md and results.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
