"""The command line: `api-like-oai [flags]` serves, `api-like-oai keys|usage|fleet ...` manage.

What the flags, the environment and the config file say is arguments.py's; this module only
dispatches, so that every command reads the same settings and none imports another.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import sys

from .arguments import StartupError, parse_settings
from .settings import Settings


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["keys"], ["usage"]):
        from .keys_command import keys_main  # managing keys: no server

        return keys_main(argv[1:] if argv[0] == "keys" else argv)
    if argv[:1] == ["fleet"]:
        from .fleet.commands import fleet_main  # reading the fleet's Redis: no server

        return fleet_main(argv[1:])
    try:
        settings = parse_settings(argv)
    except StartupError as exc:
        print(f"api-like-oai: error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from .server import serve
    from .supervisor.launch import SupervisorStartFailed

    try:
        serve(settings, functools.partial(_create_app, settings))
    except SupervisorStartFailed as exc:
        print(f"api-like-oai: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C during start-up, before gunicorn took the signal: no traceback
        return 130
    return 0


def _create_app(
    settings: Settings,
    run_dir: str | None = None,
    supervisor_socket: str | None = None,
    mcp_bridges: dict[str, tuple[str, str]] | None = None,
):
    """`mcp_bridges`: where the main process's bridges serve the config's stdio MCP servers (mcp/stdio.py)."""
    from .app import create_app  # in the worker, after gevent patched it (server.py)

    if mcp_bridges:
        settings = dataclasses.replace(settings, mcp=settings.mcp.bridged(mcp_bridges))
    return create_app(settings, run_dir=run_dir, supervisor_socket=supervisor_socket)
