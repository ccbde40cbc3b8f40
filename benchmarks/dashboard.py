"""The dashboard row (issue 26): the proxy's CPU per relayed token with the dashboard's event stream
(/v1/internal/events) open against closed, on paced streams (a token every 8 ms, as a real model
sends them, each waking the proxy). Windows alternate closed, open, open, closed, ... so that drift
in the machine's load falls on both sides alike; the row compares the medians. Target: ≤ 5% more.

Kept in a module of its own (the measurement and its report section) and hooked into report.py and
__main__.py with a line each; its result and target are in results.py, with the others."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import os
import statistics
import threading
import time

from .capacity import CapacityRig
from .paced import paced_row
from .results import DashboardResult

CLIENTS = 16
INTERVAL_MS = 8.0
IDLE_SECONDS = 5.0


class DashboardReader:
    """One open dashboard: a thread reading /v1/internal/events until stopped, counting its frames."""

    def __init__(self, port: int):
        self.port, self.frames, self._stop = port, 0, threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)

    def __enter__(self) -> DashboardReader:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join(5)

    def _read(self) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
        connection.request("GET", "/v1/internal/events")
        response = connection.getresponse()
        while not self._stop.is_set():
            line = response.readline()  # a frame comes every second: the timeout is never reached
            if line.startswith(b"event: "):
                self.frames += 1
            if not line:
                break
        connection.close()


def dashboard_row(make_fake, make_proxy, plan, progress, rounds: int = 4) -> DashboardResult:
    """`rounds` pairs of windows (closed and open, alternating which comes first) on one proxy;
    `make_fake(interval_ms)` and `make_proxy(upstream_url)` make the services (__main__.py's)."""
    fake = make_fake(INTERVAL_MS).start()
    served = make_proxy(fake.url).start()
    result = DashboardResult(CLIENTS, INTERVAL_MS, 1, load_average=", ".join(f"{v:.2f}" for v in os.getloadavg()))
    try:
        for opened in (False, True, True, False):  # the stream's own cost per second, nothing else to do
            with DashboardReader(served.port) if opened else contextlib.nullcontext():
                result.idle_cpu_ms_per_s.setdefault("open" if opened else "closed", []).append(idle_cpu_ms_per_s(served))
        rig = CapacityRig(served, fake, plan)
        for round_number in range(rounds):
            for opened in (False, True) if round_number % 2 == 0 else (True, False):
                progress(
                    f"dashboard: {CLIENTS} paced streams, event stream {'open' if opened else 'closed'} "
                    f"(round {round_number + 1} of {rounds})"
                )
                if opened:
                    with DashboardReader(served.port) as reader:
                        row = asyncio.run(paced_row(rig, "gevent", CLIENTS, INTERVAL_MS))
                    result.frames_received += reader.frames
                    result.open_seconds += row.seconds
                    result.open_us_per_token.append(row.proxy_cpu_us_per_token)
                else:
                    row = asyncio.run(paced_row(rig, "gevent", CLIENTS, INTERVAL_MS))
                    result.closed_us_per_token.append(row.proxy_cpu_us_per_token)
                    result.tokens_per_s.append(row.tokens_per_s)
                result.errors += row.errors
    finally:
        served.stop()
        fake.stop()
    return result


def idle_cpu_ms_per_s(served) -> float:
    time.sleep(1.0)  # past the first frames (the stream's start, the first history read)
    before, started = served.tree().cpu_seconds(), time.perf_counter()
    time.sleep(IDLE_SECONDS)
    return (served.tree().cpu_seconds() - before) * 1000 / (time.perf_counter() - started)


def dashboard_section(results) -> str:
    r = results.dashboard
    if r is None:
        return ""
    windows = ", ".join(
        f"{closed:.1f} / {opened:.1f}" for closed, opened in zip(r.closed_us_per_token, r.open_us_per_token, strict=False)
    )
    return "\n\n".join(
        [
            "## The dashboard's event stream (issue 26)",
            f"{r.clients} chat streams against the fake upstream pacing a token every {r.interval_ms:g} ms, one "
            f"worker; the proxy's CPU per relayed token (from /proc) with {r.dashboards} dashboard event stream open "
            f"and with none, in alternating windows (closed / open, µs per token): {windows}. "
            f"Medians: {statistics.median(r.closed_us_per_token):.1f} closed, {statistics.median(r.open_us_per_token):.1f} "
            f"open, {r.added_share:+.1%}. The open stream received {r.frames_received} events in {r.open_seconds:.0f} s "
            f"of windows (one `live` a second, `history` when it changed); {r.errors} failed requests. With no "
            f"traffic the proxy used {statistics.median(r.idle_cpu_ms_per_s['closed']):.2f} ms of CPU a second with "
            f"the stream closed and {statistics.median(r.idle_cpu_ms_per_s['open']):.2f} ms with it open (medians of "
            f"two 5 s windows each): the stream's own cost is {r.implied_share:+.1%} of the proxy's CPU in the "
            f"closed windows ({statistics.median(r.tokens_per_s):,.0f} tokens/s). "
            f"Load average at the start: {r.load_average}.",
        ]
    )
