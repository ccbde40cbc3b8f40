"""A fake llama-server that plays a model driving an agent through a two-step shell task.

It serves Qwen2.5's own chat template on /props (Hermes tool calls), so the proxy runs with no
template flag, as it would in front of a real Qwen2.5. Each /completion is answered from the prompt
the proxy rendered, the way a model reads it: with shell tools offered and no tool result yet, a
call writing `a.txt`; after one result, a call writing `b.txt` from `a.txt` and printing it; after
two, the final answer, which quotes what the second command printed, so a result that never
reached the prompt shows in the answer. Without tools it answers in plain text.
"""

from __future__ import annotations

import json
import re

from .fake_llamacpp import FakeLlamaCpp
from .servers import ROOT

QWEN_TEMPLATE = (ROOT / "conversation_templates" / "qwen2.5.jinja").read_text()

FIRST_COMMAND = "printf 'alpha\\n' > a.txt"
SECOND_COMMAND = "tr a-z A-Z < a.txt > b.txt && cat b.txt"
SECOND_OUTPUT = "ALPHA"
FILES_WRITTEN = {"a.txt": "alpha\n", "b.txt": "ALPHA\n"}
FINAL_ANSWER = f"Both files are written; b.txt holds {SECOND_OUTPUT}."
LOST_RESULT_ANSWER = "The second command's output never reached me."
PLAIN_ANSWER = "Shell task"

# The shell tools agents offer, and how each takes a command line.
SHELL_TOOLS = {
    "Bash": lambda command: {"command": command, "description": "Write a file"},       # Claude Code
    "exec_command": lambda command: {"cmd": command},                                    # Codex (unified exec)
    "shell": lambda command: {"command": ["bash", "-lc", command]},                      # Codex (classic)
    "shell_command": lambda command: {"command": command},                               # Codex (shell_command)
    "run_shell": lambda command: {"command": command},                                   # the SDK tests' own tool
}

_TOOLS_BLOCK = re.compile(r"<tools>\n(.*?)\n</tools>", re.DOTALL)  # not the "<tools></tools>" in the preamble
_LAST_RESPONSE = re.compile(r"<tool_response>\n(.*?)\n</tool_response>", re.DOTALL)


def offered_tools(prompt: str) -> list[str]:
    """The names of the tools in the prompt's <tools></tools> block, in order."""
    blocks = _TOOLS_BLOCK.findall(prompt)
    tools = [json.loads(line) for line in blocks[-1].splitlines()] if blocks else []
    return [tool.get("function", tool).get("name") for tool in tools]


def shell_tool(prompt: str) -> str | None:
    return next((name for name in offered_tools(prompt) if name in SHELL_TOOLS), None)


def tool_call(name: str, command: str) -> list[str]:
    """A Hermes tool call as a model streams it: split inside the marker, the name and the arguments."""
    call = json.dumps({"name": name, "arguments": SHELL_TOOLS[name](command)})
    cut = len(call) // 2
    return ["<tool", "_call>\n", call[:12], call[12:cut], call[cut:], "\n</tool_call>"]


def agent_turn(body: dict) -> list[str]:
    """The tokens of the next answer to the rendered prompt in `body`."""
    prompt = body.get("prompt", "")
    prompt = prompt if isinstance(prompt, str) else ""
    tool = shell_tool(prompt)
    results = _LAST_RESPONSE.findall(prompt)
    if tool is None:
        return [PLAIN_ANSWER]
    if not results:
        return ["I will", " write a.txt first.\n", *tool_call(tool, FIRST_COMMAND)]
    if len(results) == 1:
        return ["Now", " b.txt.\n", *tool_call(tool, SECOND_COMMAND)]
    answer = FINAL_ANSWER if SECOND_OUTPUT in results[-1] else LOST_RESULT_ANSWER
    return [answer[:10], answer[10:]]


def scripted_agent_upstream() -> FakeLlamaCpp:
    """A started fake llama-server with Qwen2.5's template that answers with `agent_turn`."""
    props = {"default_generation_settings": {"n_ctx": 262144}, "build_info": "b7000-scripted"}
    return FakeLlamaCpp(chat_template=QWEN_TEMPLATE, props_extra=props, script=agent_turn).start()
