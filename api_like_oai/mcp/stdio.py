"""The config's stdio MCP servers, run from the proxy's main process (gunicorn's master, or the debug
server), before any worker: one bridge process per server (mcp/bridge.py), which runs the server and
serves its tools over Streamable HTTP, kept running for the proxy's life.

Each bridge's socket is bound here, once, on a random loopback port, and handed to every bridge started
for that server: the port the workers are given never changes, and a request arriving while a bridge
starts again waits in the socket's backlog instead of failing. A random secret per server, which the
workers send as a bearer token, keeps other local users out. A bridge's stdin is this process's pipe
(its end ends the bridge) and it gets a parent-death signal, as the supervisor does, so none outlives
the proxy; the server's process dies with its bridge the same way.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import subprocess
import sys
import threading
import time

from ..supervisor.launch import stop as stop_process
from ..supervisor.process import _die_with
from .bridge import PATH
from .policy import Bounds, NamedServer

log = logging.getLogger("api_like_oai")

RESTART_PAUSE_SECONDS = 1.0  # before a bridge that died is started again


class Bridge:
    """One stdio server's bridge process, started again when it dies (by a thread that lives as long as
    the proxy: the parent-death signal is the starting thread's)."""

    def __init__(self, server: NamedServer, ready_timeout: float, log_level: str):
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.secret = secrets.token_urlsafe(32)
        self.settings = {
            "name": server.name,
            "command": list(server.command),
            "env": dict(server.env),
            "secret": self.secret,
            "fd": self.listener.fileno(),
            "ready_timeout": ready_timeout,
            "log_level": log_level,
        }
        self.process: subprocess.Popen | None = None
        self.restarts = 0
        self.stopping = False
        self.started = threading.Event()
        threading.Thread(target=self._keep_running, name=f"mcp-bridge-{server.name}", daemon=True).start()
        self.started.wait()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}{PATH}"

    def _start(self) -> subprocess.Popen:
        parent = os.getpid()
        process = subprocess.Popen(
            [sys.executable, "-m", "api_like_oai.mcp.bridge"],
            stdin=subprocess.PIPE,
            pass_fds=[self.listener.fileno()],
            preexec_fn=lambda: _die_with(parent),
            start_new_session=True,
        )
        # The settings (the secret among them) go on its stdin, not in its argv, which any user can read.
        process.stdin.write(json.dumps(self.settings).encode() + b"\n")
        process.stdin.flush()
        return process

    def _keep_running(self) -> None:
        while not self.stopping:
            try:
                self.process = self._start()
            except OSError as exc:
                log.error("the bridge of the stdio MCP server %s did not start: %s", self.settings["name"], exc)
            self.started.set()
            code = self.process.wait() if self.process is not None else None
            if self.stopping:
                return
            log.error("the bridge of the stdio MCP server %s ended (exit code %s): starting another", self.settings["name"], code)
            self.restarts += 1
            time.sleep(RESTART_PAUSE_SECONDS)

    def stop(self, timeout: float) -> None:
        """End the bridge (which stops its server) and wait for it."""
        self.stopping = True
        if self.process is not None:
            stop_process(self.process, timeout)
        self.listener.close()


class Bridges:
    """The bridges of every stdio server of the config; `endpoints` is what the workers are given."""

    def __init__(self, bounds: Bounds, log_level: str):
        # A call waits for a server starting again half the time the worker waits for the bridge: the
        # worker then reads why it is not running, not a timeout.
        self.bridges = {
            server.name: Bridge(server, bounds.connect_timeout / 2, log_level) for server in bounds.named_servers if server.stdio
        }

    @property
    def endpoints(self) -> dict[str, tuple[str, str]]:
        """Each server's name -> (its bridge's URL, the secret the workers send)."""
        return {name: (bridge.url, bridge.secret) for name, bridge in self.bridges.items()}

    def stop(self, timeout: float = 10.0) -> None:
        for bridge in self.bridges.values():
            bridge.stop(timeout)
