"""The same CLI three ways, each serving the real model."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ..conftest import openai_client
from ..servers import ROOT, command_line, descendants_of

COMMANDS = {
    "console script": (str(Path(sys.executable).parent / "api-like-oai"),),
    "python -m": (sys.executable, "-m", "api_like_oai"),
    "original script name": (sys.executable, str(ROOT / "api_like_oai.py")),
}


@pytest.mark.parametrize("way", COMMANDS)
def test_each_way_to_start_serves_chat(way, llama_server, start_proxy):
    proxy = start_proxy("--llama-api", llama_server.url, command=COMMANDS[way])
    reply = openai_client(proxy.url).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=4
    )
    assert reply.choices[0].message.content


def test_legacy_flags_format_the_prompt_as_the_original_script(llama_server, start_proxy):
    import requests

    proxy = start_proxy(
        "--llama-api",
        llama_server.url,
        "--chat-prompt",
        "Rules follow.\\n",
        "--user-name",
        "\\nUSER: ",
        "--ai-name",
        "\\nASSISTANT: ",
        "--stop",
        "\\n",
    )
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Bye"},
    ]
    prompt = requests.post(proxy.url + "/v1/internal/chat-prompt", json={"messages": messages}, timeout=10)
    assert prompt.json()["prompt"] == (
        "Rules follow.\nASSISTANT's RULE: Be brief.\nUSER: Hi\nASSISTANT: Hello!\n\nUSER: Bye\nASSISTANT:"
    )
    reply = openai_client(proxy.url).chat.completions.create(model="m", messages=messages, max_tokens=8)
    assert "\n" not in reply.choices[0].message.content  # the --stop marker ends the answer


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"])
def test_scripts_run_stops_everything_it_started(signal_name, provisioned, tmp_path):
    import os
    import signal
    import subprocess
    import time

    import requests

    from ..servers import free_port, wait_until

    port = free_port()
    # PORT names another port: a --port among the extra arguments is the one served and the one announced.
    env = {**os.environ, "PORT": str(free_port()), **provisioned}
    log = tmp_path / "run.log"
    # Started as a terminal starts it, with SIGINT at its default: a suite run in the background
    # (`scripts/test &`) ignores SIGINT, every child inherits that, and a shell cannot trap a signal
    # ignored when it started.
    script = subprocess.Popen(  # noqa: PLW1509 - a signal reset only, before exec
        [str(ROOT / "scripts" / "run"), "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    started: list[int] = []
    try:
        wait_until(lambda: requests.get(f"http://127.0.0.1:{port}/v1/models", timeout=1).ok, script, "scripts/run", timeout=120)
        reply = requests.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            timeout=120,
            json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
        )
        assert reply.status_code == 200, reply.text
        ready = f"api-like-oai is ready: http://127.0.0.1:{port}/v1 serves "  # the --port, not $PORT
        wait_until(lambda: ready in log.read_text(), script, "scripts/run's ready line", timeout=30)
        started = descendants_of(script.pid)  # the proxy, its workers, its supervisor and the llama-server it started
        assert sum(command_line(pid)[0].endswith("llama-server") for pid in started if command_line(pid)) == 1
        script.send_signal(getattr(signal, signal_name))
        assert script.wait(timeout=30) != 0
        deadline = time.monotonic() + 5
        while any(Path(f"/proc/{pid}").exists() for pid in started) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [pid for pid in started if Path(f"/proc/{pid}").exists()] == []
    finally:  # whatever failed, nothing it started is left running for the rest of the suite
        if script.poll() is None:
            script.kill()
        for pid in started:
            if Path(f"/proc/{pid}").exists():
                os.kill(pid, signal.SIGKILL)
