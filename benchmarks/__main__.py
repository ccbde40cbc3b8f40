"""`python -m benchmarks [--quick]`: the body of scripts/bench.

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
from contextlib import ExitStack
from importlib import metadata
from pathlib import Path

from . import keys as keys_row
from . import report, scenarios
from . import routing as routing_row
from . import swaps as swaps_row
from .processes import Service, free_port
from .results import BenchmarkResults, Machine, load
from .scenarios import CapacityRig, GenerationRig, Plan

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
STARTED = time.perf_counter()


def progress(message: str) -> None:
    print(f"[bench {time.perf_counter() - STARTED:5.0f}s] {message}", file=sys.stderr, flush=True)


def llama_server(binary: str, model: str, threads: int = 2) -> Service:
    port = free_port()
    return Service("llama-server", [binary, "--model", model, "--host", "127.0.0.1", "--port", str(port),
                                    "--ctx-size", "4096", "--parallel", "4", "--threads", str(threads), "--seed", "42"],
                   port)


def proxy(upstream_url: str, *flags: str) -> Service:
    """The proxy as users start it: its CLI, default workers and worker class, no template flag. Run as
    `python -m api_like_oai` from this checkout (the benchmark runs here), so that the code measured
    is this tree's even when the environment's editable install points at another checkout."""
    port = free_port()
    return Service("proxy", [sys.executable, "-m", "api_like_oai", "--llama-api", upstream_url, "--port", str(port),
                             *flags], port, ready_path="/v1/models")


def fake_upstream(props_path: Path, token_interval_ms: float = 0.0, answer_tokens: int | None = None) -> Service:
    port = free_port()
    answer = ["--answer-tokens", str(answer_tokens)] if answer_tokens is not None else []
    return Service("fake-llamacpp", [sys.executable, str(HERE / "fake_llamacpp.py"), "--port", str(port),
                                     "--props", str(props_path), "--token-interval-ms", str(token_interval_ms),
                                     *answer], port)


def copy_props(llama: Service) -> Path:
    """The real server's /props in a file, so the fake serves the same chat template and tokens."""
    with urllib.request.urlopen(llama.url + "/props", timeout=10) as response:  # noqa: S310 - loopback only
        props = response.read()
    path = Path(tempfile.gettempdir()) / f"api-like-oai-bench-props-{os.getpid()}.json"
    path.write_bytes(props)
    return path


def describe_machine(llama_binary: str) -> Machine:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    cpu_model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines()
                      if line.startswith("model name")), platform.processor() or "unknown")
    meminfo = Path("/proc/meminfo").read_text().split()
    memory_gib = int(meminfo[meminfo.index("MemTotal:") + 1]) / 2**20
    version = subprocess.run([llama_binary, "--version"], capture_output=True, text=True, timeout=30)
    llama_cpp = next((line.strip() for line in (version.stdout + version.stderr).splitlines()
                      if line.startswith("version")), "unknown")
    server = (f"api-like-oai {metadata.version('api-like-oai')} on gunicorn {metadata.version('gunicorn')} with "
              f"gevent {metadata.version('gevent')} (defaults: 1 worker, `--worker-class gevent`), "
              f"Flask {metadata.version('flask')}, urllib3 {metadata.version('urllib3')}")
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    return Machine(cpu_model, os.cpu_count() or 0, memory_gib, platform.release(),
                   f"{platform.python_implementation()} {platform.python_version()}", llama_cpp, server, load)


def measure_proxy_alone(results: BenchmarkResults, plan: Plan, props_path: Path, stack: ExitStack) -> None:
    """Parts 4, 2 and 3: everything that runs against the fake upstream."""
    fake = fake_upstream(props_path).start()
    stack.callback(fake.stop)
    progress("start-up and idle memory")
    results.startup = scenarios.measure_startup(lambda: proxy(fake.url), plan.startup_runs)
    loaded = proxy(fake.url).start()
    stack.callback(loaded.stop)
    rig = CapacityRig(loaded, fake, plan)
    progress("capacity against the instant upstream")
    results.capacity = asyncio.run(scenarios.capacity_table(rig, progress))
    long_stream = next(r for r in results.capacity if r.streamed and r.clients == plan.reference_clients)
    results.marginal_cpu_us_per_event = asyncio.run(scenarios.marginal_cpu_per_event(rig, long_stream))
    progress("chat vs completions for the same prompt")
    results.chat_vs_completions = asyncio.run(scenarios.chat_vs_completions(rig))
    measure_tool_call(results, plan, props_path, stack, rig)
    measure_store(results, plan, fake, stack)
    progress(f"gateway table: fixed rates {scenarios.GATEWAY_RATES} req/s")
    results.gateway = [asyncio.run(scenarios.gateway_row(loaded, fake, rate, plan)) for rate in scenarios.GATEWAY_RATES]
    results.peak_rss_mb = loaded.tree().peak_rss_mb()
    loaded.stop()
    fake.stop()
    measure_agent_turns(results, plan, props_path, stack)
    measure_paced(results, plan, props_path, stack)
    measure_many_streams(results, plan, props_path, stack)


def measure_tool_call(results: BenchmarkResults, plan: Plan, props_path: Path, stack: ExitStack,
                      rig: CapacityRig | None = None) -> None:
    """Part 2d: a streamed tool call against plain text, on `rig` or on a proxy and fake of its own."""
    if rig is None:
        fake = fake_upstream(props_path).start()
        stack.callback(fake.stop)
        loaded = proxy(fake.url).start()
        stack.callback(loaded.stop)
        rig = CapacityRig(loaded, fake, plan)
    progress("a streamed tool call against plain text")
    results.tool_call = asyncio.run(scenarios.tool_call_row(rig, plan.reference_clients))


def measure_store(results: BenchmarkResults, plan: Plan, fake: Service, stack: ExitStack) -> None:
    """Part 2e: a stored Responses answer against a stateless one, on a proxy with its own SQLite store."""
    progress("a stored Responses answer against a stateless one (SQLite store)")
    store_dir = tempfile.mkdtemp(prefix="api-like-oai-bench-store-")
    stack.callback(shutil.rmtree, store_dir, ignore_errors=True)
    stored = proxy(fake.url, "--store", f"sqlite://{store_dir}/store.sqlite3").start()
    stack.callback(stored.stop)
    results.store = asyncio.run(scenarios.store_row(CapacityRig(stored, fake, plan)))
    stored.stop()


def measure_agent_turns(results: BenchmarkResults, plan: Plan, props_path: Path, stack: ExitStack) -> None:
    """Part 5: recorded agent turns, in-process; then beside 16 paced streams through one worker."""
    turn_fake = fake_upstream(scenarios.agent_props(props_path), answer_tokens=2).start()
    stack.callback(turn_fake.stop)
    progress("agent turns: recorded Claude Code and Codex requests, cold and warm")
    results.agent_turns = scenarios.agent_turns(turn_fake.url, plan.agent_turn_rounds)
    paced = fake_upstream(props_path, scenarios.PACED_TOKEN_INTERVAL_MS).start()
    stack.callback(paced.stop)
    config = two_model_config(paced.url, turn_fake.url)
    stack.callback(config.unlink)
    both = proxy(paced.url, "--config", str(config)).start()
    stack.callback(both.stop)
    progress("no stalled streams: 16 paced streams beside Claude Code turns")
    turn = scenarios.replayable_turn(both.url, scenarios.STALLED_TURN)
    results.stalled_streams = asyncio.run(scenarios.stalled_streams(both, turn, plan))
    for service in (both, paced, turn_fake):
        service.stop()


def two_model_config(paced_url: str, agent_url: str) -> Path:
    """A config file: `bench` (the paced streams) on one upstream, the recorded agents' model names on another."""
    names = sorted({scenarios.agent_turns_module.load(name)["body"]["model"] for name in scenarios.agent_turns_module.TURNS})
    path = Path(tempfile.gettempdir()) / f"api-like-oai-bench-config-{os.getpid()}.yaml"
    path.write_text(f"default_model: bench\nmodels:\n  bench:\n    upstreams: [{paced_url}]\n"
                    f"  agent:\n    upstreams: [{agent_url}]\n    aliases: [{', '.join(names)}]\n")
    return path


def measure_paced(results: BenchmarkResults, plan: Plan, props_path: Path, stack: ExitStack) -> None:
    """Part 2b: the proxy's CPU per token when tokens come one at a time, as a real model sends
    them, with the default worker and with gthread (the worker before issue 13)."""
    for worker_class in ("gevent", "gthread"):
        for interval_ms in sorted({interval for _, interval in scenarios.PACED_LOADS}):
            fake = fake_upstream(props_path, interval_ms).start()
            stack.callback(fake.stop)
            loaded = proxy(fake.url, "--worker-class", worker_class).start()
            stack.callback(loaded.stop)
            rig = CapacityRig(loaded, fake, plan)
            for clients, interval in scenarios.PACED_LOADS:
                for new_connections in (False, True) if worker_class == "gevent" else (False,):
                    if interval == interval_ms:
                        progress(f"paced upstream, {worker_class}: {clients} streams @ {interval:g} ms"
                                 f"{', a new connection per stream' if new_connections else ''}")
                        results.paced.append(asyncio.run(
                            scenarios.paced_row(rig, worker_class, clients, interval, new_connections)))
            loaded.stop()
            fake.stop()


def measure_many_streams(results: BenchmarkResults, plan: Plan, props_path: Path, stack: ExitStack) -> None:
    """Part 2c: many concurrent paced streams through one worker."""
    progress(f"{plan.many_streams} concurrent paced streams")
    fake = fake_upstream(props_path, scenarios.MANY_STREAMS_INTERVAL_MS).start()
    stack.callback(fake.stop)
    loaded = proxy(fake.url).start()
    stack.callback(loaded.stop)
    results.many_streams = asyncio.run(scenarios.many_streams(
        loaded, fake, plan.many_streams, scenarios.MANY_STREAMS_TOKENS, scenarios.MANY_STREAMS_INTERVAL_MS))
    loaded.stop()
    fake.stop()


def measure_real_generation(results: BenchmarkResults, plan: Plan, llama: Service, stack: ExitStack,
                            threads: int) -> None:
    """Part 1: the same requests to llama-server's own OpenAI API and through the proxy."""
    in_front = proxy(llama.url).start()
    stack.callback(in_front.stop)
    if not results.output_checks:
        results.output_checks = [scenarios.check_same_output(llama.url, in_front.url, endpoint)
                                 for endpoint in scenarios.PATHS]
    rig = GenerationRig(llama, in_front, plan)
    measured = asyncio.run(scenarios.generation_table(rig, progress))
    for result in measured:
        result.llama_threads = threads
    results.generation += measured
    in_front.stop()


def llama_thread_variants() -> list[int]:
    """llama-server's --threads as the benchmark always ran it (2), and one less than the cores."""
    return sorted({2, max((os.cpu_count() or 2) - 1, 1)}, reverse=True)


def write_outputs(results: BenchmarkResults, output_dir: Path, chart: bool = True) -> str:
    text = report.markdown(results)
    (output_dir / "results.md").write_text(text)
    if chart:  # the chart shows parts 1-3 only
        report.chart(results, output_dir / "results.png")
    raw = {**dataclasses.asdict(results), "targets": [dataclasses.asdict(t) for t in results.targets()]}
    (output_dir / "results.json").write_text(json.dumps(raw, indent=1, default=str) + "\n")
    return text


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/bench", description="What the proxy costs, against llama.cpp itself.")
    parser.add_argument("--quick", action="store_true", help="a short smoke run (numbers not meaningful)")
    parser.add_argument("--output-dir", type=Path, default=HERE, help="where results.* go (default: %(default)s)")
    parser.add_argument("--only", choices=["routing", "agents", "tool-call", "swaps", "keys"],
                        help="measure this part alone and merge it into the output dir's results.json")
    return parser.parse_args(argv)


def measure_routing(results: BenchmarkResults, quick: bool) -> None:
    """Part 5: least-busy vs prefix routing over two real llama-servers."""
    plan = routing_row.RoutingPlan.quick() if quick else routing_row.RoutingPlan()
    results.routing = routing_row.routing_row(os.environ["LLAMA_SERVER"], os.environ["MODEL"], plan, progress)


def measure_swaps(results: BenchmarkResults, quick: bool) -> None:
    """Issue 24: models on demand against llama-server's router mode, two real models, memory for one."""
    plan = swaps_row.SwapPlan.quick() if quick else swaps_row.SwapPlan()
    results.swaps = swaps_row.swaps_row(os.environ["LLAMA_SERVER"], os.environ["MODEL"], os.environ["GEMMA_MODEL"],
                                        plan, progress)


def only_part(args: argparse.Namespace, plan: Plan) -> int:
    """`--only PART`: this part measured now, the others' numbers kept from results.json."""
    if args.only == "keys":   # its own keys-results.md/json beside results.md
        return keys_row.keys_part(args.output_dir, args.quick, progress)
    previous = args.output_dir / "results.json"
    results = load(json.loads(previous.read_text())) if previous.exists() \
        else BenchmarkResults(describe_machine(os.environ["LLAMA_SERVER"]))
    if args.only == "routing":
        measure_routing(results, args.quick)
    elif args.only == "swaps":
        measure_swaps(results, args.quick)
    else:
        results.measured_alone[args.only] = (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
                                             f"at its start {', '.join(f'{n:.2f}' for n in os.getloadavg())}")
        with ExitStack() as stack:
            props_path = real_props(stack)
            if args.only == "agents":
                measure_agent_turns(results, plan, props_path, stack)
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
    plan = Plan.quick() if args.quick else Plan()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind, so every started server is stopped
    if args.only:
        return only_part(args, plan)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # a thousand streams need a thousand sockets here
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    binary, model = os.environ["LLAMA_SERVER"], os.environ["MODEL"]
    results = BenchmarkResults(describe_machine(binary))
    with ExitStack() as stack:
        props_path = None
        for threads in llama_thread_variants():
            progress(f"starting llama-server --threads {threads}")
            llama = llama_server(binary, model, threads).start()
            stack.callback(llama.stop)
            if props_path is None:
                props_path = copy_props(llama)
                stack.callback(props_path.unlink)
            measure_real_generation(results, plan, llama, stack, threads)
            llama.stop()  # the rest runs against the fake upstream alone
        measure_routing(results, args.quick)
        measure_swaps(results, args.quick)
        measure_proxy_alone(results, plan, props_path, stack)
        keys_row.keys_part(args.output_dir, args.quick, progress)
    results.duration_s = time.perf_counter() - STARTED
    args.output_dir.mkdir(parents=True, exist_ok=True)
    print(write_outputs(results, args.output_dir))
    progress(f"done; results in {args.output_dir}/results.md and results.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
