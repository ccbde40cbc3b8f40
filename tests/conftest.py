"""Session fixtures: one real llama-server for the whole run, proxies started per module."""

from __future__ import annotations

import os
import tempfile

import pytest
from openai import OpenAI

from .servers import LlamaServer, Proxy, RedisServer, provisioned_paths, stop

# The proxy's default store is a SQLite file under $XDG_DATA_HOME: the tests' proxies (in-process
# and started as processes, which inherit this) keep theirs in a directory of the run, not the user's.
_DATA_HOME = tempfile.TemporaryDirectory(prefix="api-like-oai-test-data-")
os.environ["XDG_DATA_HOME"] = _DATA_HOME.name

# SmolLM2 has no fill-in-the-middle tokens, so llama.cpp refuses /infill with it. Three of its
# unused special tokens are named FIM tokens instead: the model is not trained for FIM, but the
# proxy's /infill path then runs end to end against the real server.
FIM_TOKENS = ("--override-kv", "tokenizer.ggml.fim_pre_token_id=int:8",
              "--override-kv", "tokenizer.ggml.fim_suf_token_id=int:9",
              "--override-kv", "tokenizer.ggml.fim_mid_token_id=int:10")


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
def llama_server(provisioned):
    server = LlamaServer(provisioned["LLAMA_SERVER"], provisioned["MODEL"], extra_args=FIM_TOKENS).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_server():
    """A real redis-server for the run (scripts/setup installs the Debian package)."""
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def start_proxy():
    """Start the proxy CLI with the given arguments; every proxy started is stopped at the end."""
    started: list[Proxy] = []

    def start(*args: str, **options) -> Proxy:
        proxy = Proxy(list(args), **options).start()
        started.append(proxy)
        return proxy

    yield start
    stop(*(proxy.process for proxy in started if proxy.process))


@pytest.fixture(scope="session")
def proxy(llama_server, start_proxy) -> Proxy:
    """The proxy in front of the real llama-server with no template flag (the model's own)."""
    return start_proxy("--llama-api", llama_server.url)


def openai_client(base_url: str, strict: bool = True, **options) -> OpenAI:
    return OpenAI(base_url=base_url + "/v1", api_key=options.pop("api_key", "sk-no-key"),
                  max_retries=0, timeout=120, _strict_response_validation=strict, **options)


@pytest.fixture(scope="session")
def client(proxy) -> OpenAI:
    return openai_client(proxy.url)


_LOAD_REPORT: list[str] = []


@pytest.fixture(scope="session")
def load_report():
    """Adds a line to the load summary printed at the end of the run."""
    return _LOAD_REPORT.append


def pytest_terminal_summary(terminalreporter):
    if _LOAD_REPORT:
        terminalreporter.section("load")
        for line in _LOAD_REPORT:
            terminalreporter.write_line(line)
