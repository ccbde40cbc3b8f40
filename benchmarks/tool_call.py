"""Part 2d: a streamed tool call against plain text."""

from __future__ import annotations

import statistics

from .capacity import CapacityRig
from .results import (
    ToolCallResult,
)
from .workload import GENERATED_TOKENS, PATHS, generation_body, post_stream

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    }
]


async def tool_call_row(rig: CapacityRig, clients: int) -> ToolCallResult:
    """The same streamed chat (64 tokens from the instant upstream), plain and with `tools`, which the
    fake answers with a `<tool_call>` the proxy parses into tool_calls deltas: the proxy's CPU per
    upstream token for each, in alternating windows (median of `repeats`)."""
    plain = generation_body("chat", True)
    bodies = {"plain": plain, "tool_call": {**plain, "tools": TOOLS}}
    per_token: dict[str, list[float]] = {name: [] for name in bodies}
    errors = 0
    for _ in range(rig.plan.repeats):
        for name, body in bodies.items():
            window = await rig.load(body, PATHS["chat"], clients)
            per_token[name].append(window.spent("proxy") * 1e6 / max(len(window.samples), 1) / GENERATED_TOKENS)
            errors += sum(s.status != 200 for s in window.samples)
    answer = post_stream(f"http://127.0.0.1:{rig.proxy.port}{PATHS['chat']}", bodies["tool_call"])
    calls_parsed = b'"tool_calls"' in answer and b"<tool_call>" not in answer
    return ToolCallResult(
        clients,
        GENERATED_TOKENS,
        statistics.median(per_token["plain"]),
        statistics.median(per_token["tool_call"]),
        calls_parsed,
        errors,
    )
