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
    "Bash": lambda command: {"command": command, "description": "Write a file"},  # Claude Code
    "exec_command": lambda command: {"cmd": command},  # Codex (unified exec)
    "shell": lambda command: {"command": ["bash", "-lc", command]},  # Codex (classic)
    "shell_command": lambda command: {"command": command},  # Codex (shell_command)
    "run_shell": lambda command: {"command": command},  # the SDK tests' own tool
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


SCRIPTED_PROPS = {"default_generation_settings": {"n_ctx": 262144}, "build_info": "b7000-scripted"}


def scripted_agent() -> dict:
    """The fields of a fake llama-server (FakeLlamaCpp's) with Qwen2.5's template that answers with `agent_turn`."""
    return {"chat_template": QWEN_TEMPLATE, "props_extra": dict(SCRIPTED_PROPS), "script": agent_turn}


# --- a model that thinks before each call -----------------------------------------------------------

# Qwen3's template in miniature: tools and the effort in the system turn, an assistant's
# reasoning_content as <think>, Hermes tool calls and responses, system turns anywhere, and the
# empty thought that enable_thinking=false writes.
THINKING_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "{% if reasoning_effort is defined %}Effort: {{ reasoning_effort }}\n\n{% endif %}"
    "# Tools\n<tools>\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}</tools>\n"
    'Call a tool as <tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
    "{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'system' and loop.first and tools %}"
    "{% elif m.role == 'assistant' %}<|im_start|>assistant\n"
    "{% if m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n</think>\n\n{% endif %}"
    "{{ m.content or '' }}"
    '{% for c in m.tool_calls or [] %}\n<tool_call>\n{"name": "{{ c.function.name }}", "arguments": '
    "{{ c.function.arguments | tojson }}}\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)
THOUGHTS = ("The file a.txt comes first.", "Now b.txt, from what a.txt holds.")  # before the first and second call
LOST_THOUGHT_ANSWER = "My earlier thoughts never came back to me."


def thinking_agent_turn(body: dict) -> list[str]:
    """agent_turn, with a thought (<think>...</think>) before each tool call; the final answer only if
    every earlier thought came back into the prompt as the template writes it, else LOST_THOUGHT_ANSWER."""
    prompt = body.get("prompt", "") if isinstance(body.get("prompt"), str) else ""
    tokens = agent_turn(body)
    step = len(_LAST_RESPONSE.findall(prompt))
    if shell_tool(prompt) is None:
        return tokens
    if not all(f"<think>\n{thought}\n</think>" in prompt for thought in THOUGHTS[:step]):
        return [LOST_THOUGHT_ANSWER]
    if step >= len(THOUGHTS):
        return tokens
    # Written without the template's newlines: text that came back as text, not as a thought, does not count.
    return ["<th", "ink>", THOUGHTS[step][:8], THOUGHTS[step][8:], "</think>", "\n\n", *tokens]


def scripted_thinking_agent() -> dict:
    """The fields of a fake llama-server with a thinking template that answers with `thinking_agent_turn`."""
    return {"chat_template": THINKING_TEMPLATE, "props_extra": dict(SCRIPTED_PROPS), "script": thinking_agent_turn}
