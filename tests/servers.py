"""Real processes for the tests: llama-server with the bundled model, and the proxy's own CLI."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]


def made_model(file_name: str, script: str) -> Path:
    """A test GGUF that `scripts/<script>` writes (random weights, not in the repository), written once into
    the provisioning cache beside the provisioned model."""
    cache = Path(os.environ.get("API_LIKE_OAI_CACHE") or Path.home() / ".cache" / "api-like-oai")
    path = cache / "models" / file_name
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(ROOT / "scripts" / script), str(path)], check=True)
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def parent_pids() -> dict[int, int]:
    """Every process's parent, from /proc."""
    parents = {}
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit():
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError):
            continue
    return parents


def children_of(pid: int) -> list[int]:
    return [child for child, parent in parent_pids().items() if parent == pid]


def descendants_of(pid: int) -> list[int]:
    """Every process under `pid` (children, theirs, ...), however they left its session."""
    parents, found, frontier = parent_pids(), [], [pid]
    while frontier:
        frontier = [child for child, parent in parents.items() if parent in frontier]
        found += frontier
    return found


def command_line(pid: int) -> list[str]:
    """The process's argv; [] once it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def kill_instance(process: subprocess.Popen) -> list[int]:
    """SIGKILL a proxy instance as a dying machine ends it: its master and its workers at once (what it
    started besides, a supervisor and its llama-servers, a fleet member, must die with it by themselves).
    The pids of everything it ran, to check that they are gone."""
    everything = [process.pid, *descendants_of(process.pid)]
    for pid in server_processes(process):
        os.kill(pid, signal.SIGKILL)
    process.wait()
    return everything


def server_processes(process: subprocess.Popen) -> list[int]:
    """A proxy instance's gunicorn master and workers (the children with its command line)."""
    return [process.pid, *(pid for pid in children_of(process.pid) if command_line(pid) == command_line(process.pid))]


def still_running(pids: list[int]) -> list[int]:
    """Those of `pids` that are running (not gone, not a zombie)."""
    running = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            running.append(pid)
    return running


def llama_servers_on(port: int) -> list[int]:
    """The pids of llama-server processes started with `--port port`."""
    found = []
    for pid in parent_pids():
        argv = command_line(pid)
        if argv and argv[0].endswith("llama-server") and "--port" in argv and argv[argv.index("--port") + 1] == str(port):
            found.append(pid)
    return found


# Every process the tests start inherits this variable (set by conftest.py), and passes it on to its
# own children: the run can then find what outlived it, even a process that left its parent's tree
# (llama-servers a supervisor starts in a session of their own, workers whose master was killed).
RUN_VARIABLE = "TEST_RUN_OF_API_LIKE_OAI"


def started_by_run(run: str) -> list[int]:
    """The live processes (not this one) whose environment holds RUN_VARIABLE=run."""
    marker = f"{RUN_VARIABLE}={run}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if (
                entry.name.isdigit()
                and int(entry.name) != os.getpid()
                and marker in (entry / "environ").read_bytes().split(b"\0")
            ):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def provisioned_paths() -> dict[str, str]:
    """LLAMA_SERVER and MODEL: from the environment, else from scripts/provision (cached builds)."""
    if os.environ.get("LLAMA_SERVER") and os.environ.get("MODEL"):
        return {"LLAMA_SERVER": os.environ["LLAMA_SERVER"], "MODEL": os.environ["MODEL"]}
    output = subprocess.run(
        [str(ROOT / "scripts" / "provision")],
        check=True,
        text=True,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHON": sys.executable},
    ).stdout
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line)


def bench_model_paths() -> dict[str, str]:
    """GEMMA_MODEL (gemma-3-270m, a 262k-token vocabulary): from the environment, else from
    scripts/provision-bench-models (cached)."""
    if os.environ.get("GEMMA_MODEL"):
        return {"GEMMA_MODEL": os.environ["GEMMA_MODEL"]}
    output = subprocess.run(
        [str(ROOT / "scripts" / "provision-bench-models")],
        check=True,
        text=True,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHON": sys.executable},
    ).stdout
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line)


def wait_until(ready, process: subprocess.Popen, what: str, timeout: float = 60.0) -> None:
    """Poll `ready()` until true; fail at once if `process` died, or after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with code {process.returncode} before it was ready")
        try:
            if ready():
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{what} not ready after {timeout}s")


def eventually(condition, what: str, timeout: float = 30.0) -> None:
    """Poll `condition()` until true; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout} s: {what}")
        time.sleep(0.1)


def stop(*processes: subprocess.Popen) -> None:
    """Stop `processes` at once (each is asked to end, then each is waited for), killing those that
    have not ended within 10 seconds."""
    running = [process for process in processes if process.poll() is None]
    for process in running:
        process.terminate()
    for process in running:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def llama_threads() -> int:
    """Threads for each test llama-server: the cores shared among the run's pytest-xdist workers. Each
    worker runs its own servers, and llama.cpp's threads wait for each other at every step, so more
    threads than cores (two workers' servers at two threads each on two cores) slow every generation
    many times over instead of sharing the cores."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return max(1, (os.cpu_count() or 1) // workers)


@dataclass
class LlamaServer:
    """llama-server's command line as data; `start()` runs it and waits for /health."""

    binary: str
    model: str
    port: int = field(default_factory=free_port)
    context_size: int = 4096
    slots: int = 4
    extra_args: tuple[str, ...] = ()
    env: dict = field(default_factory=dict)  # LLAMA_MEDIA_MARKER, for one
    process: subprocess.Popen | None = None
    log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def to_argv(self) -> list[str]:
        return [
            self.binary,
            "--model",
            self.model,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--ctx-size",
            str(self.context_size),
            "--parallel",
            str(self.slots),
            "--threads",
            str(llama_threads()),
            "--seed",
            "42",
            *self.extra_args,
        ]

    def start(self) -> LlamaServer:
        # Its log goes to a file: a pipe nobody reads fills up (64 KiB of log lines) and then
        # llama-server blocks on its next write, every request with it.
        self.log_path = Path(tempfile.gettempdir()) / f"llama-server-test-{self.port}.log"
        self.process = subprocess.Popen(
            self.to_argv(), stdout=subprocess.DEVNULL, stderr=self.log_path.open("wb"), env={**os.environ, **self.env}
        )
        try:
            wait_until(
                lambda: requests.get(self.url + "/health", timeout=1).status_code == 200,
                self.process,
                "llama-server",
                timeout=120,
            )
        except (RuntimeError, TimeoutError) as exc:
            raise RuntimeError(f"{exc}; its log:\n{self.log_path.read_text(errors='replace')[-3000:]}") from None
        return self

    def stop(self) -> None:
        if self.process:
            stop(self.process)


@dataclass
class Proxy:
    """The proxy started the way users start it: its CLI in a subprocess."""

    args: list[str]
    port: int = field(default_factory=free_port)
    env: dict = field(default_factory=dict)
    command: tuple[str, ...] = (sys.executable, "-m", "api_like_oai")
    process: subprocess.Popen | None = None
    log_path: Path | None = None
    host: str = "127.0.0.1"  # a fleet's instances each listen on a loopback address of their own

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> Proxy:
        return self.launch().ready()

    def launch(self) -> Proxy:
        """Run the CLI without waiting for it to answer (`ready()` waits): several then start at once."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("API_LIKE_OAI_")}
        self.log_path = Path(tempfile.gettempdir()) / f"api-like-oai-test-{self.host}-{self.port}.log"
        host = ["--host", self.host] if self.host != "127.0.0.1" else []
        self.process = subprocess.Popen(
            [*self.command, "--port", str(self.port), *host, *self.args],
            cwd=ROOT,
            env={**env, **self.env},
            stdout=self.log_path.open("wb"),
            stderr=subprocess.STDOUT,
        )
        return self

    def ready(self) -> Proxy:
        """Wait until it answers; fail with its log if it exited first or took over 60 seconds (a loaded
        machine starts two at once in 30)."""
        try:
            wait_until(
                lambda: self._holds_its_port() and requests.get(self.url + "/v1/models", timeout=1).status_code in (200, 401),
                self.process,
                "api-like-oai",
                timeout=60,
            )
        except (RuntimeError, TimeoutError) as exc:
            raise RuntimeError(f"{exc}; its log:\n{self.log()[-3000:]}") from None
        return self

    def _holds_its_port(self) -> bool:
        """Whether no other process answers on this proxy's port. free_port's port can be taken by another
        test's process before the proxy binds it: gunicorn then logs "Connection in use" and retries, and
        until it logs "Listening at" an answer on the port is the other process's (one passed for ready once,
        and its error body was read as this proxy's model list: a KeyError in CI)."""
        text = self.log()
        taken = text.rfind("Connection in use")
        return taken < 0 or text.find("Listening at", taken) >= 0

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""

    def stop(self) -> None:
        if self.process:
            stop(self.process)


@dataclass
class RedisServer:
    """A private redis-server (the Debian package) on a free port, its data in a temporary directory."""

    binary: str = "redis-server"
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    directory: tempfile.TemporaryDirectory | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def to_argv(self) -> list[str]:
        return [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            self.directory.name,
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
        ]

    def start(self) -> RedisServer:
        self.directory = tempfile.TemporaryDirectory(prefix="api-like-oai-redis-")
        self.process = subprocess.Popen(self.to_argv(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self._answers, self.process, "redis-server", timeout=20)
        return self

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as connection:
                connection.sendall(b"PING\r\n")
                return connection.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process:
            stop(self.process)
        if self.directory:
            self.directory.cleanup()


def fleet_redis(directory: Path, secret: str) -> tuple[RedisServer, list[str]]:
    """A fleet's Redis, started, and the flags that join an instance to it (the secret in a file)."""
    secret_file = directory / "fleet-secret"
    secret_file.write_text(secret + "\n")
    redis_server = RedisServer().start()
    return redis_server, ["--fleet", redis_server.url, "--fleet-secret-file", str(secret_file)]


def launch_all(proxies: list[Proxy]) -> None:
    """Start the instances side by side, then wait for each to be ready."""
    for proxy in proxies:
        proxy.launch()
    for proxy in proxies:
        proxy.ready()


FLEET_MODEL = "smol"  # the bundled SmolLM2, as a fleet's boxes start it


def box_config(model: str, memory_mib: int, args: str = '--ctx-size, "4096", --parallel, "2", --threads, "1"') -> str:
    """A box's config: the bundled model ($MODEL, filled in by `fleet_box`) as `model`, started on demand."""
    return f"models:\n  {model}:\n    model: $MODEL\n    args: [{args}]\n    memory: {memory_mib}\n"


FLEET_BOX_CONFIG = box_config(FLEET_MODEL, 300)  # within fleet_box's budget (400 MiB) for one copy


def fleet_box(
    directory: Path,
    index: int,
    common: list[str],
    provisioned: dict,
    *flags: str,
    config: str = FLEET_BOX_CONFIG,
    budget_mib: int = 400,
) -> Proxy:
    """A box of a fleet on its own loopback address (127.0.0.{2 + index}), advertised there: `config`
    (SmolLM2 by default) started on demand within `budget_mib`; `common` joins it to the fleet
    (fleet_redis's flags), `flags` come last. Its data directory is its own, so its default store is a
    SQLite file no other instance shares, as on another machine. Not started."""
    config_file = directory / f"box-{index}.yaml"
    config_file.write_text(config.replace("$MODEL", provisioned["MODEL"]))
    data = directory / f"box-{index}-data"
    data.mkdir(exist_ok=True)
    host, port = f"127.0.0.{2 + index}", free_port()
    return Proxy(
        [
            *common,
            "--config",
            str(config_file),
            "--llama-server",
            provisioned["LLAMA_SERVER"],
            "--memory-budget",
            str(budget_mib),
            "--advertise",
            f"http://{host}:{port}",
            *flags,
        ],
        port=port,
        host=host,
        env={"XDG_DATA_HOME": str(data)},
    )


def model_boxes(front: Proxy, model: str = FLEET_MODEL, key: str | None = None) -> dict[str, dict]:
    """{box: the model's status there}, as the front lists the model to `key` (none: no key sent)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    cards = requests.get(front.url + "/v1/models", headers=headers, timeout=10).json()["data"]
    card = next((card for card in cards if card["id"] == model), None)
    return {box["box"]: box for box in card["status"]["boxes"]} if card else {}
