"""Agent programs finish a two-step shell task through the proxy, with no request refused.

The upstream is tests/scripted_model.py: a fake llama-server with Qwen2.5's template that plays a
model writing Hermes tool calls (a.txt, then b.txt from a.txt, then an answer quoting the second
command's output). Claude Code and Codex CLI are the real programs, pinned (issue 16); the OpenAI
Agents SDK and LangGraph's ReAct agent are the libraries agents are written with. Each run must
end with the model's final answer, leave both files as the commands wrote them, and leave no
access-log line with a 4xx status: a program that works only through its own fallbacks after a
refusal does not count.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest
from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent
from openai import AsyncOpenAI

from ..agent_programs import API_KEY, access_statuses, run_claude_code, run_codex
from ..scripted_model import FILES_WRITTEN, FINAL_ANSWER, THOUGHTS, scripted_agent, scripted_thinking_agent

TASK = "Write alpha into a.txt, then write its upper case into b.txt."


@pytest.fixture(scope="module")
def agent_upstream(start_fake):
    return start_fake(**scripted_agent())


@pytest.fixture(scope="module")
def agent_proxy(agent_upstream, start_proxy):
    """The proxy as a user starts it in front of a Qwen2.5 server: no template flag, a key."""
    return start_proxy("--llama-api", agent_upstream.url, "--api-key", API_KEY)


@pytest.fixture
def workdir(tmp_path) -> Path:
    (tmp_path / "work").mkdir()
    (tmp_path / "home").mkdir()
    return tmp_path / "work"


@pytest.fixture
def refusals(agent_proxy):
    """The access-log lines with a 4xx status written during the test."""
    start = len(agent_proxy.log())
    return lambda: [(endpoint, status) for endpoint, status in access_statuses(agent_proxy.log()[start:]) if 400 <= status < 500]


def assert_task_done(workdir: Path, answer: str, refusals, output: str = "") -> None:
    assert answer == FINAL_ANSWER, output[-3000:]
    assert {name: (workdir / name).read_text() for name in FILES_WRITTEN} == FILES_WRITTEN
    refused = refusals()
    assert refused == [], f"requests answered 4xx (endpoint, status): {refused}"


# --- the real programs --------------------------------------------------------------------------


@pytest.mark.parametrize("settings", [{}, {"ANTHROPIC_MODEL": "qwen2.5"}], ids=["default-model", "named-model"])
def test_claude_code_finishes_a_shell_task(agent_proxy, workdir, refusals, settings):
    """`claude -p` with its default model (its requests then carry a per-turn `output_config` on the
    mid-conversation system turn) and with a model the user names (32000 max_tokens, effort high)."""
    run = run_claude_code(agent_proxy.url, TASK, workdir, workdir.parent / "home", settings)
    assert run.returncode == 0, run.output[-3000:]
    assert_task_done(workdir, run.answer, refusals, run.output)


@pytest.fixture(scope="module")
def thinking_proxy(start_fake, start_proxy):
    upstream = start_fake(**scripted_thinking_agent())
    return start_proxy("--llama-api", upstream.url, "--api-key", API_KEY), upstream


def test_claude_code_hands_back_signed_thoughts_which_reach_the_prompt(thinking_proxy, workdir):
    """The model thinks (<think>) before each tool call: the proxy streams the thought as a signed thinking
    block, Claude Code sends it back with its signature in the next turn, and the proxy accepts it (no
    4xx) and renders it where the template writes an assistant's reasoning; the scripted model answers
    the task only when every earlier thought is in its prompt."""
    proxy, upstream = thinking_proxy
    start = len(proxy.log())
    run = run_claude_code(proxy.url, TASK, workdir, workdir.parent / "home", {})
    assert run.returncode == 0, run.output[-3000:]
    assert run.answer == FINAL_ANSWER, run.output[-3000:]
    assert {name: (workdir / name).read_text() for name in FILES_WRITTEN} == FILES_WRITTEN
    refused = [line for line in access_statuses(proxy.log()[start:]) if 400 <= line[1] < 500]
    assert refused == [], f"requests answered 4xx (endpoint, status): {refused}"
    last_prompt = next(body["prompt"] for body in reversed(upstream.requests) if THOUGHTS[0] in body.get("prompt", ""))
    assert all(f"<think>\n{thought}\n</think>" in last_prompt for thought in THOUGHTS)


def test_codex_finishes_a_shell_task(agent_proxy, workdir, refusals):
    run = run_codex(agent_proxy.url, TASK, workdir, workdir.parent / "home")
    assert run.returncode == 0, run.output[-3000:]
    assert_task_done(workdir, run.answer, refusals, run.output)


# --- the libraries agents are written with -----------------------------------------------------


def shell_in(workdir: Path):
    """The command runner the library agents get as their tool: bash in `workdir`, output returned."""

    def run_shell(command: str) -> str:
        """Run a bash command in the working directory and return what it printed."""
        done = subprocess.run(["bash", "-c", command], cwd=workdir, capture_output=True, text=True, timeout=30)
        return done.stdout + done.stderr

    return run_shell


async def _run_openai_agent(agent: Agent, streamed: bool) -> str:
    if not streamed:
        return (await Runner.run(agent, TASK)).final_output
    result = Runner.run_streamed(agent, TASK)
    async for _ in result.stream_events():
        pass
    return result.final_output


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("model_class", [OpenAIChatCompletionsModel, OpenAIResponsesModel])
def test_openai_agents_sdk_tool_loop(agent_proxy, workdir, refusals, model_class, streamed):
    set_tracing_disabled(True)  # traces would go to OpenAI
    client = AsyncOpenAI(base_url=agent_proxy.url + "/v1", api_key=API_KEY, max_retries=0)
    agent = Agent(
        name="shell",
        instructions="Use the shell to do the task.",
        model=model_class(model="qwen2.5", openai_client=client),
        tools=[function_tool(shell_in(workdir))],
    )
    answer = asyncio.run(_run_openai_agent(agent, streamed))
    assert_task_done(workdir, answer, refusals)


@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")  # LangGraph 1.x, still there
@pytest.mark.parametrize("streaming", [False, True], ids=["whole", "streamed"])
def test_langgraph_react_agent_tool_loop(agent_proxy, workdir, refusals, streaming):
    model = ChatOpenAI(base_url=agent_proxy.url + "/v1", api_key=API_KEY, model="qwen2.5", streaming=streaming, max_retries=0)
    agent = create_react_agent(model, [tool(shell_in(workdir))])
    state = agent.invoke({"messages": [("user", TASK)]})
    assert_task_done(workdir, state["messages"][-1].content, refusals)
