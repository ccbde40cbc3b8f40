"""Starting a box's member process (member.py) from the proxy's main process, like supervisor/launch.py
(whose `stop` ends it: it withdraws the box's record on SIGTERM); stdlib only, since gunicorn's master
imports it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

from ..supervisor.process import _die_with
from .settings import FleetSettings


def start(
    settings: FleetSettings,
    run_dir: str,
    supervisor_socket: str | None,
    static_models: list[str],
    slot_dir: str | None,
    log_level: str,
    spread: dict[str, int] | None = None,
    default: str | None = None,
) -> subprocess.Popen:
    """The member process, heartbeating the box's record from its first second on; `spread`: the
    models to keep on several boxes (their `boxes:`), and `default` its default model, which its record
    tells the fronts."""
    config_path = os.path.join(run_dir, "fleet-member.json")
    with open(config_path, "w", encoding="utf-8") as file:
        json.dump(
            {
                **settings.to_dict(),
                "static_models": static_models,
                "slot_dir": slot_dir,
                "rpc": _rpc(settings),
                "spread": spread or {},
                "default": default,
            },
            file,
        )
    parent = os.getpid()
    return subprocess.Popen(
        [sys.executable, "-m", "api_like_oai.fleet", config_path, supervisor_socket or "", log_level],
        stdin=subprocess.PIPE,
        preexec_fn=lambda: _die_with(parent),
        start_new_session=True,
    )


def _rpc(settings: FleetSettings) -> dict | None:
    """The rpc-server the member runs for a box lending memory: its binary, address and what it lends."""
    if not settings.rpc_lend_mib:
        return None
    host = settings.advertised_host
    with socket.socket() as probe:  # a port free on the advertised host, chosen once
        probe.bind((host, 0))
        port = probe.getsockname()[1]
    return {"binary": settings.rpc_server, "host": host, "port": port, "lend_mib": settings.rpc_lend_mib}
