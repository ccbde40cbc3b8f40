"""Agent sessions through all three APIs (chat completions, Anthropic's Messages, the Responses API),
against the scripted fake llama.cpp, asserting on the prompt each request sends upstream:

- a system or developer message in the middle of a conversation reaches a template that refuses one
  ("System message must be at the beginning") in its place, as a marked instruction: no 400;
- a session of one task and many tool rounds that outgrows the context keeps running: its oldest
  rounds are dropped (X-Tool-Rounds-Dropped), in steps, so the turns between steps extend one prompt;
- each turn's prompt starts with the previous turn's (llama.cpp reuses its cache), for the shipped
  tool templates and for tools written into the prompt."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
import requests

from ..fake_llamacpp import FakeLlamaCpp
from ..unit.test_system_turns import QWEN35_LIKE

SYSTEM = "You run shell commands for the user. Be careful."
TASK = "Count the files in the project."
RUN = {
    "name": "run",
    "description": "Run a shell command.",
    "schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
}
API_PATHS = {"chat": "/v1/chat/completions", "anthropic": "/v1/messages", "responses": "/v1/responses"}
APIS = sorted(API_PATHS)


@dataclass
class Session:
    """One agent session, written as each API's request: the system prompt, the task, tool rounds (a
    call and its result), and instructions the agent added after some rounds."""

    rounds: list[tuple[str, str]] = field(default_factory=list)  # (command, result)
    instructions: dict[int, str] = field(default_factory=dict)  # after how many rounds -> text
    system: str = SYSTEM

    def grown(self, command: str, result: str) -> Session:
        return Session([*self.rounds, (command, result)], dict(self.instructions), self.system)

    def body(self, api: str) -> dict:
        return {"chat": self._chat, "anthropic": self._anthropic, "responses": self._responses}[api]()

    def _chat(self) -> dict:
        messages = [{"role": "system", "content": self.system}, {"role": "user", "content": TASK}]
        for n, (command, result) in enumerate(self.rounds):
            call = {
                "id": _call_id(n),
                "type": "function",
                "function": {"name": "run", "arguments": json.dumps({"command": command})},
            }
            messages += [
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": _call_id(n), "content": result},
            ]
            if n + 1 in self.instructions:
                messages.append({"role": "system", "content": self.instructions[n + 1]})
        tools = [
            {
                "type": "function",
                "function": {"name": RUN["name"], "description": RUN["description"], "parameters": RUN["schema"]},
            }
        ]
        return {"model": "m", "messages": messages, "tools": tools, "max_tokens": 100}

    def _anthropic(self) -> dict:
        messages = [{"role": "user", "content": TASK}]
        for n, (command, result) in enumerate(self.rounds):
            messages += [
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": _call_id(n), "name": "run", "input": {"command": command}}],
                },
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": _call_id(n), "content": result}]},
            ]
            if n + 1 in self.instructions:  # as Claude Code sends them
                messages.append({"role": "system", "content": self.instructions[n + 1]})
        tools = [{"name": RUN["name"], "description": RUN["description"], "input_schema": RUN["schema"]}]
        return {"model": "m", "system": self.system, "messages": messages, "tools": tools, "max_tokens": 100}

    def _responses(self) -> dict:
        items: list[dict] = [{"role": "user", "content": TASK}]
        for n, (command, result) in enumerate(self.rounds):
            items += [
                {"type": "function_call", "call_id": _call_id(n), "name": "run", "arguments": json.dumps({"command": command})},
                {"type": "function_call_output", "call_id": _call_id(n), "output": result},
            ]
            if n + 1 in self.instructions:
                items.append({"type": "message", "role": "developer", "content": self.instructions[n + 1]})
        tools = [{"type": "function", "name": RUN["name"], "description": RUN["description"], "parameters": RUN["schema"]}]
        return {"model": "m", "instructions": self.system, "input": items, "tools": tools, "max_output_tokens": 100}


def _call_id(n: int) -> str:
    return f"call{n:05d}"


def send(proxy, upstream: FakeLlamaCpp, api: str, session: Session) -> tuple[requests.Response, str]:
    """The proxy's answer to `session` on `api`, and the prompt it sent upstream."""
    response = requests.post(proxy.url + API_PATHS[api], json=session.body(api), timeout=30)
    assert response.status_code == 200, response.text
    return response, next(body["prompt"] for body in reversed(upstream.requests) if "prompt" in body)


# --- mid-conversation system and developer messages ---------------------------------------------


@pytest.fixture(scope="module")
def strict_proxy(fake, start_proxy, tmp_path_factory):
    """A proxy whose template raises on a system message anywhere but first, as Qwen3.5's does."""
    template = tmp_path_factory.mktemp("templates") / "qwen35-like.jinja"
    template.write_text(QWEN35_LIKE)
    return start_proxy("--llama-api", fake.url, "--chat-template", str(template))


LATE = "The user is watching: explain each command."
INSTRUCTED = Session([("ls", "a.txt b.txt")], {1: LATE})
# The Messages API joins these when its translation passes Claude Code's mid-conversation system turns
# on (the anthropic dialect's part of issue 16); until then it refuses them before any prompt is made.
WITH_LATE_INSTRUCTIONS = ["chat", "responses"]


@pytest.mark.parametrize("api", WITH_LATE_INSTRUCTIONS)
def test_a_late_instruction_keeps_its_place_where_the_template_refuses_it(fake, strict_proxy, api):
    _, prompt = send(strict_proxy, fake, api, INSTRUCTED)
    assert prompt.startswith("<|im_start|>system\nYou run shell commands for the user. Be careful.\n\n# Tools")
    assert prompt.endswith(
        "<|im_start|>user\n<tool_response>\na.txt b.txt\n\n"
        "<system-instruction>\nThe user is watching: explain each command.\n</system-instruction>\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


def test_a_late_developer_message_on_chat_completions_is_a_late_instruction(fake, strict_proxy):
    body = INSTRUCTED.body("chat")
    body["messages"][-1]["role"] = "developer"
    response = requests.post(strict_proxy.url + API_PATHS["chat"], json=body, timeout=30)
    assert response.status_code == 200, response.text
    assert "a.txt b.txt\n\n<system-instruction>\nThe user is watching" in fake.requests[-1]["prompt"]


@pytest.fixture(scope="module")
def no_system_role_proxy(fake, start_proxy):
    return start_proxy("--llama-api", fake.url, "--chat-prompt-model", "gemma")


@pytest.mark.parametrize("api", APIS)
def test_a_template_without_a_system_role_gets_the_system_prompt_in_the_first_user_turn(fake, no_system_role_proxy, api):
    """Gemma's template refuses any system message (a 400 before); Claude Code and Codex always send one."""
    _, prompt = send(no_system_role_proxy, fake, api, Session())
    assert prompt.startswith("<start_of_turn>user\n<system-instruction>\n" + SYSTEM + "\n\n# Tools")
    assert prompt.endswith("</system-instruction>\n\n" + TASK + "<end_of_turn>\n<start_of_turn>model\n")


# --- prompts that extend the previous turn's ----------------------------------------------------

TOOL_TEMPLATES = ["qwen2.5", "llama-3.1", "mistral-v3", "chatml"]  # chatml: tools written into the prompt


@pytest.fixture(scope="module")
def template_proxies(fake, start_proxies):
    proxies = start_proxies(*(("--llama-api", fake.url, "--chat-prompt-model", name) for name in TOOL_TEMPLATES))
    return dict(zip(TOOL_TEMPLATES, proxies, strict=True))


def session_turns(rounds: int, instructions: dict[int, str] | None = None) -> list[Session]:
    """The session after 0, 1, ... `rounds` rounds."""
    turns = [Session(instructions=dict(instructions or {}))]
    for n in range(rounds):
        turns.append(turns[-1].grown(f"ls dir{n}", f"file{n}.txt"))
    return turns


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("name", TOOL_TEMPLATES)
def test_each_turn_extends_the_previous_turns_prompt(fake, template_proxies, name, api):
    """Turn N+1's prompt starts with turn N's, generation prompt included (the model's answer at turn N
    is the call turn N+1 renders after it), so llama.cpp re-reads only the new round."""
    instructions = {2: LATE} if api in WITH_LATE_INSTRUCTIONS else {}
    prompts = [send(template_proxies[name], fake, api, turn)[1] for turn in session_turns(4, instructions)]
    for earlier, later in zip(prompts, prompts[1:], strict=False):
        assert later.startswith(earlier), (earlier, later)
    assert SYSTEM in prompts[-1] and "file3.txt" in prompts[-1]


# --- sessions longer than the context -------------------------------------------------------------

SMALL_CONTEXT = 700  # tokens, as the fake counts them: words


@pytest.fixture(scope="module")
def small_upstream(start_fake):
    return start_fake(props_extra={"default_generation_settings": {"n_ctx": SMALL_CONTEXT}})


@pytest.fixture(scope="module")
def small_proxy(small_upstream, start_proxy):
    return start_proxy("--llama-api", small_upstream.url, "--chat-prompt-model", "qwen2.5")


def long_session(rounds: int) -> Session:
    session = Session()
    for n in range(rounds):
        session = session.grown(f"cat part{n}.txt", f"result-{n:03d}: " + "lorem ipsum dolor sit amet " * 8)
    return session


@pytest.mark.parametrize("api", APIS)
def test_a_session_longer_than_the_context_drops_its_oldest_rounds(small_upstream, small_proxy, api):
    """40 rounds of about 45 words each: far more than 700 tokens. Before, a 400 context_length_exceeded."""
    response, prompt = send(small_proxy, small_upstream, api, long_session(40))
    dropped = int(response.headers["X-Tool-Rounds-Dropped"])
    assert int(response.headers["X-Messages-Dropped"]) == 2 * dropped  # each round: a call and its result
    assert 0 < dropped < 40
    assert SYSTEM in prompt and TASK in prompt
    shown = [n for n in range(40) if f"result-{n:03d}:" in prompt]
    assert shown == list(range(dropped, 40))  # the latest rounds, all of them
    assert shown == [n for n in range(40) if f"part{n}.txt" in prompt]  # each call with its result
    assert len(prompt.split()) + int(response.headers["X-Max-Tokens-Effective"]) <= SMALL_CONTEXT


@pytest.mark.parametrize("api", APIS)
def test_the_turns_between_two_drops_extend_one_prompt(small_upstream, small_proxy, api):
    """Rounds go in steps of an eighth of the context: while a turn drops what the previous one did,
    its prompt starts with the previous prompt; the drops come in steps, not at every turn."""
    answers = [send(small_proxy, small_upstream, api, long_session(rounds)) for rounds in range(30, 42)]
    dropped = [int(response.headers["X-Tool-Rounds-Dropped"]) for response, _ in answers]
    for (earlier, later), (dropped_before, dropped_after) in zip(
        zip(answers, answers[1:], strict=False), zip(dropped, dropped[1:], strict=False), strict=True
    ):
        assert later[1].startswith(earlier[1]) == (dropped_before == dropped_after)
    assert len(set(dropped)) <= len(dropped) // 2
