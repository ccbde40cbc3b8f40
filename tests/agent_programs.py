"""Claude Code and Codex CLI run as users run them, each with its home in a temporary directory.

The settings here are the manual's (docs/agents.md), so the tests hold them
as written: Claude Code reads ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY, Codex a `model_providers`
entry with `wire_api = "responses"` in $CODEX_HOME/config.toml. Both binaries come pinned from
PyPI (claude-agent-sdk bundles Claude Code, openai-codex-cli-bin is Codex's runtime) and reach no
network: the environment is built from nothing but what they need.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import claude_agent_sdk
import codex_cli_bin

CLAUDE_CODE = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
CODEX = codex_cli_bin.bundled_codex_path()
PROGRAM_TIMEOUT = 90  # seconds; a run against the scripted model takes a few
API_KEY = "sk-agents-test"  # the proxy's --api-key in the tests: each program must send it

# Everything Claude Code needs besides the proxy: no update checks, no telemetry, no error reports.
CLAUDE_CODE_QUIET = {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}

# The last three settings keep Codex off the network (traced: without them it looks up github.com,
# api.github.com, chatgpt.com and ab.chatgpt.com at start-up); they do not change its requests.
CODEX_CONFIG = """\
model = "{model}"
model_provider = "api-like-oai"
check_for_update_on_startup = false

[model_providers.api-like-oai]
name = "api-like-oai"
base_url = "{proxy_url}/v1"
wire_api = "responses"
env_key = "API_LIKE_OAI_KEY"
{provider_extra}

[analytics]
enabled = false

[features]
plugins = false
remote_plugin = false
apps = false
"""

_ACCESS_LINE = re.compile(r"api_like_oai\.access: .*?endpoint=(\S+) .*?status=(\d+)")


@dataclass(frozen=True)
class Run:
    returncode: int
    answer: str  # the program's final message
    output: str  # stdout and stderr, for the failure message


def base_environment(home: Path) -> dict[str, str]:
    """A clean environment: the system PATH and a HOME of the test's own, nothing inherited."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}


def run_claude_code(proxy_url: str, task: str, workdir: Path, home: Path, settings: dict[str, str]) -> Run:
    """`claude -p TASK --allowedTools Bash` in `workdir`, pointed at the proxy; `settings`: more
    environment (ANTHROPIC_MODEL, ...)."""
    env = {
        **base_environment(home),
        **CLAUDE_CODE_QUIET,
        "ANTHROPIC_BASE_URL": proxy_url,
        "ANTHROPIC_API_KEY": API_KEY,
        **settings,
    }
    done = _run([str(CLAUDE_CODE), "-p", task, "--allowedTools", "Bash"], workdir, env)
    return Run(done.returncode, done.stdout.strip(), done.stdout + done.stderr)


def run_codex(proxy_url: str, task: str, workdir: Path, home: Path, model: str = "qwen2.5", *, websockets: bool = False) -> Run:
    """`codex exec` in `workdir` with $CODEX_HOME/config.toml naming the proxy as its provider; with
    `websockets`, the provider says it supports the Responses API's WebSocket mode, which Codex then speaks."""
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    extra = "supports_websockets = true" if websockets else ""
    (codex_home / "config.toml").write_text(CODEX_CONFIG.format(model=model, proxy_url=proxy_url, provider_extra=extra))
    answer_file = home / "codex-answer.txt"
    env = {**base_environment(home), "CODEX_HOME": str(codex_home), "API_LIKE_OAI_KEY": API_KEY}
    bundled_tools = codex_cli_bin.bundled_path_dir()  # rg, as Codex's SDK provides it
    if bundled_tools:
        env["PATH"] = f"{bundled_tools}{os.pathsep}{env['PATH']}"
    done = _run(
        [
            str(CODEX),
            "exec",
            "--skip-git-repo-check",
            "--sandbox",
            "workspace-write",
            "--output-last-message",
            str(answer_file),
            task,
        ],
        workdir,
        env,
    )
    answer = answer_file.read_text().strip() if answer_file.exists() else ""
    return Run(done.returncode, answer, done.stdout + done.stderr)


def _run(argv: list[str], workdir: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=PROGRAM_TIMEOUT
    )


def access_statuses(log_text: str) -> list[tuple[str, int]]:
    """(endpoint, status) of every access-log line the proxy wrote (api_like_oai/observability.py)."""
    return [(endpoint, int(status)) for endpoint, status in _ACCESS_LINE.findall(log_text)]
