"""What Claude Code sends on /v1/messages, against a scripted llama.cpp whose template thinks in
<think> and calls tools as Hermes does: nothing refused, and each field honoured where the prompt
shows it. The model's thought comes back as a signed thinking block and reaches the template again
on the next turn (another server's does not); late system turns keep their place; effort and
thinking reach the template; server tools are set aside and named; context editing clears old tool
results and thoughts; the per-request billing header never reaches the prompt. Driven by Anthropic's
own SDK, streamed and not."""

from __future__ import annotations

import json

import anthropic
import pytest
import requests

from ..scripted_model import THINKING_TEMPLATE
from .conftest import HERMES_ARGUMENTS, HERMES_CALL

CHAT_TEMPLATE = THINKING_TEMPLATE  # Qwen3's in miniature (tests/scripted_model.py): /props reports it
THOUGHT = "I need the weather."
THINKING_CALL = ["<th", "ink>", "\nI need", " the weather.", "\n</th", "ink>", "\n\n", *HERMES_CALL]
BASH = {
    "name": "Bash",
    "description": "Run a shell command.",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
}
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city"],
    },
}
QUESTION = [{"role": "user", "content": "Weather in Zürich?"}]
BODY = {"model": "claude-sonnet-4-5", "max_tokens": 4096, "messages": QUESTION, "tools": [WEATHER]}
BETAS = [
    "claude-code-20250219",
    "oauth-2025-04-20",
    "interleaved-thinking-2025-05-14",
    "context-management-2025-06-27",
    "prompt-caching-scope-2026-01-05",
    "advanced-tool-use-2025-11-20",
    "effort-2025-11-24",
]


@pytest.fixture(autouse=True)
def thinking_model(fake):
    fake.tokens = THINKING_CALL
    yield


@pytest.fixture(scope="module")
def client(proxy):
    return anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0)


def post(proxy, body: dict, path: str = "/v1/messages", **headers) -> requests.Response:
    response = requests.post(proxy.url + path, json=body, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    return response


def prompt_sent(fake) -> str:
    return fake.requests[-1]["prompt"]


def events_of(response: requests.Response) -> list[dict]:
    return [json.loads(line.removeprefix("data: ")) for line in response.text.splitlines() if line.startswith("data: ")]


def test_the_thought_comes_first_as_a_signed_thinking_block_streamed_or_not(client):
    message = client.messages.create(**BODY)
    assert [block.type for block in message.content] == ["thinking", "text", "tool_use"]
    thinking = message.content[0]
    assert thinking.thinking == THOUGHT and thinking.signature
    assert message.content[1].text == "Let me check. "
    assert (message.content[2].name, message.content[2].input) == ("get_weather", json.loads(HERMES_ARGUMENTS))
    with client.messages.stream(**BODY) as stream:
        streamed = stream.get_final_message()
    assert [block.model_dump() for block in streamed.content[:2]] == [block.model_dump() for block in message.content[:2]]
    assert streamed.content[2].input == message.content[2].input and streamed.stop_reason == "tool_use"


def test_the_thinking_block_streams_as_anthropic_streams_it(proxy):
    events = events_of(post(proxy, {**BODY, "stream": True}))
    thinking = [event for event in events if event.get("index") == 0]
    assert thinking[0] == {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "thinking", "thinking": "", "signature": ""},
    }
    deltas = [event["delta"] for event in thinking[1:-1]]
    assert [delta["type"] for delta in deltas] == ["thinking_delta"] * (len(deltas) - 1) + ["signature_delta"]
    assert "".join(delta.get("thinking", "") for delta in deltas) == THOUGHT
    assert thinking[-1] == {"type": "content_block_stop", "index": 0}


def next_turn(content: list, result: str = "22 degrees") -> list[dict]:
    return [
        *QUESTION,
        {"role": "assistant", "content": content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": content[-1]["id"], "content": result}]},
    ]


def test_a_thought_handed_back_reaches_the_template(client, fake):
    content = [block.model_dump(exclude_none=True) for block in client.messages.create(**BODY).content]
    client.messages.create(**{**BODY, "messages": next_turn(content)})
    assert f"<|im_start|>assistant\n<think>\n{THOUGHT}\n</think>\n\nLet me check. <tool_call>" in prompt_sent(fake)


def test_a_thought_signed_elsewhere_is_left_out_and_not_refused(client, fake):
    content = [block.model_dump(exclude_none=True) for block in client.messages.create(**BODY).content]
    content[0]["signature"] = "ErUBCkYIBRgCIkDl...another server's signature"
    client.messages.create(**{**BODY, "messages": next_turn(content)})
    assert THOUGHT not in prompt_sent(fake)
    assert "<|im_start|>assistant\nLet me check. <tool_call>" in prompt_sent(fake)


def test_an_omitted_thought_travels_in_its_signature(client, fake):
    message = client.messages.create(**BODY, thinking={"type": "adaptive", "display": "omitted"})
    assert message.content[0].type == "thinking" and message.content[0].thinking == ""
    content = [block.model_dump(exclude_none=True) for block in message.content]
    client.messages.create(**{**BODY, "messages": next_turn(content)})
    assert f"<think>\n{THOUGHT}\n</think>" in prompt_sent(fake)


@pytest.mark.parametrize("shared", ["redis", "nothing"])
def test_a_thought_from_one_instance_is_recognised_by_another_sharing_its_store(
    fake, start_proxy, redis_server, tmp_path, shared
):
    """Two instances behind one address, on machines of their own (data directories apart), no
    API_LIKE_OAI_SECRET: sharing a Redis store, a thought one signed reaches the other's template."""
    store = ["--store", redis_server.url.rsplit("/", 1)[0] + "/4"] if shared == "redis" else []
    first, second = (
        start_proxy("--llama-api", fake.url, *store, env={"XDG_DATA_HOME": str(tmp_path / name)}) for name in ("first", "second")
    )
    answered = anthropic.Anthropic(base_url=first.url, api_key="k", max_retries=0).messages.create(**BODY)
    content = [block.model_dump(exclude_none=True) for block in answered.content]
    anthropic.Anthropic(base_url=second.url, api_key="k", max_retries=0).messages.create(
        **{**BODY, "messages": next_turn(content)}
    )
    assert (f"<think>\n{THOUGHT}\n</think>" in prompt_sent(fake)) == (shared == "redis")


@pytest.mark.parametrize(
    "thinking, prompt_end, thinking_block",
    [
        ({"type": "disabled"}, "<|im_start|>assistant\n<think>\n\n</think>\n\n", False),
        ({"type": "enabled", "budget_tokens": 2048}, "<|im_start|>assistant\n", True),
        ({"type": "adaptive"}, "<|im_start|>assistant\n", True),
    ],
)
def test_thinking_reaches_the_template(client, fake, thinking, prompt_end, thinking_block):
    message = client.messages.create(**BODY, thinking=thinking)
    assert prompt_sent(fake).endswith(prompt_end)
    assert (message.content[0].type == "thinking") == thinking_block
    assert [block.type for block in message.content][-2:] == ["text", "tool_use"]


def test_the_effort_reaches_the_template(proxy, fake):
    post(proxy, {**BODY, "output_config": {"effort": "high"}})
    assert prompt_sent(fake).startswith("<|im_start|>system\nEffort: high\n\n# Tools")


def test_system_turns_keep_their_place(client, fake):
    fake.tokens = ["It", " is", " sunny."]
    history = [
        *QUESTION,
        {"role": "system", "content": "Answer in one line."},
        {"role": "assistant", "content": "Checking."},
        {"role": "system", "content": [{"type": "text", "text": "Plan mode is off."}]},
        {"role": "user", "content": "Well?"},
    ]
    message = client.messages.create(**{**BODY, "messages": history})
    assert message.content[0].text == "It is sunny."
    assert (
        "<|im_start|>user\nWeather in Zürich?<|im_end|>\n<|im_start|>system\nAnswer in one line.<|im_end|>\n"
        "<|im_start|>assistant\nChecking.<|im_end|>\n<|im_start|>system\nPlan mode is off.<|im_end|>\n"
        "<|im_start|>user\nWell?<|im_end|>\n"
    ) in prompt_sent(fake)


def billing_header_system(cch: str) -> list[dict]:
    return [
        {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.327.a4f; cc_entrypoint=sdk-cli; cch={cch};"},
        {
            "type": "text",
            "text": "You are Claude Code, Anthropic's official CLI for Claude.",
            "cache_control": {"type": "ephemeral"},
        },
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_two_requests_differing_in_the_billing_header_render_the_same_prompt(proxy, fake, stream):
    prompts = []
    for cch in ("fa690", "0aaa9"):
        post(proxy, {**BODY, "system": billing_header_system(cch), "stream": stream})
        prompts.append(prompt_sent(fake))
    assert prompts[0] == prompts[1]
    assert prompts[0].startswith("<|im_start|>system\nYou are Claude Code, Anthropic's official CLI for Claude.\n\n")
    assert "billing" not in prompts[0]


def test_server_tools_are_set_aside_and_named_deferred_tools_offered(proxy, fake):
    deferred = {
        **BASH,
        "defer_loading": True,
        "eager_input_streaming": True,
        "strict": True,
        "input_examples": [{"command": "ls"}],
        "cache_control": {"type": "ephemeral"},
    }
    tools = [
        WEATHER,
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 8},
        {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"},
        deferred,
    ]
    response = post(proxy, {**BODY, "tools": tools})
    assert response.headers["X-Tools-Set-Aside"] == "web_search, tool_search_tool_regex"
    assert '"name": "Bash"' in prompt_sent(fake) and "web_search" not in prompt_sent(fake)
    assert '{\\"command\\": \\"ls\\"}' in prompt_sent(fake)  # the input examples, in the description
    assert "X-Tools-Set-Aside" not in post(proxy, BODY).headers


def test_unknown_beta_values_and_the_beta_query_are_accepted(proxy):
    response = post(
        proxy,
        {**BODY, "metadata": {"user_id": "user_9f2a_account__session_41c7"}},
        "/v1/messages?beta=true",
        **{
            "anthropic-beta": ",".join([*BETAS, "some-future-beta-2031-01-01"]),
            "anthropic-version": "2023-06-01",
            "x-app": "cli",
        },
    )
    assert response.json()["content"][0]["type"] == "thinking"


def tool_session(rounds: int) -> list[dict]:
    """A task and `rounds` Bash calls, each answered with a long output."""
    messages = [{"role": "user", "content": "Find the bug."}]
    for n in range(rounds):
        messages += [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"toolu_{n}", "name": "Bash", "input": {"command": f"step {n}"}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": f"output of step {n}: " + "word " * 60}
                ],
            },
        ]
    return messages


CLEAR_TOOL_USES = {
    "type": "clear_tool_uses_20250919",
    "trigger": {"type": "input_tokens", "value": 100},
    "keep": {"type": "tool_uses", "value": 1},
    "clear_tool_inputs": True,
}


@pytest.mark.parametrize("stream", [False, True])
def test_context_editing_clears_old_tool_results_from_the_prompt(client, fake, stream):
    fake.tokens = ["Found", " it."]
    request = {
        **BODY,
        "tools": [BASH],
        "messages": tool_session(3),
        "context_management": {"edits": [CLEAR_TOOL_USES]},
        "betas": ["context-management-2025-06-27"],
    }
    if stream:
        with client.beta.messages.stream(**request) as answer:
            message = answer.get_final_message()
    else:
        message = client.beta.messages.create(**request)
    prompt = prompt_sent(fake)
    assert "output of step 0" not in prompt and "output of step 1" not in prompt and "output of step 2" in prompt
    assert prompt.count("[Old tool result content cleared]") == 2
    assert '"arguments": {}' in prompt and '"arguments": {"command": "step 2"}' in prompt
    (applied,) = message.context_management.applied_edits
    assert (applied.type, applied.cleared_tool_uses) == ("clear_tool_uses_20250919", 2)
    assert applied.cleared_input_tokens > 100


def test_context_editing_below_its_trigger_leaves_the_prompt_alone(client, fake):
    fake.tokens = ["Found", " it."]
    edit = {**CLEAR_TOOL_USES, "trigger": {"type": "input_tokens", "value": 100_000}}
    sent_before = len(fake.requests)
    message = client.beta.messages.create(
        **{**BODY, "tools": [BASH], "messages": tool_session(3), "max_tokens": 50}, context_management={"edits": [edit]}
    )
    assert "output of step 0" in prompt_sent(fake)
    assert message.context_management.applied_edits == []
    # A prompt of fewer bytes than the trigger's tokens is below it without a count upstream (and
    # one that leaves room for max_tokens fits without one).
    assert not [body for body in fake.requests[sent_before:] if "content" in body]  # no /tokenize


def test_clear_thinking_keeps_the_latest_thoughts(client, fake):
    first = [block.model_dump(exclude_none=True) for block in client.messages.create(**BODY).content]
    history = next_turn(first)
    second = [block.model_dump(exclude_none=True) for block in client.messages.create(**{**BODY, "messages": history}).content]
    history = [
        *history,
        {"role": "assistant", "content": second},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": second[-1]["id"], "content": "23"}]},
    ]
    for keep, thoughts in (("all", 2), ({"type": "thinking_turns", "value": 1}, 1)):
        client.beta.messages.create(
            **{**BODY, "messages": history}, context_management={"edits": [{"type": "clear_thinking_20251015", "keep": keep}]}
        )
        assert prompt_sent(fake).count(f"<think>\n{THOUGHT}\n</think>") == thoughts


def test_count_tokens_applies_the_edits_and_reports_the_original_count(proxy, fake):
    body = {"model": "claude-sonnet-4-5", "tools": [BASH], "messages": tool_session(3)}
    plain = post(proxy, body, "/v1/messages/count_tokens").json()
    edited = post(proxy, {**body, "context_management": {"edits": [CLEAR_TOOL_USES]}}, "/v1/messages/count_tokens").json()
    assert edited["context_management"] == {"original_input_tokens": plain["input_tokens"]}
    assert edited["input_tokens"] < plain["input_tokens"] - 100


def claude_code_request(cch: str, stream: bool) -> dict:
    """A request as Claude Code writes it (the issue's list): the billing header first in the system
    prompt, cache_control on blocks, a deferred tool at index 10, a system turn at messages.1,
    adaptive thinking, effort, context management and the user id."""
    tools = [{**BASH, "name": f"Tool{n}"} for n in range(10)] + [{**BASH, "defer_loading": True}]
    tools[-2]["cache_control"] = {"type": "ephemeral"}
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "stream": stream,
        "system": billing_header_system(cch),
        "tools": tools,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "List the files."}]},
            {"role": "system", "content": "The date is 2026-07-01."},
            {"role": "user", "content": [{"type": "text", "text": "Go.", "cache_control": {"type": "ephemeral"}}]},
        ],
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": "high"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "metadata": {"user_id": json.dumps({"device_id": "d1", "session_id": "s1"})},
    }


@pytest.mark.parametrize("stream", [False, True])
def test_a_claude_code_request_is_answered(proxy, fake, stream):
    fake.tokens = [
        "<think>",
        "\nList them.",
        "\n</think>",
        "\n\n",
        "<tool_call>\n",
        '{"name": "Bash", "arguments": {"command": "ls"}}',
        "\n</tool_call>",
    ]
    response = post(
        proxy,
        claude_code_request("3e9a1", stream),
        "/v1/messages?beta=true",
        **{"anthropic-beta": ",".join(BETAS), "anthropic-version": "2023-06-01"},
    )
    if stream:
        assert events_of(response)[-2]["delta"]["stop_reason"] == "tool_use"
    else:
        assert [block["type"] for block in response.json()["content"]] == ["thinking", "tool_use"]
    assert "<|im_start|>system\nThe date is 2026-07-01.<|im_end|>" in prompt_sent(fake)
