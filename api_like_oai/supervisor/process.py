"""One llama-server child of the supervisor: spawned so that it dies with the supervisor (a parent-death
signal, and a session of its own so a terminal's Ctrl-C reaches the proxy, not it), health-checked
while it starts, stopped with SIGTERM then SIGKILL (SIGKILL alone once idle); its output logged with
its name and its last lines kept for error messages and /v1/internal/model/logs."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import signal
import time
from collections import deque

log = logging.getLogger("api_like_oai.supervisor")

LOG_LINES_KEPT = 200
HEALTH_POLL_SECONDS = 0.02  # llama-server answers /health in microseconds: poll often, start sooner
# and at once on each line it prints while starting (it logs as it becomes ready), at most this often
HEALTH_POLL_MIN_SECONDS = 0.002
PR_SET_PDEATHSIG = 1


class StartFailed(Exception):
    """A child that exited or timed out while starting; the message carries its last log lines."""


class Child:
    """One replica's llama-server process."""

    def __init__(self, label: str, argv: list[str], env: dict[str, str], port: int):
        self.label, self.argv, self.env, self.port = label, argv, env, port
        self.lines: deque[str] = deque(maxlen=LOG_LINES_KEPT)
        self.process: asyncio.subprocess.Process | None = None
        self.stopping = False
        self.noticed = False  # its unasked exit has been handled (supervisor._lost)
        self._reader: asyncio.Task | None = None
        self._printed = asyncio.Event()  # a line came since the last health poll

    @property
    def api_key(self) -> str:
        """The key this llama-server answers (its LLAMA_API_KEY: random per start, only the proxy's)."""
        return self.env.get("LLAMA_API_KEY", "")

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def exit_code(self) -> int | None:
        return self.process.returncode if self.process else None

    async def spawn(self) -> None:
        parent = os.getpid()
        self.process = await asyncio.create_subprocess_exec(
            *self.argv,
            env={**os.environ, **self.env},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            preexec_fn=lambda: _die_with(parent),
            start_new_session=True,
        )
        self._reader = asyncio.create_task(self._read_output())
        log.info("[%s] started (pid %d): %s", self.label, self.process.pid, " ".join(self.argv))

    async def wait_ready(self, timeout: float, on_stage=None) -> None:
        """Until /health answers 200; StartFailed if the process exits first or `timeout` passes."""
        deadline = time.monotonic() + timeout
        stage = None
        while time.monotonic() < deadline:
            if self.process.returncode is not None:
                await self._drain_output()
                raise StartFailed(
                    f"llama-server for {self.label} exited with code {self.process.returncode} "
                    f"while starting; its last lines:\n{self.tail(20)}"
                )
            self._printed.clear()
            status, body = await http_request(self.port, "GET", "/health")
            if status == 200:
                return
            now_stage = "loading model" if status == 503 else "starting"
            if on_stage and now_stage != stage:
                stage = now_stage
                on_stage(stage)
            await self._next_line_or(HEALTH_POLL_SECONDS)
        raise StartFailed(
            f"llama-server for {self.label} was not ready after {timeout:g} s (load_timeout); its last lines:\n{self.tail(20)}"
        )

    async def _next_line_or(self, seconds: float) -> None:
        """Until the child prints a line (it logs "model loaded" as /health turns 200) or `seconds` pass,
        counting the lines since the last poll began."""
        await asyncio.sleep(HEALTH_POLL_MIN_SECONDS)
        if not self._printed.is_set():
            try:
                await asyncio.wait_for(self._printed.wait(), seconds - HEALTH_POLL_MIN_SECONDS)
            except asyncio.TimeoutError:
                pass

    async def stop(self, timeout: float, *, idle: bool = False) -> None:
        """SIGTERM, then SIGKILL after `timeout` seconds; returns once the process is gone. An `idle` one
        (no request in flight, its slots saved: nothing in it is left to lose) gets SIGKILL at once:
        llama-server takes ~150 ms to shut down after SIGTERM, on every swap, for nothing kept."""
        self.stopping = True
        if self.process is None or self.process.returncode is not None:
            return
        self.process.send_signal(signal.SIGKILL if idle else signal.SIGTERM)
        try:
            await asyncio.wait_for(self.process.wait(), timeout)
        except asyncio.TimeoutError:
            log.warning("[%s] did not stop within %g s of SIGTERM: killed", self.label, timeout)
            self.process.kill()
            await self.process.wait()
        await self._drain_output()

    def kill_now(self) -> None:
        """SIGKILL without waiting: the supervisor itself is going away."""
        if self.process is not None and self.process.returncode is None:
            self.process.kill()

    def tail(self, count: int) -> str:
        return "\n".join(list(self.lines)[-count:])

    async def _read_output(self) -> None:
        stream = self.process.stdout
        while True:
            line = await stream.readline()
            if not line:
                return
            text = line.decode("utf-8", "replace").rstrip()
            self.lines.append(text)
            self._printed.set()
            log.info("[%s] %s", self.label, text)

    async def _drain_output(self) -> None:
        if self._reader is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._reader), 2)
            except asyncio.TimeoutError:
                pass


def record_children(pid_file: str, children: list[Child]) -> None:
    """Note the llama-servers running now where the next supervisor looks for leftovers (stop_leftovers)."""
    with open(pid_file + ".new", "w", encoding="utf-8") as file:
        file.writelines(
            json.dumps({"pid": child.pid, "argv": child.argv}) + "\n"
            for child in children
            if child.pid is not None and child.exit_code is None
        )
    os.replace(pid_file + ".new", pid_file)


def stop_leftovers(pid_file: str, patience: float = 10.0) -> list[int]:
    """A supervisor started in place of one that died: the llama-servers its predecessor started that
    still run (their parent-death signal kills them, but maybe not yet) are killed and waited for, so
    that none serves twice and no port is still held when a model starts again. A process counts as
    one of them only with the very command line recorded (its --port is this proxy's)."""
    try:
        with open(pid_file, encoding="utf-8") as file:
            recorded = [json.loads(line) for line in file if line.strip()]
    except (OSError, ValueError):
        return []
    found = [entry["pid"] for entry in recorded if _running(entry["pid"], entry["argv"])]
    for pid in found:
        log.warning("a llama-server of the previous supervisor still runs (pid %d): killed", pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + patience
    while any(_running(pid) for pid in found) and time.monotonic() < deadline:
        time.sleep(0.02)
    os.unlink(pid_file)
    return found


def _running(pid: int, argv: list[str] | None = None) -> bool:
    """Whether `pid` is alive (not a zombie), with the command line `argv` if given."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            if file.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                return False
        if argv is None:
            return True
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            return file.read().split(b"\0")[:-1] == [arg.encode() for arg in argv]
    except (OSError, IndexError):
        return False


def _die_with(parent: int) -> None:
    """In the child before exec: be killed when the supervisor dies, however it dies (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the supervisor died before prctl took effect
        os._exit(1)


async def http_request(
    port: int, method: str, path: str, body: bytes = b"", timeout: float = 5.0, api_key: str = ""
) -> tuple[int, bytes]:
    """(status, body) of one HTTP/1.1 request to 127.0.0.1:`port` (with `api_key` as its bearer); (0, b"")
    if it cannot connect."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
    except (OSError, asyncio.TimeoutError):
        return 0, b""
    try:
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            + (f"Authorization: Bearer {api_key}\r\n" if api_key else "")
            + "\r\n"
        )
        writer.write(head.encode() + body)
        answer = await asyncio.wait_for(reader.read(), timeout)
    except (OSError, asyncio.TimeoutError):
        return 0, b""
    finally:
        writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    parts = status_line.split()
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    return status, rest.partition(b"\r\n\r\n")[2]
