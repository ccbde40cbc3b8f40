"""Starting the supervisor process from the proxy's main process (gunicorn's master, or the debug
server), before any worker: one supervisor per proxy instance, whatever the workers do."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys

from .process import _die_with
from .spec import SupervisorSettings

READY_TIMEOUT_SECONDS = 60


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
    process = subprocess.Popen([sys.executable, "-m", "api_like_oai.supervisor", settings_path, socket_path, log_level],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, preexec_fn=lambda: _die_with(parent),
                               start_new_session=True)
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
