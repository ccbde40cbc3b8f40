"""One child of the supervisor (supervisor/process.py), with small stand-in processes: an idle child is
killed at once, a busy one asked to stop; a child that prints a line is polled for health at once."""

from __future__ import annotations

import asyncio
import sys
import time

from api_like_oai.supervisor import process
from api_like_oai.supervisor.process import Child

from ..servers import free_port

DEAF_TO_SIGTERM = [
    sys.executable,
    "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)",
]
# Listens after a moment, says so on its output, then answers /health 200 (as llama-server logs "model loaded").
READY_AFTER_A_MOMENT = """
import http.server, sys, time
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *args):
        pass
time.sleep(0.3)
server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health)
print("listening", flush=True)
server.serve_forever()
"""


def run(coroutine):
    return asyncio.run(coroutine)


async def stopped_after(idle: bool, timeout: float) -> tuple[float, int]:
    child = Child("deaf/0", DEAF_TO_SIGTERM, {}, free_port())
    await child.spawn()
    while not child.lines:  # its SIGTERM handler is set once it printed
        await asyncio.sleep(0.01)
    began = time.monotonic()
    await child.stop(timeout, idle=idle)
    return time.monotonic() - began, child.exit_code


def test_an_idle_child_is_killed_at_once_and_reaped():
    took, code = run(stopped_after(idle=True, timeout=5))
    assert code == -9 and took < 2  # SIGKILL, not SIGTERM and its grace period


def test_a_child_that_may_be_busy_is_asked_first_then_killed_after_the_timeout():
    took, code = run(stopped_after(idle=False, timeout=0.5))
    assert code == -9 and took >= 0.5  # SIGTERM was ignored: the grace period passed first


async def ready_after(port: int) -> float:
    child = Child("ready/0", [sys.executable, "-c", READY_AFTER_A_MOMENT, str(port)], {}, port)
    await child.spawn()
    began = time.monotonic()
    try:
        await child.wait_ready(30)
        return time.monotonic() - began
    finally:
        await child.stop(5, idle=True)


def test_a_line_from_a_starting_child_has_its_health_polled_at_once(monkeypatch):
    monkeypatch.setattr(process, "HEALTH_POLL_SECONDS", 5.0)  # a poll by the clock alone would come 5 s late
    took = run(ready_after(free_port()))
    assert took < 3
