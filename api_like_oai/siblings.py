"""Siblings: the other worker processes of one server, for what must reach all of them.

With --workers N a request lands in one worker, but /v1/internal/stop-generation must end the
generations of every worker. Each worker binds a Unix datagram socket `worker-<pid>.sock` in the
server's run directory (made by gunicorn's master, see server.py) and answers b"stop" with how
many generations it stopped. Works the same with threads and with gevent (patched sockets).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable

log = logging.getLogger("api_like_oai")

REPLY_TIMEOUT = 2.0
_asks = itertools.count()


class Siblings:
    def __init__(self, run_dir: str, stop_local: Callable[[], int]):
        self.run_dir = run_dir
        self.stop_local = stop_local
        self.path = os.path.join(run_dir, f"worker-{os.getpid()}.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.listener.bind(self.path)
        threading.Thread(target=self._answer, name="siblings", daemon=True).start()

    def _answer(self) -> None:
        while True:
            message, sender = self.listener.recvfrom(64)
            if message == b"stop" and sender:
                with contextlib.suppress(OSError):  # the asker gave up waiting
                    self.listener.sendto(str(self.stop_local()).encode(), sender)

    def others(self) -> list[str]:
        return [os.path.join(self.run_dir, name) for name in os.listdir(self.run_dir)
                if name.startswith("worker-") and name.endswith(".sock")
                and os.path.join(self.run_dir, name) != self.path]

    def stop_all(self) -> int:
        """Ask every other worker to stop its generations; how many they stopped together."""
        reply_path = os.path.join(self.run_dir, f"ask-{os.getpid()}-{next(_asks)}.sock")
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as asker:
            asker.bind(reply_path)
            try:
                asked = sum(self._send(asker, path) for path in self.others())
                return self._collect(asker, asked)
            finally:
                os.unlink(reply_path)

    @staticmethod
    def _send(asker: socket.socket, path: str) -> bool:
        try:
            asker.sendto(b"stop", path)
            return True
        except (ConnectionRefusedError, FileNotFoundError):
            return False  # a worker that just exited

    @staticmethod
    def _collect(asker: socket.socket, asked: int) -> int:
        stopped, deadline = 0, time.monotonic() + REPLY_TIMEOUT
        for _ in range(asked):
            asker.settimeout(max(deadline - time.monotonic(), 0.001))
            try:
                stopped += int(asker.recv(64))
            except (TimeoutError, ValueError):
                log.warning("a worker did not answer stop-generation within %gs", REPLY_TIMEOUT)
                break
        return stopped
