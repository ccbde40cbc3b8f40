"""Real MCP servers for the tests, written with the official `mcp` SDK (its MCPServer, once FastMCP):
`python -m tests.mcp_servers http|sse PORT` serves the same tools over Streamable HTTP (/mcp) or the
older HTTP+SSE transport (/sse), `python -m tests.mcp_servers stdio` over stdin and stdout (with one more
tool, `pid`, its process id: a test kills it). `McpServer` starts an HTTP one as a subprocess and waits
until it answers; the proxy starts a stdio one itself, from its config.

The tools return text (`weather`, read-only), JSON (`add`, `inventory`), an error (`fail`), too much
text (`big`) and nothing for a while (`slow`)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass, field

from .servers import ROOT, free_port, stop, wait_until

WEATHER = "Sunny and 21 degrees in {city}"
BIG_BYTES = 200_000


def serve(transport: str, port: int | None = None) -> None:
    import anyio
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations

    app = MCPServer("test-tools")

    @app.tool(description="Add two integers.")
    def add(a: int, b: int) -> int:
        return a + b

    @app.tool(description="The weather in a city.", annotations=ToolAnnotations(readOnlyHint=True))
    def weather(city: str) -> str:
        return WEATHER.format(city=city)

    @app.tool(description="What is in stock.")
    def inventory() -> dict:
        return {"apples": 3, "pears": 0}

    @app.tool(description="Always fails.")
    def fail() -> str:
        raise ToolError("the fail tool failed, as it always does")  # a ToolError's message reaches the client

    @app.tool(description="Returns a lot of text.")
    def big() -> str:
        return "x" * BIG_BYTES

    @app.tool(description="Sleeps for a while.")
    async def slow(seconds: float) -> str:
        await anyio.sleep(seconds)
        return "woke up"

    if transport == "stdio":

        @app.tool(description="The server's process id.")
        def pid() -> int:
            return os.getpid()

        app.run("stdio")
    elif transport == "sse":
        app.run("sse", host="127.0.0.1", port=port)
    else:
        app.run("streamable-http", host="127.0.0.1", port=port)


@dataclass
class McpServer:
    transport: str = "http"  # or "sse"
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}" + ("/sse" if self.transport == "sse" else "/mcp")

    def start(self) -> McpServer:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.mcp_servers", self.transport, str(self.port)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(self._listening, self.process, f"MCP server ({self.transport})", timeout=30)
        return self

    def _listening(self) -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", self.port)) == 0

    def stop(self) -> None:
        if self.process:
            stop(self.process)


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None)
