"""The servers a benchmark part starts: llama-server, the proxy through its CLI, the fake upstream,
and, for the ratio rows (issue 29), the floor app and LiteLLM's proxy beside the proxy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from .processes import Service, free_port

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# LiteLLM's proxy, pinned; scripts/bench installs it into a virtualenv of its own (LITELLM_BIN is its CLI).
LITELLM_VERSION = "1.106.12"


def llama_server(binary: str, model: str, threads: int = 2) -> Service:
    port = free_port()
    return Service(
        "llama-server",
        [
            binary,
            "--model",
            model,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--ctx-size",
            "4096",
            "--parallel",
            "4",
            "--threads",
            str(threads),
            "--seed",
            "42",
        ],
        port,
    )


def proxy(upstream_url: str, *flags: str, checkout: Path | None = None, name: str = "proxy") -> Service:
    """The proxy as users start it: its CLI, default workers and worker class, no template flag. Run as
    `python -m api_like_oai` from a checkout (this one unless told; the benchmark runs here), so that the
    code measured is that tree's even when the environment's editable install points at another checkout."""
    port = free_port()
    return Service(
        name,
        [sys.executable, "-m", "api_like_oai", "--llama-api", upstream_url, "--port", str(port), *flags],
        port,
        ready_path="/v1/models",
        cwd=checkout or ROOT,
    )


def fake_upstream(props_path: Path, token_interval_ms: float = 0.0, answer_tokens: int | None = None) -> Service:
    port = free_port()
    answer = ["--answer-tokens", str(answer_tokens)] if answer_tokens is not None else []
    return Service(
        "fake-llamacpp",
        [
            sys.executable,
            str(HERE / "fake_llamacpp.py"),
            "--port",
            str(port),
            "--props",
            str(props_path),
            "--token-interval-ms",
            str(token_interval_ms),
            *answer,
        ],
        port,
    )


def proxy_for_models(upstreams: dict[str, str], checkout: Path | None = None, name: str = "proxy") -> Service:
    """The proxy serving each model name on its upstream (a config file), the first the default; from
    `checkout` (a revision's worktree, `--against`) when given."""
    lines = [f"default_model: {next(iter(upstreams))}", "models:"]
    lines += [f"  {model}:\n    upstreams: [{url}]" for model, url in upstreams.items()]
    config = _temporary_file(f"{name}-models", ".yaml", "\n".join(lines) + "\n")
    return proxy(next(iter(upstreams.values())), "--config", str(config), checkout=checkout, name=name)


@contextmanager
def checkout_of(revision: str):
    """A detached git worktree of `revision` in a temporary folder, removed after: the proxy as it was, to
    run beside this tree's in the same rows (`scripts/bench --quick --against REV`). It runs on this
    environment's packages, so a revision whose dependencies differ may not start."""
    folder = Path(tempfile.mkdtemp(prefix="api-like-oai-bench-before-"))
    git = ["git", "-C", str(ROOT)]
    subprocess.run([*git, "worktree", "add", "--detach", "--quiet", str(folder), revision], check=True)
    try:
        yield folder
    finally:
        subprocess.run([*git, "worktree", "remove", "--force", str(folder)], check=False)
        shutil.rmtree(folder, ignore_errors=True)


def floor(upstreams: dict[str, str]) -> Service:
    """benchmarks/floor_app.py under the proxy's own worker class, one worker, as the proxy runs."""
    port = free_port()
    return Service(
        "floor",
        [
            sys.executable,
            "-m",
            "gunicorn",
            "--worker-class",
            "api_like_oai.worker.EventWorker",
            "--workers",
            "1",
            "--worker-connections",
            "10000",
            "--keep-alive",
            "5",
            "--timeout",
            "0",
            "--bind",
            f"127.0.0.1:{port}",
            "--chdir",
            str(ROOT),
            "--no-control-socket",
            "--env",
            "FLOOR_UPSTREAMS=" + json.dumps(upstreams),
            "benchmarks.floor_app:app",
        ],
        port,
    )


def litellm(upstreams: dict[str, str]) -> Service:
    """LiteLLM's proxy, one worker, each model an OpenAI-compatible upstream (URL + /v1); its price
    list read from the package (no fetch), no database, no key (loopback only; as the proxy runs here)."""
    models = [
        {"model_name": model, "litellm_params": {"model": f"openai/{model}", "api_base": url + "/v1", "api_key": "none"}}
        for model, url in upstreams.items()
    ]
    config = _temporary_file("litellm", ".yaml", json.dumps({"model_list": models, "litellm_settings": {"telemetry": False}}))
    port = free_port()
    return Service(
        "litellm",
        [os.environ["LITELLM_BIN"], "--config", str(config), "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"],
        port,
        ready_path="/health/liveliness",
        env={
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_LOG": "ERROR",
            "NO_DOCS": "True",
            "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
        },
    )


def _temporary_file(name: str, suffix: str, text: str) -> Path:
    path = Path(tempfile.gettempdir()) / f"api-like-oai-bench-{name}-{os.getpid()}{suffix}"
    path.write_text(text)
    return path


def described(revision: str) -> str:
    """`REV` as the reports name it: itself and its commit, `main~3 (d5b3820)`."""
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", revision], capture_output=True, text=True, check=True
    ).stdout.strip()
    return revision if revision.startswith(commit) else f"{revision} ({commit})"
