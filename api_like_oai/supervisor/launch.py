"""Starting the supervisor process from the proxy's main process (gunicorn's master, or the debug
server), before any worker: one supervisor per proxy instance, whatever the workers do."""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import threading
import time

from .process import _die_with
from .spec import SupervisorSettings

log = logging.getLogger("api_like_oai")

READY_TIMEOUT_SECONDS = 60
RESTART_PAUSE_SECONDS = 1.0  # between attempts to start a supervisor again that failed to start


class SupervisorStartFailed(Exception):
    pass


def start(settings: SupervisorSettings, run_dir: str, log_level: str) -> tuple[subprocess.Popen, str]:
    """(the supervisor process, its socket's path) once it listens. Its stdin stays this process's
    pipe: when this process ends, however it ends, the supervisor sees EOF and stops its children
    (and a parent-death signal kills it if it is SIGKILLed)."""
    settings_path = os.path.join(run_dir, "supervisor.json")
    socket_path = os.path.join(run_dir, "supervisor.sock")
    with open(settings_path, "w", encoding="utf-8") as file:
        json.dump(settings.to_dict(), file)
    parent = os.getpid()
    process = subprocess.Popen(
        [sys.executable, "-m", "api_like_oai.supervisor", settings_path, socket_path, log_level],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        preexec_fn=lambda: _die_with(parent),
        start_new_session=True,
    )
    ready, _, _ = select.select([process.stdout], [], [], READY_TIMEOUT_SECONDS)
    if not ready or process.stdout.readline().strip() != b"ready":
        process.kill()
        raise SupervisorStartFailed(f"the model supervisor did not start (exit code {process.poll()}); see the log above")
    return process, socket_path


def stop(process: subprocess.Popen, timeout: float) -> None:
    """End the supervisor, which stops every llama-server it started, and wait for it."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Supervised:
    """The supervisor process, kept running by the proxy's main process: a thread here sees its stdout
    end (it died, however: a crash, the OOM killer, a SIGKILL) and starts another on the same socket,
    which stops what its predecessor left running and starts models again as requests ask for them;
    the workers wait for it meanwhile (client.SupervisorClient). The thread that starts the process
    lives as long as the proxy, as its parent-death signal needs."""

    def __init__(self, settings: SupervisorSettings, run_dir: str, log_level: str):
        self.settings, self.run_dir, self.log_level = settings, run_dir, log_level
        self.process, self.socket_path = start(settings, run_dir, log_level)
        self.stopping = False
        self.restarts = 0
        threading.Thread(target=self._keep_running, name="supervisor-watch", daemon=True).start()

    def _keep_running(self) -> None:
        while True:
            self.process.stdout.read()  # returns at its end: the supervisor is gone
            code = self.process.wait()
            if self.stopping:
                return
            log.error("the model supervisor died (exit code %s): starting another", code)
            self._start_again()

    def _start_again(self) -> None:
        while not self.stopping:
            try:
                self.process, _ = start(self.settings, self.run_dir, self.log_level)
                self.restarts += 1
                return
            except (SupervisorStartFailed, OSError) as exc:
                log.error("%s; trying again", exc)
                time.sleep(RESTART_PAUSE_SECONDS)

    def stop(self, timeout: float) -> None:
        self.stopping = True
        stop(self.process, timeout)
