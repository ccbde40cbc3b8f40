"""The proxy's own format, for templates that know nothing of tools: the tools are described in the
system message (prompts/tools.py says exactly how) and the model is asked to answer a call with
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`. The markers are Hermes's, which many
small models have seen in training; a grammar makes them exact when tool_choice asks for a call."""

from dataclasses import replace

from .hermes import FORMAT as HERMES

FORMAT = replace(
    HERMES,
    name="generic",
    preserved_tokens=(),
    description="the proxy's own: tools described in the system message, calls as "
    '<tool_call>{"name": ..., "arguments": {...}}</tool_call>',
)
