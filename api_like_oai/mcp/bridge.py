"""The bridge to one stdio MCP server of the config: a process of its own (`python -m
api_like_oai.mcp.bridge`, started by mcp/stdio.py in the proxy's main process) that runs the server's
command, keeps one MCP session with it, and serves its tools over Streamable HTTP on a loopback socket
the main process bound, to requests carrying the bridge's secret. The workers reach it as any HTTP
server (mcp/client.py): the `mcp` SDK's stdio client needs a plain asyncio process, which a gevent
worker's thread is not.

Its settings (the command, its arguments and environment, the secret, the socket's fd) come as one
JSON line on stdin; stdin then stays the main process's pipe, whose end ends the bridge. The server's
process gets a parent-death signal (through `python -m api_like_oai.mcp.bridge --exec`), so it never
outlives the bridge, and is started again when it dies; a call it was running gets an error.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import sys
import threading
import time
from contextlib import asynccontextmanager

log = logging.getLogger("api_like_oai")

RESTART_PAUSES = (0.2, 1.0, 5.0)  # seconds before starting the server again, after each failure in a row
STEADY_SECONDS = 30.0  # a server that ran this long before it ended did not fail in a row
PATH = "/mcp"


class StdioUpstream:
    """The stdio server's process and the one MCP session with it, started again when it ends."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], ready_timeout: float):
        """Made on the bridge's loop (its events are the loop's)."""
        import anyio

        self.name, self.command, self.env, self.ready_timeout = name, command, env, ready_timeout
        self.client = None
        self.changed = anyio.Event()  # set when the session starts or ends, then replaced
        self.failure = "not started yet"

    async def keep_running(self) -> None:
        import anyio
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client

        failures = 0
        while True:
            ended, started = anyio.Event(), time.monotonic()
            params = StdioServerParameters(
                command=sys.executable,
                env=self.env,
                args=["-m", "api_like_oai.mcp.bridge", "--exec", str(os.getpid()), *self.command],
            )
            try:
                async with Client(_watched(stdio_client(params), ended), cache=None, mode="legacy") as client:
                    self._set(client, None)
                    log.info("stdio MCP server %s started", self.name)
                    await ended.wait()
                self.failure = "the server's process ended"
            except Exception as exc:  # noqa: BLE001 - whatever the command does, the bridge goes on
                self.failure = f"the server did not start: {_reason(exc)}"
            self._set(None, self.failure)
            # A server that ran a while is started again at once; one that keeps dying, less and less often.
            failures = failures + 1 if time.monotonic() - started < STEADY_SECONDS else 0
            pause = RESTART_PAUSES[min(failures, len(RESTART_PAUSES) - 1)]
            log.error("stdio MCP server %s: %s; starting it again in %g s", self.name, self.failure, pause)
            await anyio.sleep(pause)

    def _set(self, client, failure: str | None) -> None:
        import anyio

        self.client, self.failure = client, failure
        changed, self.changed = self.changed, anyio.Event()
        changed.set()

    async def session(self):
        """The running session, waiting up to ready_timeout for one (the server starting again)."""
        import anyio
        from mcp import MCPError

        with anyio.move_on_after(self.ready_timeout):
            while self.client is None:
                await self.changed.wait()
        if self.client is None:
            raise MCPError(code=-32603, message=f"the stdio MCP server {self.name!r} is not running ({self.failure})")
        return self.client

    async def during_session(self, use):
        """`use(client)`, or an error if the server's process ends meanwhile (a killed server's call)."""
        import anyio
        from mcp import MCPError

        client = await self.session()
        changed, outcome = self.changed, []
        async with anyio.create_task_group() as group:

            async def run():
                try:
                    outcome.append(await use(client))
                except MCPError as exc:  # the server's own error, or the session's end
                    outcome.append(exc)
                group.cancel_scope.cancel()

            async def watch():
                await changed.wait()
                group.cancel_scope.cancel()

            group.start_soon(run)
            group.start_soon(watch)
        from mcp_types import CONNECTION_CLOSED

        if changed.is_set() or not outcome or getattr(outcome[0], "code", None) == CONNECTION_CLOSED:
            raise MCPError(code=-32603, message=f"the stdio MCP server {self.name!r} ended during the call (its process died)")
        if isinstance(outcome[0], MCPError):
            raise outcome[0]
        return outcome[0]


def _reason(exc: BaseException) -> str:
    while getattr(exc, "exceptions", None):
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


@asynccontextmanager
async def _watched(transport, ended):
    """The transport's streams, `ended` set when the server's side closes (its process ended)."""
    import anyio

    async with transport as (read, write):
        sender, receiver = anyio.create_memory_object_stream(0)

        async def pump():
            try:
                async with sender:
                    async for message in read:
                        await sender.send(message)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass
            finally:
                ended.set()

        async with anyio.create_task_group() as group:
            group.start_soon(pump)
            try:
                yield receiver, write
            finally:
                group.cancel_scope.cancel()


def http_app(upstream: StdioUpstream, secret: str):
    """The Streamable HTTP app serving the upstream's tools, behind the secret."""
    from mcp.server.lowlevel import Server

    async def list_tools(ctx, params):
        cursor = params.cursor if params is not None else None
        return await upstream.during_session(lambda client: client.list_tools(cursor=cursor))

    async def call_tool(ctx, params):
        return await upstream.during_session(lambda client: client.call_tool(params.name, params.arguments or {}))

    server = Server(f"api-like-oai bridge to {upstream.name}", on_list_tools=list_tools, on_call_tool=call_tool)
    app = server.streamable_http_app(streamable_http_path=PATH, stateless_http=True, json_response=True, host="127.0.0.1")
    return _Guarded(app, f"Bearer {secret}".encode())


class _Guarded:
    """An ASGI app answering only requests whose Authorization header carries the secret (401 else):
    any local user can reach a loopback port."""

    def __init__(self, app, expected: bytes):
        self.app, self.expected = app, expected

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and not any(
            name == b"authorization" and value == self.expected for name, value in scope["headers"]
        ):
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
            return
        await self.app(scope, receive, send)


async def serve(settings: dict) -> None:
    """Until stdin ends: the upstream kept running, its tools served on the inherited socket."""
    import uvicorn

    upstream = StdioUpstream(settings["name"], settings["command"], settings["env"], settings["ready_timeout"])
    listener = socket.socket(fileno=settings["fd"])
    config = uvicorn.Config(http_app(upstream, settings["secret"]), log_level="warning", access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    loop = asyncio.get_running_loop()
    threading.Thread(target=_until_stdin_ends, args=(loop, server), daemon=True).start()
    keeper = asyncio.ensure_future(upstream.keep_running())
    try:
        await server.serve(sockets=[listener])
    finally:
        keeper.cancel()
        await asyncio.gather(keeper, return_exceptions=True)


def _until_stdin_ends(loop, server) -> None:
    sys.stdin.buffer.read()
    loop.call_soon_threadsafe(setattr, server, "should_exit", True)


def exec_dying_with_parent(parent: int, argv: list[str]) -> None:
    """Become the server's command, killed when the bridge dies however it dies (Linux's parent-death
    signal survives exec): the stdio client starts its process, so it cannot set it itself."""
    from ..supervisor.process import _die_with

    _die_with(parent)
    try:
        os.execvp(argv[0], argv)  # noqa: S606 - the operator's command from the config, as given
    except OSError as exc:
        print(f"cannot run the stdio MCP server {argv[0]!r}: {exc.strerror}", file=sys.stderr)
        os._exit(127)


def main() -> None:
    if sys.argv[1:2] == ["--exec"]:
        exec_dying_with_parent(int(sys.argv[2]), sys.argv[3:])
    settings = json.loads(sys.stdin.buffer.readline())
    logging.basicConfig(
        level=settings.get("log_level", "INFO").upper(), format=f"%(asctime)s [mcp {settings['name']}] %(levelname)s %(message)s"
    )
    logging.getLogger("mcp").setLevel(logging.WARNING)  # the SDK's start and stop lines: the bridge logs its own
    asyncio.run(serve(settings))


if __name__ == "__main__":
    main()
