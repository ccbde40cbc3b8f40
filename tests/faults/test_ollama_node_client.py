"""The official `ollama` npm package (pinned in tests/node/ollama/package-lock.json, installed by
scripts/setup), run with Node against the proxy in front of the scripted fake llama.cpp (issue 38):
version, list, show, ps, chat (streamed and not, with tools), generate with a suffix, and pull
refused in Ollama's shape, through a key-protected proxy with the client's own headers."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from .conftest import HERMES_CALL

CLIENT_DIR = Path(__file__).resolve().parents[1] / "node" / "ollama"
KEY = "sk-ollama-node"
PROXY_FLAGS = ("--chat-prompt-model", "qwen2.5", "--api-key", KEY)


def run_cases(proxy, *cases: str) -> dict[str, dict]:
    assert (CLIENT_DIR / "node_modules" / "ollama").is_dir(), (
        "the ollama npm package is not installed: run scripts/setup (npm ci in tests/node/ollama)"
    )
    run = subprocess.run(
        ["node", "client-cases.mjs", proxy.url, KEY],
        cwd=CLIENT_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": "/usr/bin:/bin", "CASES": ",".join(cases)},
    )
    assert run.returncode == 0, run.stderr
    lines = {line["case"]: line for line in map(json.loads, run.stdout.splitlines())}
    failed = {name: line.get("error") for name, line in lines.items() if not line["ok"]}
    assert not failed
    return lines


def test_plain_methods(proxy, replay):
    lines = run_cases(proxy, "version", "list", "show", "ps", "chat", "chat-stream", "generate-suffix", "pull")
    assert all(part.isdigit() for part in lines["version"]["version"].split("."))
    [model] = lines["list"]["models"]
    assert model["name"] == "llama.cpp" and model["details"]["format"] == "gguf" and isinstance(model["size"], int)
    assert {"completion", "tools"} <= set(lines["show"]["capabilities"]) and "<|im_start|>" in lines["show"]["template"]
    assert lines["ps"]["models"][0]["name"] == "llama.cpp"
    assert lines["chat"]["text"] == " Hello, world!" and lines["chat"]["done"] and lines["chat"]["evalCount"] == 4
    assert lines["chat-stream"]["text"] == " Hello, world!" and lines["chat-stream"]["lines"] >= 2
    assert lines["chat-stream"]["done"] and lines["chat-stream"]["doneReason"] == "stop"
    assert lines["generate-suffix"]["text"] == " Hello, world!"
    assert [body for body in replay.requests if "input_prefix" in body][-1]["input_suffix"] == "\n"
    assert (
        lines["pull"] == {"case": "pull", "ok": True, "refused": True, "status": 400, "error": lines["pull"]["error"]}
        and "--models-dir" in lines["pull"]["error"]
    )


@pytest.mark.parametrize("case", ["chat-tools", "chat-tools-stream"])
def test_tool_calls_with_object_arguments(proxy, replay, case):
    replay.tokens = tuple(HERMES_CALL)
    line = run_cases(proxy, case)[case]
    assert [call["function"]["name"] for call in line["calls"]] == ["get_weather"]
    assert line["calls"][0]["function"]["arguments"] == {"city": "Zürich", "unit": "c"}
    assert line["text"] == "Let me check. "
