"""A box's membership of the fleet: a small process beside the supervisor (started by server.serve
when --advertise is given) that writes the box's record to Redis every heartbeat, from the supervisor's
status, and withdraws it when the box stops. It dies with the box (a parent-death signal, and its stdin
is the box's pipe), so a killed box stops renewing its record and leaves the fleet at its expiry.

Its own process, not a thread of gunicorn's master (which starts none, server.py) nor of a worker (two
workers would write twice, a recycled one would leave gaps).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from ..supervisor.client import SupervisorClient
from ..supervisor.process import _die_with
from .membership import box_record, connect, publish, withdraw

log = logging.getLogger("api_like_oai.fleet")

HEALTH_TIMEOUT_SECONDS = 1.0


def saved_models(slot_dir: str | None, names: list[str]) -> list[str]:
    """The models with a KV slot saved in `slot_dir` (the supervisor's files: <model>-<replica>-<slot>.bin)."""
    if not slot_dir or not os.path.isdir(slot_dir):
        return []
    files = [path.name for path in Path(slot_dir).glob("*.bin")]
    return [name for name in names if any(file.startswith(name + "-") for file in files)]


def answers(address: str, timeout: float = HEALTH_TIMEOUT_SECONDS) -> bool:
    """Whether the box's own server answers /health at its advertised address: a box that is stopped,
    hung or cut off from its address must leave the fleet (its record expires) even though this
    process, its own, goes on."""
    try:
        with urllib.request.urlopen(address + "/health", timeout=timeout) as answer:  # noqa: S310 - the box's own URL
            return answer.status == 200
    except (OSError, ValueError):
        return False


def start_rpc_server(rpc: dict) -> subprocess.Popen:
    """The box's rpc-server (llama.cpp's RPC backend), lending its memory to a pooled model's host; it
    dies with this process, which dies with the box."""
    parent = os.getpid()
    return subprocess.Popen(
        [rpc["binary"], "-H", rpc["host"], "-p", str(rpc["port"]), "-t", "1"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        preexec_fn=lambda: _die_with(parent),
        start_new_session=True,
    )


def _lending(rpc: dict | None, server: subprocess.Popen | None) -> dict | None:
    """What the record says the box lends: only while its rpc-server runs."""
    if rpc is None or server is None or server.poll() is not None:
        return None
    return {"endpoint": f"{rpc['host']}:{rpc['port']}", "lend_mib": rpc["lend_mib"]}


def run(config: dict, socket_path: str | None, ended: threading.Event) -> None:
    """Heartbeats until `ended` is set; then the record is withdrawn."""
    connection = connect(config["redis_url"])
    supervisor = SupervisorClient(socket_path) if socket_path else None
    address, interval = config["advertise"], config["heartbeat_seconds"]
    rpc_server = start_rpc_server(config["rpc"]) if config.get("rpc") else None
    while True:
        try:
            if not answers(address):
                raise RuntimeError(f"the box does not answer at {address}/health")
            status = supervisor.ask("status") if supervisor is not None else {}
            names = [*status.get("models", {}), *config["static_models"]]
            record = box_record(
                address,
                status,
                config["static_models"],
                saved_models(config.get("slot_dir"), names),
                time.time(),
                _lending(config.get("rpc"), rpc_server),
                config.get("spread"),
                config.get("default"),
            )
            publish(connection, record, config["expiry_seconds"])
        except Exception as exc:  # noqa: BLE001 - Redis or the supervisor away: the next beat tries again
            log.warning("fleet: heartbeat of %s not written: %s", address, exc)
        if ended.wait(interval):
            break
    if rpc_server is not None:
        rpc_server.kill()
    try:
        withdraw(connection, address)
    except Exception as exc:  # noqa: BLE001 - the record then expires by itself
        log.warning("fleet: %s not withdrawn (%s); it expires by itself", address, exc)


def _wait_for_eof(ended: threading.Event) -> None:
    """The box's pipe (stdin): EOF when the box ends, however it ends. Read with os.read on the bare
    descriptor, not sys.stdin.buffer: a daemon thread blocked inside a buffered reader's lock at
    interpreter exit is Python's "Fatal Python error: _enter_buffered_busy" on every graceful stop."""
    try:
        while os.read(sys.stdin.fileno(), 4096):
            pass
    except OSError:
        pass
    ended.set()


def main(argv: list[str]) -> int:
    config_path, socket_path, log_level = argv
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with open(config_path, encoding="utf-8") as file:
        config = json.load(file)
    ended = threading.Event()
    threading.Thread(target=_wait_for_eof, args=(ended,), daemon=True).start()
    import signal

    signal.signal(signal.SIGTERM, lambda *_: ended.set())
    run(config, socket_path or None, ended)
    return 0
