"""`scripts/run` as a newcomer meets it (issue 53): one line says the API is ready (its URL, the model,
how to stop), word for word as README.md quotes it; the URL serves any model name; and Ctrl-C, sent to
the whole process group as a terminal sends it, ends everything quietly, after the ready line and
during start-up alike, leaving no llama-server behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import pytest
import requests

from ..servers import ROOT, free_port

READY = re.compile(
    r"^api-like-oai is ready: (http://127\.0\.0\.1:(\d+)/v1) serves (\S+) \(any model name reaches it\)\. Ctrl-C stops it\.$"
)
STARTING = "[run] starting api-like-oai"


class RunScript:
    """scripts/run in a session of its own, as in a terminal: SIGINT not ignored, its output in a file."""

    def __init__(self, tmp_path, *arguments: str):
        self.port = free_port()
        self.log = tmp_path / "run.log"
        self.process = subprocess.Popen(
            ["scripts/run", *arguments],
            cwd=ROOT,
            env={**os.environ, "PORT": str(self.port)},
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, pattern: re.Pattern | str, seconds: float = 300) -> str:
        """The first line matching `pattern`, once the script printed it (set-up included)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for line in self.output().splitlines():
                if pattern.match(line) if isinstance(pattern, re.Pattern) else line.startswith(pattern):
                    return line
            assert self.process.poll() is None, self.output()[-3000:]
            time.sleep(0.1)
        raise AssertionError(f"no line like {pattern!r}:\n{self.output()[-3000:]}")

    def ctrl_c(self) -> int:
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            return self.process.wait(90)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running after Ctrl-C:\n{self.output()[-4000:]}") from None

    def llama_server_pids(self) -> list[int]:
        return [int(pid) for pid in re.findall(r"started \(pid (\d+)\)", self.output())]


@pytest.fixture
def run_script(tmp_path):
    """scripts/run with a grace period far longer than ctrl_c() waits: a worker that missed the signal
    and lives on until the master kills it (as an early Ctrl-C once did) fails the test."""
    script = RunScript(tmp_path, "--grace-period", "300")
    yield script
    if script.process.poll() is None:
        os.killpg(script.process.pid, signal.SIGKILL)
        script.process.wait(60)


def gone(pid: int, seconds: float = 15) -> bool:
    """The process ended (and was reaped) within `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{pid}/stat") as stat:
            if stat.read().split(") ")[-1].startswith("Z"):
                return True  # a zombie: ended, waiting for init to reap it
        time.sleep(0.1)
    return False


def chat(base_url: str, model: str) -> dict:
    body = {"model": model, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4}
    answer = requests.post(f"{base_url}/chat/completions", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_one_ready_line_as_the_readme_quotes_it_then_ctrl_c_ends_quietly(run_script):
    line = run_script.wait_for(READY)
    base_url, port, model = READY.match(line).groups()
    assert int(port) == run_script.port and model == "SmolLM2-135M-Instruct.Q4_1"
    assert [text for text in run_script.output().splitlines() if "ready" in text.lower()] == [line]
    assert line.replace(f":{port}/", ":8081/") in (ROOT / "README.md").read_text()

    answer = chat(base_url, "gpt-4o")  # a name agents send: single-model mode serves it (docs/errors.md)
    assert answer["model"] == "gpt-4o" and answer["choices"][0]["message"]["role"] == "assistant"

    body = {"model": "local", "messages": [{"role": "user", "content": "Count to 500."}], "stream": True}
    with requests.post(f"{base_url}/chat/completions", json=body, stream=True, timeout=120) as stream:
        assert next(stream.iter_lines()).startswith(b"data: ")  # a generation in flight, as Ctrl-C comes
        assert run_script.ctrl_c() == 130
    output = run_script.output()
    assert not re.search(r"Traceback|SystemExit|KeyboardInterrupt", output), output[-3000:]
    assert run_script.llama_server_pids() and all(gone(pid) for pid in run_script.llama_server_pids())


@pytest.mark.parametrize(
    ("line", "then"),
    [
        (STARTING, 0.3),  # Python and the proxy's settings: the script's own trap stops it
        ("Booting worker", 0),  # gunicorn's worker importing the app, its signal handlers not set yet
    ],
)
def test_ctrl_c_during_start_up_ends_it_quietly(run_script, line, then):
    run_script.wait_for(line) if line == STARTING else run_script.wait_for(re.compile(rf".*{line}"))
    time.sleep(then)
    assert run_script.ctrl_c() == 130
    output = run_script.output()
    assert not re.search(r"Traceback|SystemExit|KeyboardInterrupt", output), output[-3000:]
    assert not READY.search(output)
    assert all(gone(pid) for pid in run_script.llama_server_pids())
