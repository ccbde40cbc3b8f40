"""Siblings: the other worker processes of one server, for what must reach all of them.

With --workers N a request lands in one worker, but /v1/internal/stop-generation must end the
generations of every worker, and the dashboard lists and stops every worker's requests. Each worker
binds a Unix datagram socket `worker-<pid>.sock` in the server's run directory (made by gunicorn's
master, see server.py) and answers the questions in its `answers`: a datagram {"ask": name, "arg": x}
gets one or more datagrams {"value": v, "last": bool} back (a long list is cut in parts, each a
datagram well under the kernel's limit). Works the same with threads and with gevent (patched sockets).

Why the workers answer for themselves rather than writing their requests somewhere shared (SQLite,
Redis, the supervisor): a request's live state (its phase, its token counts) changes on every token and
its stop switch is a threading.Event in the worker's memory; asking the owner when a dashboard looks
(once a second) costs nothing on the token path, and needs no store at all.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable

log = logging.getLogger("api_like_oai")

REPLY_TIMEOUT = 2.0
PART_ITEMS = 100  # a list's items per reply datagram (a live request's row is about 400 bytes)
MAX_DATAGRAM = 1 << 20  # what a reader accepts; the kernel's limit (wmem_default, ~200 KiB) is lower
_asks = itertools.count()


class Siblings:
    def __init__(self, run_dir: str, answers: dict[str, Callable[[object], object]]):
        """`answers`: what this worker answers another's ask with, by its name; a list value is sent in parts."""
        self.run_dir = run_dir
        self.answers = answers
        self.path = os.path.join(run_dir, f"worker-{os.getpid()}.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.listener.bind(self.path)
        threading.Thread(target=self._answer, name="siblings", daemon=True).start()

    def _answer(self) -> None:
        while True:
            message, sender = self.listener.recvfrom(MAX_DATAGRAM)
            try:
                question = json.loads(message)
                value = self.answers[question["ask"]](question.get("arg"))
            except (ValueError, KeyError, TypeError):
                log.warning("a worker's ask could not be answered: %r", message[:200])
                continue
            if sender:
                with contextlib.suppress(OSError):  # the asker gave up waiting
                    for part in _parts(value):
                        self.listener.sendto(part, sender)

    def others(self) -> list[str]:
        return [
            os.path.join(self.run_dir, name)
            for name in os.listdir(self.run_dir)
            if name.startswith("worker-") and name.endswith(".sock") and os.path.join(self.run_dir, name) != self.path
        ]

    def ask(self, name: str, arg: object = None) -> list:
        """Every other worker's answer to `name`: one value each (a list answer's parts joined), in no
        order; a worker that does not answer within REPLY_TIMEOUT is left out."""
        reply_path = os.path.join(self.run_dir, f"ask-{os.getpid()}-{next(_asks)}.sock")
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as asker:
            asker.bind(reply_path)
            try:
                question = json.dumps({"ask": name, "arg": arg}).encode()
                asked = sum(self._send(asker, path, question) for path in self.others())
                return self._collect(asker, asked, name)
            finally:
                os.unlink(reply_path)

    def tell(self, name: str, arg: object = None) -> int:
        """Send `name` to every other worker without waiting: its datagram has no return address, so
        nothing comes back (for what must not hold a request up, as a preemption); how many it reached.
        A worker whose queue of datagrams is full misses it."""
        question = json.dumps({"ask": name, "arg": arg}).encode()
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as teller:
            teller.setblocking(False)
            return sum(self._send(teller, path, question) for path in self.others())

    def stop_all(self) -> int:
        """Ask every other worker to stop its generations; how many they stopped together."""
        return sum(self.ask("stop"))

    @staticmethod
    def _send(asker: socket.socket, path: str, question: bytes) -> bool:
        try:
            asker.sendto(question, path)
            return True
        except (ConnectionRefusedError, FileNotFoundError):
            return False  # a worker that just exited
        except BlockingIOError:
            return False  # told (not asked) a worker whose queue is full

    @staticmethod
    def _collect(asker: socket.socket, asked: int, name: str) -> list:
        answers: dict[str, object] = {}  # by the answering worker's socket
        finished, deadline = 0, time.monotonic() + REPLY_TIMEOUT
        while finished < asked:
            asker.settimeout(max(deadline - time.monotonic(), 0.001))
            try:
                data, sender = asker.recvfrom(MAX_DATAGRAM)
                reply = json.loads(data)
            except (TimeoutError, ValueError):
                log.warning("a worker did not answer %s within %gs", name, REPLY_TIMEOUT)
                break
            value = reply["value"]
            answers[sender] = answers.get(sender, []) + value if isinstance(value, list) else value
            finished += reply["last"]
        return list(answers.values())


def _parts(value: object) -> list[bytes]:
    """`value` as reply datagrams: a list in parts of PART_ITEMS, anything else whole."""
    if not isinstance(value, list):
        return [json.dumps({"value": value, "last": True}).encode()]
    starts = range(0, max(len(value), 1), PART_ITEMS)
    return [json.dumps({"value": value[start : start + PART_ITEMS], "last": start == starts[-1]}).encode() for start in starts]


class LaneMark:
    """Whether a worker of this server runs batch lines now, as a file in the run directory that the
    worker running them keeps while it does (`noted`, by its background generations' starts and ends):
    the other workers tell it of their requests (preemption) only then, for the cost of a stat."""

    def __init__(self, run_dir: str):
        self.path = os.path.join(run_dir, "batch-lines")
        self.own = 0  # this worker's background generations running
        self._lock = threading.Lock()

    def noted(self, delta: int) -> None:
        with self._lock:
            self.own += delta
            if self.own == 1 and delta > 0:
                with open(self.path, "w"):
                    pass
            elif self.own == 0:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)

    def elsewhere(self) -> bool:
        """Whether another worker runs batch lines now."""
        return self.own == 0 and os.path.exists(self.path)
