"""The run's fixtures: factories that start real processes (llama-server, the fake llama.cpp, the
proxy's CLI) and stop them when the module that asked for them ends; one real llama-server and one
proxy in front of it, shared by the whole run; and checks that no process outlives its module or the run."""

from __future__ import annotations

import os
import secrets
import tempfile
import time

import pytest
from openai import OpenAI

from .fake_llamacpp import FakeLlamaCpp
from .mcp_servers import McpServer
from .servers import (
    RUN_VARIABLE,
    LlamaServer,
    Proxy,
    RedisServer,
    bench_model_paths,
    command_line,
    descendants_of,
    provisioned_paths,
    started_by_run,
    stop,
)

# tests/container/ runs the images scripts/test-container builds (as root, with podman), which it names
# here; the plain test run has neither.
collect_ignore = [] if os.environ.get("API_LIKE_OAI_TEST_IMAGE") else ["container"]

# The proxy's default store is a SQLite file under $XDG_DATA_HOME: the tests' proxies (in-process
# and started as processes, which inherit this) keep theirs in a directory of the run, not the user's.
_DATA_HOME = tempfile.TemporaryDirectory(prefix="api-like-oai-test-data-")
os.environ["XDG_DATA_HOME"] = _DATA_HOME.name
# Inherited by every process the run starts, and by theirs: how the checks below find them.
RUN = f"{os.getpid()}-{secrets.token_hex(4)}"
os.environ[RUN_VARIABLE] = RUN

# SmolLM2 has no fill-in-the-middle tokens, so llama.cpp refuses /infill with it. Three of its
# unused special tokens are named FIM tokens instead: the model is not trained for FIM, but the
# proxy's /infill path then runs end to end against the real server.
FIM_TOKENS = (
    "--override-kv",
    "tokenizer.ggml.fim_pre_token_id=int:8",
    "--override-kv",
    "tokenizer.ggml.fim_suf_token_id=int:9",
    "--override-kv",
    "tokenizer.ggml.fim_mid_token_id=int:10",
)

# The servers of the session fixtures below: they outlive modules by design (and are stopped at the end).
_SHARED: list[LlamaServer | Proxy | RedisServer] = []


@pytest.fixture(scope="session", autouse=True)
def nothing_outlives_the_run():
    """Fails the run's last test at teardown if a process the run started is still running once every
    fixture has stopped what it started."""
    yield
    assert_none_left(started_by_run(RUN), "the test run")


@pytest.fixture(scope="module", autouse=True)
def nothing_outlives_the_module(request):
    """Fails a module's last test at teardown if a process started while it ran (but not by a fixture
    of the whole run) is still running once the module's fixtures have stopped theirs."""
    yield
    assert_none_left(set(started_by_run(RUN)) - shared_processes(), request.module.__name__)


def shared_processes() -> set[int]:
    pids = [server.process.pid for server in _SHARED if server.process and server.process.poll() is None]
    return {*pids, *(child for pid in pids for child in descendants_of(pid))}


def assert_none_left(pids, owner: str, patience: float = 15.0) -> None:
    """`pids` have ended within `patience` seconds (a supervisor's llama-servers end just after their
    proxy does); else the test fails naming them, and they are killed so as not to hide the next failure."""
    pids = [pid for pid in pids if not is_interpreter_helper(pid)]
    deadline = time.monotonic() + patience
    while (left := [pid for pid in pids if command_line(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    if left:
        described = [f"{pid}: {' '.join(command_line(pid))[:200]}" for pid in left]
        for pid in left:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        pytest.fail(f"processes started by {owner} outlived it:\n" + "\n".join(described))


def is_interpreter_helper(pid: int) -> bool:
    """The test process's own multiprocessing helper (the resource tracker or forkserver a library's
    semaphore or pool starts on first use): the interpreter keeps it until it exits and stops it then,
    so it is this process's, not a server a test forgot."""
    arguments = command_line(pid)
    return any(
        word.startswith(("from multiprocessing.resource_tracker", "from multiprocessing.forkserver")) for word in arguments
    )


@pytest.fixture(scope="session", autouse=True)
def data_home(tmp_path_factory):
    """The proxies' data directory (installation key, stored responses) in a temporary folder, not the
    user's: set in the environment, so every proxy a test starts inherits it."""
    path = tmp_path_factory.mktemp("xdg-data")
    patch = pytest.MonkeyPatch()
    patch.setenv("XDG_DATA_HOME", str(path))
    patch.delenv("API_LIKE_OAI_SECRET", raising=False)
    yield path
    patch.undo()


@pytest.fixture(scope="session")
def provisioned() -> dict[str, str]:
    return provisioned_paths()


@pytest.fixture(scope="session")
def gemma_model() -> str:
    """gemma-3-270m's GGUF file (scripts/provision-bench-models): a second real model, 262k tokens of vocabulary."""
    return bench_model_paths()["GEMMA_MODEL"]


def shared(server):
    """A session fixture's body: `server` started, remembered as one that outlives modules, and
    stopped at the end (also when it failed to start)."""
    _SHARED.append(server)
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="session")
def llama_server(provisioned):
    """The real llama-server of the run (4 slots, 4096 tokens, FIM tokens named), for the tests that
    need nothing else of one."""
    yield from shared(LlamaServer(provisioned["LLAMA_SERVER"], provisioned["MODEL"], extra_args=FIM_TOKENS))


@pytest.fixture(scope="session")
def redis_server():
    """A real redis-server for the run (scripts/setup installs the Debian package)."""
    yield from shared(RedisServer())


@pytest.fixture(scope="session")
def proxy(llama_server) -> Proxy:
    """The proxy in front of the run's llama-server with no template flag (the model's own)."""
    yield from shared(Proxy(["--llama-api", llama_server.url]))


@pytest.fixture(scope="module")
def start_llama_server(provisioned):
    """Start a llama-server with the bundled model: `start_llama_server(**fields)` takes LlamaServer's
    fields (context_size, slots, extra_args, env, port). Every one is stopped when the module ends,
    restarted ones (`server.start()` again, on the same port) included."""
    servers: list[LlamaServer] = []

    def start(**fields) -> LlamaServer:
        servers.append(LlamaServer(provisioned["LLAMA_SERVER"], provisioned["MODEL"], **fields))
        return servers[-1].start()

    yield start
    stop(*(server.process for server in servers if server.process))


@pytest.fixture(scope="module")
def start_mcp_server():
    """Start a real MCP server (tests/mcp_servers.py): `start_mcp_server("http" | "sse")`, each stopped
    when the module ends."""
    servers: list[McpServer] = []

    def start(transport: str = "http") -> McpServer:
        servers.append(McpServer(transport).start())
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="module")
def start_fake():
    """Start the scriptable fake llama.cpp: `start_fake(**fields)` takes FakeLlamaCpp's fields. Every
    one is stopped when the module ends."""
    fakes: list[FakeLlamaCpp] = []

    def start(**fields) -> FakeLlamaCpp:
        fakes.append(FakeLlamaCpp(**fields).start())
        return fakes[-1]

    yield start
    for fake in fakes:
        fake.stop()


@pytest.fixture(scope="module")
def start_proxies():
    """Start several proxies' CLIs, two at a time (their start-ups, mostly imports, overlap on two cores):
    `start_proxies(flags, ...)`, each a sequence of flags (env=..., command=... for all). Every proxy
    started is stopped when the module ends."""
    proxies: list[Proxy] = []

    def start(*flag_lists, **options) -> list[Proxy]:
        started = [Proxy(list(flags), **options) for flags in flag_lists]
        proxies.extend(started)
        for pair in (started[n : n + 2] for n in range(0, len(started), 2)):
            for proxy in pair:
                proxy.launch()
            for proxy in pair:
                proxy.ready()
        return started

    yield start
    stop(*(proxy.process for proxy in proxies if proxy.process))


@pytest.fixture(scope="module")
def start_proxy(start_proxies):
    """Start the proxy's CLI: `start_proxy(*flags, env=..., command=...)`, stopped when the module ends."""
    return lambda *flags, **options: start_proxies(flags, **options)[0]


def openai_client(base_url: str, strict: bool = True, **options) -> OpenAI:
    return OpenAI(
        base_url=base_url + "/v1",
        api_key=options.pop("api_key", "sk-no-key"),
        max_retries=0,
        timeout=120,
        _strict_response_validation=strict,
        **options,
    )


@pytest.fixture(scope="session")
def client(proxy) -> OpenAI:
    return openai_client(proxy.url)


def pytest_collection_modifyitems(items):
    """Each schemathesis case (one per API operation) named by its operation in its node id, as in its
    name: pytest gives them all the test function's id, and pytest-xdist, which sends tests to its
    workers by id, would otherwise run one operation of each fuzz test and drop the rest."""
    for item in items:
        if getattr(item, "operation_label", None) and not item.nodeid.endswith("]"):
            # pytest 9 (pinned) keeps a node's id in `_id`; schemathesis 4 builds its cases without params
            item._id = item.parent.id.child(item.originalname).with_params(item.operation_label)


_LOAD_REPORT: list[str] = []


@pytest.fixture
def load_report(request):
    """Adds a line to the load summary printed at the end of the run. Kept in the test's report (its
    user_properties), which pytest-xdist carries from the worker that ran it to the run's summary."""
    return lambda line: request.node.user_properties.append(("load", line))


def pytest_runtest_logreport(report):
    if report.when == "call":
        _LOAD_REPORT.extend(value for name, value in report.user_properties if name == "load")


def pytest_terminal_summary(terminalreporter):
    if _LOAD_REPORT:
        terminalreporter.section("load")
        for line in _LOAD_REPORT:
            terminalreporter.write_line(line)
