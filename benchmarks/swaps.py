"""The swaps part (issue 24, section 5): two real models, SmolLM2-135M and gemma-3-270m, in memory
for one, served by llama-server's own router mode and by the proxy's models on demand, side by side.

1. The same workload against each: `clients` threads, each alternating the two models, streamed
   requests of `max_tokens`, for `seconds`. Router mode is llama-server without `--model`, with
   `--models-dir` and `--models-max 1`; the proxy has `--models-dir` and a memory budget (from its own
   estimates) that holds either model but not both. A poller reads each side's `GET /models` (both
   answer llama.cpp's `status.value` shape) so a request that waited for its model to load is known.
2. The cost of a load: llama-server started directly, to `/health` 200, against the proxy's
   `POST /models/load`, alternated.
3. A recorded agent turn on SmolLM2 cold, warm, and after a swap to gemma and back, with and
   without `slot_save`.
4. An open-loop workload (issue 42): requests sent at a steady rate whether or not the earlier ones
   were answered, an uneven mix of the two models (OPEN_PATTERN: 4 of 5 for SmolLM2), where
   collating a model's waiting requests into one swap should show. After each proxy window the
   supervisor's own times of a swap's stages (drain, stop, exit, start, health, restore) are kept.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from . import agent_turns
from .processes import Service, free_port, http_ok
from .results import AgentSwapTurn, LoadTiming, SwapRequest, SwapSetup, SwapsResult, percentile

MODELS = ("smollm2", "gemma3")  # the models folder's file stems: the names both sides serve
HELLO = [{"role": "user", "content": "Name a colour."}]
REQUEST_TIMEOUT_S = 900
POLL_S = 0.2  # the status poller's period
HEALTH_POLL_S = 0.02  # as the proxy polls a starting llama-server
# The agent turn: Codex's third turn (two exec_command rounds). Whole it is 9,371 tokens for SmolLM2,
# past its 8,192-token context; with only the tool it calls (exec_command) and without Codex's base
# instructions (the first developer message, 3,816 tokens) it is about 1,730, which a busy 2-core
# machine reads in a minute or two (llama.cpp read 20-30 tokens/s here under a load average of 10).
AGENT_TURN = "codex_turn_tools"
AGENT_KEPT_TOOLS = ("exec_command",)
AGENT_DROPPED_ITEMS = 1  # the first input item: the base instructions
AGENT_ARGS = ("--ctx-size", "8192", "--parallel", "1", "--threads", "1")
OTHER_ARGS = ("--ctx-size", "2048", "--parallel", "1", "--threads", "1")
OPEN_PATTERN = (0, 0, 1, 0, 0)  # the open-loop workload's models, in turn: 80% MODELS[0], 20% MODELS[1]
OPEN_GRACE_S = 120  # an open-loop request still unanswered this long after the window fails
STAGES = ("drain", "stop", "exit", "start", "health", "restore")


@dataclass(frozen=True)
class SwapPlan:
    clients: int = 8
    seconds: float = 60.0
    max_tokens: int = 8
    llama_args: str = "--ctx-size 4096 --parallel 4 --threads 2"
    load_runs: int = 5  # loads of each model, each way
    agent: bool = True
    order: tuple[str, ...] = ("router", "proxy", "proxy", "router")  # the windows: ABBA, as the load drifts
    open_rate: float = 3.0  # the open-loop workload's requests per second, both models together
    open_order: tuple[str, ...] = ("proxy", "router")

    @classmethod
    def quick(cls) -> SwapPlan:
        return cls(clients=4, seconds=15, load_runs=1, agent=False, order=("router", "proxy"), open_rate=2.0)


def models_dir(smollm2: str, gemma: str) -> Path:
    """A folder holding the two GGUF files (links) under the names both sides serve."""
    folder = Path(tempfile.mkdtemp(prefix="api-like-oai-bench-swaps-"))
    for name, path in zip(MODELS, (smollm2, gemma), strict=True):
        (folder / f"{name}.gguf").symlink_to(path)
    return folder


def router(binary: str, folder: Path, plan: SwapPlan) -> Service:
    """llama-server's router mode: no --model, the folder, one model at a time; the flags after those
    are passed to each model's instance."""
    port = free_port()
    return Service(
        "llama-router",
        [
            binary,
            "--models-dir",
            str(folder),
            "--models-max",
            "1",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *plan.llama_args.split(),
        ],
        port,
    )


def proxy(binary: str, folder: Path, plan: SwapPlan, budget_mib: int) -> Service:
    port = free_port()
    return Service(
        "proxy-on-demand",
        [
            sys.executable,
            "-m",
            "api_like_oai",
            "--models-dir",
            str(folder),
            "--llama-server",
            binary,
            "--llama-args",
            plan.llama_args,
            "--memory-budget",
            str(budget_mib),
            "--port",
            str(port),
        ],
        port,
        ready_path="/v1/models",
    )


def budget_for_one(folder: Path, plan: SwapPlan) -> int:
    """MiB that hold the larger model's estimate, but not both models' (the proxy's own estimates)."""
    from api_like_oai.supervisor.configure import launch_spec
    from api_like_oai.supervisor.footprint import estimate_mib

    sizes = [estimate_mib(launch_spec(name, str(folder / f"{name}.gguf"), args=plan.llama_args)) for name in MODELS]
    return max(sizes) + min(sizes) // 2


# --- the workload ---------------------------------------------------------------------------------


def get_json(port: int, path: str, timeout: float = 10) -> dict:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path)
        return json.loads(connection.getresponse().read())
    finally:
        connection.close()


def post_json(port: int, path: str, body: dict, timeout: float = REQUEST_TIMEOUT_S) -> tuple[int, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        connection.close()


def model_states(port: int) -> dict[str, dict]:
    """Model name -> its `status` object, from `GET /models` (router mode's and the proxy's alike)."""
    return {card["id"]: card.get("status", {}) for card in get_json(port, "/models")["data"]}


class StatusPoller:
    """Reads `GET /models` every POLL_S in a thread: when was each model not loaded."""

    def __init__(self, port: int):
        self.port, self.readings, self._done = port, [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._done.wait(POLL_S):
            try:
                states = model_states(self.port)
            except (OSError, ValueError, KeyError):
                continue  # a busy server: the next reading will do
            self.readings.append((time.perf_counter(), {name: s.get("value") for name, s in states.items()}))

    def __enter__(self) -> StatusPoller:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._done.set()
        self._thread.join()

    def unloaded_between(self, model: str, start: float, end: float) -> bool:
        return any(start <= at <= end and values.get(model) != "loaded" for at, values in self.readings)


def stream_chat(port: int, model: str, max_tokens: int, timeout: float = REQUEST_TIMEOUT_S) -> tuple[int, float, bool, str]:
    """(status, seconds to the first text, whether the stream ended whole, error) of one request."""
    body = {"model": model, "messages": HELLO, "max_tokens": max_tokens, "stream": True}
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    started, first, finished, done = time.perf_counter(), None, False, False
    try:
        connection.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            return response.status, time.perf_counter() - started, False, response.read()[:200].decode(errors="replace")
        for line in response:
            done = done or line.strip() == b"data: [DONE]"
            if line.startswith(b"data: {"):
                choice = (json.loads(line[6:]).get("choices") or [{}])[0]
                first = first or (time.perf_counter() if choice.get("delta", {}).get("content") else None)
                finished = finished or bool(choice.get("finish_reason"))
        return 200, (first or time.perf_counter()) - started, finished and done, "" if finished and done else "cut"
    except (OSError, http.client.HTTPException) as error:
        return 0, time.perf_counter() - started, False, f"{type(error).__name__}: {error}"
    finally:
        connection.close()


def run_client(port: int, client: int, plan: SwapPlan, began: float) -> list[tuple]:
    """One client: requests one after the other until the window ends, alternating the models."""
    done, turn = [], client % 2
    while time.perf_counter() - began < plan.seconds:
        model, sent = MODELS[turn % 2], time.perf_counter()
        status, ttft, whole, error = stream_chat(port, model, plan.max_tokens)
        done.append((client, model, sent, sent + ttft, time.perf_counter(), status == 200 and whole, error))
        turn += 1
    return done


def run_workload(setup: str, port: int, plan: SwapPlan) -> list[SwapRequest]:
    """Every client at once; a request still running at the window's end is waited for (and counted
    as answered late or failed)."""
    with StatusPoller(port) as poller, ThreadPoolExecutor(plan.clients) as pool:
        began = time.perf_counter()
        runs = list(pool.map(lambda client: run_client(port, client, plan, began), range(plan.clients)))
    return [
        SwapRequest(
            setup,
            client,
            model,
            sent - began,
            (first - sent) * 1000,
            (end - sent) * 1000,
            ok,
            poller.unloaded_between(model, sent, first),
            error,
        )
        for run in runs
        for client, model, sent, first, end, ok, error in run
    ]


def run_open_loop(setup: str, port: int, plan: SwapPlan) -> list[SwapRequest]:
    """Requests sent every 1/open_rate s for the window, each on a thread of its own (none waits for
    another's answer), the models in OPEN_PATTERN's turn; then every one is waited for."""
    interval, count = 1 / plan.open_rate, int(plan.seconds * plan.open_rate)
    with StatusPoller(port) as poller, ThreadPoolExecutor(count) as pool:
        began, pending = time.perf_counter(), []
        for number in range(count):
            time.sleep(max(began + number * interval - time.perf_counter(), 0))
            model = MODELS[OPEN_PATTERN[number % len(OPEN_PATTERN)]]
            pending.append((number, model, pool.submit(ended_chat, port, model, plan.max_tokens, plan.seconds + OPEN_GRACE_S)))
        answers = [(number, model, *future.result()) for number, model, future in pending]
    return [
        SwapRequest(
            setup,
            number,
            model,
            sent - began,
            ttft * 1000,
            (ended - sent) * 1000,
            status == 200 and whole,
            poller.unloaded_between(model, sent, sent + ttft),
            error,
        )
        for number, model, sent, ended, (status, ttft, whole, error) in answers
    ]


def ended_chat(port: int, model: str, max_tokens: int, timeout: float) -> tuple[float, float, tuple]:
    """(sent, ended, stream_chat's answer) of one request."""
    sent = time.perf_counter()
    answer = stream_chat(port, model, max_tokens, timeout)
    return sent, time.perf_counter(), answer


def router_loads(log_path: Path) -> int:
    """Model instances the router spawned, from its log (it logs one line for each)."""
    return log_path.read_text(errors="replace").count("spawning server instance with name=")


def proxy_loads(port: int) -> int:
    return sum(status.get("loads", 0) for status in model_states(port).values())


# --- the cost of a load ---------------------------------------------------------------------------


def direct_start_ms(binary: str, model_path: str, plan: SwapPlan) -> float:
    """llama-server started with the flags the proxy gives it, to /health 200."""
    port = free_port()
    argv = [binary, "--model", model_path, "--host", "127.0.0.1", "--port", str(port), *plan.llama_args.split()]
    started = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not http_ok(f"http://127.0.0.1:{port}/health"):
            if process.poll() is not None:
                raise RuntimeError(f"llama-server {model_path} exited with {process.returncode}")
            time.sleep(HEALTH_POLL_S)
        return (time.perf_counter() - started) * 1000
    finally:
        process.terminate()
        process.wait(timeout=30)


def proxy_load_ms(port: int, model: str) -> tuple[float, float]:
    """(POST /models/load's time, the supervisor's own start-to-health of that load), nothing else loaded."""
    before = model_states(port)[model].get("load_seconds", 0.0)
    started = time.perf_counter()
    status, answer = post_json(port, "/models/load", {"model": model})
    took = (time.perf_counter() - started) * 1000
    if status != 200 or not answer.get("success"):
        raise RuntimeError(f"POST /models/load {model}: {status} {answer}")
    child = (model_states(port)[model]["load_seconds"] - before) * 1000
    post_json(port, "/models/unload", {"model": model})
    return took, child


def load_timings(binary: str, folder: Path, port: int, plan: SwapPlan) -> list[LoadTiming]:
    """Each model loaded `load_runs` times each way, the two ways alternated (the machine's load drifts)."""
    for model in MODELS:
        post_json(port, "/models/unload", {"model": model})
    timings = [LoadTiming(model) for model in MODELS]
    for _ in range(plan.load_runs):
        for timing in timings:
            timing.direct_ms.append(direct_start_ms(binary, str((folder / f"{timing.model}.gguf").resolve()), plan))
            took, child = proxy_load_ms(port, timing.model)
            timing.proxy_ms.append(took)
            timing.proxy_child_ms.append(child)
    return timings


# --- an agent turn after a swap -------------------------------------------------------------------


def agent_proxy(binary: str, smollm2: str, gemma: str, slot_save: bool, slot_dir: str) -> Service:
    """SmolLM2 with the context the turn needs (slot_save or not) and gemma, one loaded at a time."""
    config = Path(slot_dir) / f"agent-{slot_save}.yaml"
    config.write_text(
        json.dumps(
            {
                "models": {
                    MODELS[0]: {"model": smollm2, "args": list(AGENT_ARGS), "slot_save": slot_save},
                    MODELS[1]: {"model": gemma, "args": list(OTHER_ARGS)},
                }
            }
        )
    )  # JSON is YAML
    port = free_port()
    return Service(
        "proxy-agent",
        [
            sys.executable,
            "-m",
            "api_like_oai",
            "--config",
            str(config),
            "--llama-server",
            binary,
            "--max-loaded",
            "1",
            "--slot-save-dir",
            slot_dir,
            "--port",
            str(port),
        ],
        port,
        ready_path="/v1/models",
    )


def agent_body() -> dict:
    """The recorded turn for SmolLM2, not streamed, answered in at most 8 tokens, cut to fit (AGENT_TURN)."""
    body = dict(agent_turns.load(AGENT_TURN)["body"], model=MODELS[0], stream=False, max_output_tokens=8)
    body["tools"] = [tool for tool in body.get("tools", ()) if tool.get("name") in AGENT_KEPT_TOOLS]
    body["input"] = body["input"][AGENT_DROPPED_ITEMS:]
    return body


def replayable(port: int, body: dict) -> tuple[dict, list[str]]:
    """The body less the parts the proxy still refuses (agent_turns.replayable); probed with a one-line
    input, so no probe reads the turn's prompt."""

    def accepted(candidate: dict) -> bool:
        return post_json(port, "/v1/responses", {**candidate, "input": "Say hi."})[0] == 200

    return agent_turns.replayable(body, accepted)


def agent_turn(port: int, body: dict) -> tuple[float, int, int]:
    """(ms, prompt tokens, of them cached) of one replay of the turn."""
    started = time.perf_counter()
    status, answer = post_json(port, "/v1/responses", body)
    if status != 200:
        raise RuntimeError(f"the agent turn was answered {status}: {answer}")
    usage = answer.get("usage") or {}
    return (
        (time.perf_counter() - started) * 1000,
        usage.get("input_tokens", 0),
        (usage.get("input_tokens_details") or {}).get("cached_tokens", 0),
    )


def timed_load(port: int, model: str) -> float:
    started = time.perf_counter()
    status, answer = post_json(port, "/models/load", {"model": model})
    if status != 200:
        raise RuntimeError(f"POST /models/load {model}: {status} {answer}")
    return (time.perf_counter() - started) * 1000


def swapped_turn(port: int, body: dict, slot_save: bool) -> AgentSwapTurn:
    """Cold, warm, then a swap to the other model (which answers once) and back, then the turn again."""
    timed_load(port, MODELS[0])
    cold_ms, prompt_tokens, _ = agent_turn(port, body)
    warm_ms, _, _ = agent_turn(port, body)
    swap_out_ms = timed_load(port, MODELS[1])
    stream_chat(port, MODELS[1], 8)
    swap_back_ms = timed_load(port, MODELS[0])
    after_ms, _, cached = agent_turn(port, body)
    return AgentSwapTurn(slot_save, prompt_tokens, cold_ms, warm_ms, swap_out_ms, swap_back_ms, after_ms, cached)


def agent_after_swap(binary: str, smollm2: str, gemma: str, progress) -> tuple[str, list[AgentSwapTurn]]:
    """The turn without slot_save, then with it, each on a proxy of its own (no cache carries over)."""
    slot_dir, body, turns, removed = tempfile.mkdtemp(prefix="api-like-oai-bench-slots-"), agent_body(), [], []
    try:
        for slot_save in (False, True):
            progress(f"swaps: an agent turn after a swap, slot_save {str(slot_save).lower()}")
            service = agent_proxy(binary, smollm2, gemma, slot_save, slot_dir).start()
            try:
                if not slot_save:  # probed here, then unloaded: the cold turn finds nothing of the probes
                    body, removed = replayable(service.port, body)
                    post_json(service.port, "/models/unload", {"model": MODELS[0]})
                turns.append(swapped_turn(service.port, body, slot_save))
            finally:
                service.stop()
    finally:
        shutil.rmtree(slot_dir, ignore_errors=True)  # the saved slots and the configs
    cut = ", ".join(["its base instructions (the first developer message)", *removed])
    return f"{AGENT_TURN}.json with only the tools {', '.join(AGENT_KEPT_TOOLS)}, without {cut}", turns


# --- the row ----------------------------------------------------------------------------------------


def load_average() -> str:
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def measure_router(binary: str, folder: Path, plan: SwapPlan, result: SwapsResult, progress, open_loop: bool = False) -> None:
    service = router(binary, folder, plan)
    name = "router open" if open_loop else "router"
    progress(f"swaps: router mode, {_workload_words(plan, open_loop)}")
    setup = SwapSetup(
        name,
        " ".join(["llama-server", *service.argv[1:2], "DIR", *service.argv[3:5], *plan.llama_args.split()]),
        0,
        load_average(),
    )
    service.start()
    try:
        result.requests += (run_open_loop if open_loop else run_workload)(name, service.port, plan)
    finally:
        service.stop()
    setup.loads = router_loads(service.log_path)
    result.setups.append(setup)


def measure_proxy(
    binary: str, folder: Path, plan: SwapPlan, result: SwapsResult, progress, with_loads: bool = True, open_loop: bool = False
) -> None:
    budget = budget_for_one(folder, plan)
    service = proxy(binary, folder, plan, budget)
    name = "proxy open" if open_loop else "proxy"
    progress(f"swaps: the proxy, budget {budget} MiB, {_workload_words(plan, open_loop)}")
    setup = SwapSetup(
        name, f"api-like-oai --models-dir DIR --llama-args '{plan.llama_args}' --memory-budget {budget}", 0, load_average()
    )
    service.start()
    try:
        result.requests += (run_open_loop if open_loop else run_workload)(name, service.port, plan)
        setup.loads, setup.stage_s = proxy_loads(service.port), proxy_stages(service.port)
        if with_loads:
            progress(f"swaps: the cost of a load, {plan.load_runs} of each model each way")
            result.loads = load_timings(binary, folder, service.port, plan)
    finally:
        service.stop()
    result.setups.append(setup)


def _workload_words(plan: SwapPlan, open_loop: bool) -> str:
    if open_loop:
        return f"open loop, {plan.open_rate:g} requests/s (4 of 5 for {MODELS[0]}) for {plan.seconds:g} s"
    return f"{plan.clients} clients alternating 2 models for {plan.seconds:g} s"


def proxy_stages(port: int) -> dict[str, float]:
    """Seconds each stage of a swap took, all the swaps of the window and both models together (the
    supervisor's own clock: `stage_seconds` in each model's status)."""
    totals: dict[str, float] = {}
    for status in model_states(port).values():
        for stage, seconds in status.get("stage_seconds", {}).items():
            totals[stage] = totals.get(stage, 0.0) + seconds
    return totals


def swaps_row(binary: str, smollm2: str, gemma: str, plan: SwapPlan, progress) -> SwapsResult:
    folder = models_dir(smollm2, gemma)
    result = SwapsResult(
        list(MODELS),
        plan.clients,
        plan.seconds,
        plan.max_tokens,
        plan.llama_args,
        measured_at=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        open_rate=plan.open_rate,
    )
    try:
        for window, setup in enumerate(plan.order):
            if setup == "router":
                measure_router(binary, folder, plan, result, progress)
            else:
                measure_proxy(binary, folder, plan, result, progress, with_loads=setup not in plan.order[:window])
        for setup in plan.open_order:
            if setup == "router":
                measure_router(binary, folder, plan, result, progress, open_loop=True)
            else:
                measure_proxy(binary, folder, plan, result, progress, with_loads=False, open_loop=True)
        if plan.agent:
            result.agent_turn, result.agent = agent_after_swap(binary, smollm2, gemma, progress)
    finally:
        for link in folder.iterdir():
            link.unlink()
        folder.rmdir()
    return result


def ttft_summary(requests: list[SwapRequest]) -> tuple[float, float]:
    """(p50, max) TTFT in ms of the answered requests."""
    ttfts = [r.ttft_ms for r in requests if r.ok]
    return percentile(ttfts, 0.5), max(ttfts, default=float("nan"))
