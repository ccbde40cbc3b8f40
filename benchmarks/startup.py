"""Part 4: start-up to the first served request, and idle memory."""

from __future__ import annotations

import http.client
import json
import math
import subprocess
import time
from collections.abc import Callable

from .processes import Service
from .results import (
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
