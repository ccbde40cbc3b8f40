"""Part 4: start-up to the first served request, and idle memory; and start-up with a --models-dir of
ten real GGUF files (issue 42): to the first answered /v1/models, and each file's header read cold."""

from __future__ import annotations

import http.client
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from .processes import Service, free_port, http_ok
from .results import (
    ModelsDirStartupResult,
    StartupResult,
)
from .workload import PATHS, generation_body


def first_served_request(port: int, process: subprocess.Popen, timeout: float = 30.0) -> None:
    """Block until the proxy answers a completion with 200 (connection refused is retried)."""
    body = json.dumps(generation_body("completions", False, tokens=4))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the proxy exited with {process.returncode} during start-up")
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            connection.request("POST", PATHS["completions"], body, {"Content-Type": "application/json"})
            if connection.getresponse().status == 200:
                return
        except ConnectionRefusedError:
            pass  # not listening yet
        finally:
            connection.close()
        time.sleep(0.005)
    raise TimeoutError(f"the proxy served nothing within {timeout}s")


def measure_startup(make_proxy: Callable[[], Service], runs: int) -> StartupResult:
    """Process start to the first answered request, `runs` times; idle memory after the last."""
    seconds, idle_rss, idle_pss, per_process = [], math.nan, math.nan, []
    for _ in range(runs):
        proxy = make_proxy()
        started = time.perf_counter()
        with proxy.log_path.open("wb") as log:
            proxy.process = subprocess.Popen(proxy.argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            first_served_request(proxy.port, proxy.process)
            seconds.append(time.perf_counter() - started)
            time.sleep(1.0)  # let the worker settle before reading its memory
            tree = proxy.tree()
            idle_rss, idle_pss, per_process = tree.rss_mb(), tree.pss_mb(), tree.rss_per_process_mb()
        finally:
            proxy.stop()
    return StartupResult(seconds, idle_rss, idle_pss, per_process)


MODELS_DIR_COPIES = 5  # names for each of the two models: ten files


def measure_models_dir_startup(binary: str, smollm2: str, gemma: str, runs: int) -> ModelsDirStartupResult:
    """`api-like-oai --models-dir` of ten GGUF files (SmolLM2 and gemma-3-270m, five names each), each
    run with a data directory of its own (no header read before): process start to the first
    /v1/models answered with all ten, alternated with a folder of one file; then each file's header
    read by itself (no cache)."""
    from api_like_oai.gguf_header import read_header

    folder = Path(tempfile.mkdtemp(prefix="api-like-oai-bench-models-dir-"))
    for number in range(MODELS_DIR_COPIES):
        (folder / f"smollm2-{number}.gguf").symlink_to(smollm2)
        (folder / f"gemma3-{number}.gguf").symlink_to(gemma)
    single = Path(tempfile.mkdtemp(prefix="api-like-oai-bench-models-dir-one-"))
    (single / "smollm2-0.gguf").symlink_to(smollm2)
    seconds, one_file_seconds = [], []
    for _ in range(runs):  # alternated with one file, the same proxy's start-up by itself at this load
        seconds.append(_models_dir_start(binary, folder))
        one_file_seconds.append(_models_dir_start(binary, single))
    header_ms = []
    for path in sorted(folder.iterdir()):
        started = time.perf_counter()
        read_header(str(path))
        header_ms.append((time.perf_counter() - started) * 1000)
    return ModelsDirStartupResult(len(header_ms), seconds, header_ms, one_file_seconds)


def _models_dir_start(binary: str, folder: Path, timeout: float = 120.0) -> float:
    port, data_home = free_port(), tempfile.mkdtemp(prefix="api-like-oai-bench-data-")
    proxy = Service(
        "proxy-models-dir",
        [sys.executable, "-m", "api_like_oai", "--models-dir", str(folder), "--llama-server", binary, "--port", str(port)],
        port,
        ready_path="/v1/models",
        env={"XDG_DATA_HOME": data_home},
    )
    started = time.perf_counter()
    with proxy.log_path.open("wb") as log:
        proxy.process = subprocess.Popen(proxy.argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **proxy.env})
    try:
        while not http_ok(proxy.url + "/v1/models"):
            if proxy.process.poll() is not None or time.perf_counter() - started > timeout:
                raise RuntimeError(f"the proxy did not answer /v1/models; see {proxy.log_path}")
            time.sleep(0.005)
        return time.perf_counter() - started
    finally:
        proxy.stop()
