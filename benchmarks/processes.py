"""The processes under test: start them, wait until they serve, stop them, and read their CPU
time and memory from /proc (a process and all its descendants, e.g. gunicorn's master and workers)."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def system_busy_seconds() -> float:
    """CPU time all cores together spent busy since boot (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as stat:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, stat.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - loopback only
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


@dataclass
class Service:
    """A server we start on 127.0.0.1:port from `argv`; its output goes to a log file."""

    name: str
    argv: list[str]
    port: int
    ready_path: str = "/health"
    env: dict[str, str] | None = None  # added to this process's environment
    cwd: Path | None = None  # where it runs (the proxy at another revision: that revision's checkout)
    process: subprocess.Popen | None = None
    log_path: Path = field(init=False)

    def __post_init__(self):
        self.log_path = Path(tempfile.gettempdir()) / f"api-like-oai-bench-{self.name}-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120.0) -> Service:
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env} if self.env else None,
                cwd=self.cwd,
            )
        deadline = time.monotonic() + timeout
        while not http_ok(self.url + self.ready_path):
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}; see {self.log_path}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} not ready after {timeout}s; see {self.log_path}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def tree(self) -> ProcessTree:
        return ProcessTree(self.process.pid)


class TasksCpu:
    """The CPU time some processes (`pids`, found once: e.g. a server's master and workers) have used, in
    nanoseconds: the scheduler's exact figure (each thread's /proc/PID/task/TID/schedstat), where
    /proc/PID/stat counts 10 ms ticks, 2.5% of a quarter-second window of one core."""

    def __init__(self, pids: list[int]):
        self.tasks = [Path(f"/proc/{pid}/task") for pid in pids]

    def nanoseconds(self) -> int:
        total = 0
        for tasks in self.tasks:
            try:
                threads = os.listdir(tasks)
            except OSError:
                continue  # the process ended
            for task in threads:
                try:
                    total += int((tasks / task / "schedstat").read_bytes().split()[0])
                except (OSError, IndexError):
                    continue  # the thread ended while we looked
        return total


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat from the field after the command name on (field 3, the state, is [0])."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return stat.read().rsplit(b")", 1)[1].split()


def _status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def _pss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


@dataclass
class ProcessTree:
    """A process and its descendants, found afresh on every reading."""

    root_pid: int

    def pids(self) -> list[int]:
        parents = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    parents[int(entry)] = int(_stat_fields(int(entry))[1])
                except (OSError, IndexError):
                    continue  # the process ended while we looked
        tree = [self.root_pid]
        for pid in tree:
            tree += [child for child, parent in parents.items() if parent == pid]
        return tree

    def _sum(self, reading) -> float:
        total = 0
        for pid in self.pids():
            try:
                total += reading(pid)
            except OSError:
                continue
        return total

    def cpu_seconds(self) -> float:
        """User + system CPU time of every live process in the tree."""
        return self._sum(lambda pid: sum(int(value) for value in _stat_fields(pid)[11:13]) / CLOCK_TICKS)

    def rss_mb(self) -> float:
        """Resident memory summed over the tree (pages shared after fork are counted in each)."""
        return self._sum(lambda pid: _status_kib(pid, "VmRSS")) * 1024 / 1e6

    def rss_per_process_mb(self) -> list[float]:
        """Resident memory of each process, the root first."""
        return [_status_kib(pid, "VmRSS") * 1024 / 1e6 for pid in self.pids()]

    def peak_rss_mb(self) -> float:
        """The sum of each process's peak resident memory (VmHWM)."""
        return self._sum(lambda pid: _status_kib(pid, "VmHWM")) * 1024 / 1e6

    def pss_mb(self) -> float:
        """Proportional set size: shared pages split between the processes sharing them."""
        return self._sum(_pss_kib) * 1024 / 1e6
