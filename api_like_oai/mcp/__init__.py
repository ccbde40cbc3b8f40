"""MCP tools the proxy runs for a request (issue 39): the Responses API's `mcp` tool.

- `policy.py` (pure): which listed tools are offered (allowed_tools), which calls need approval
  (require_approval), what a round of the model's calls leads to (run them and ask again, ask the
  client for approval, answer), and the bounds a request cannot exceed.
- `addresses.py`: a server URL checked as image URLs are (public addresses only, unless allowed) and
  its DNS answer pinned for the connection, so no rebinding between the check and the connect.
- `client.py` (I/O): list a server's tools and call one, through the official `mcp` SDK (Streamable
  HTTP, or HTTP+SSE for a URL ending in /sse), on an asyncio loop in gevent's thread pool.
- `stdio.py` (the main process) and `bridge.py` (a process per server): a stdio server of the config,
  run once per instance and served to the workers over Streamable HTTP on a loopback port.
"""
