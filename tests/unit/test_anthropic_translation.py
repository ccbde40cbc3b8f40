"""What Claude Code sends on Anthropic's Messages API, translated into the chat request: late system
turns in place, every tool field, server tools set aside, thinking and effort reaching the template,
this installation's thoughts carried back (and another server's left out), the billing header kept
out of the prompt."""

from __future__ import annotations

import pytest

from api_like_oai.dialects import anthropic, anthropic_translation
from api_like_oai.errors import InvalidRequest
from api_like_oai.sealing import Seal

SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
CLAUDE = {"model": "claude-sonnet-4-5", "max_tokens": 32000}
HI = [{"role": "user", "content": "Hi"}]
SEAL = Seal(lambda: b"this installation's key")
ELSEWHERE = Seal(lambda: b"another server's key")


def chat_of(body: dict, seal: Seal | None = SEAL):
    return anthropic_translation.to_chat_request(anthropic.MessagesRequest.model_validate({**CLAUDE, **body}), seal)


def messages_of(body: dict, seal: Seal | None = SEAL) -> list[dict]:
    return chat_of(body, seal).model_dump(exclude_none=True)["messages"]


def test_system_turns_keep_their_place_in_the_conversation():
    body = {
        "system": "You are Claude Code.",
        "messages": [
            {"role": "user", "content": "List the files."},
            {"role": "system", "content": "The user switched to plan mode."},
            {"role": "assistant", "content": "Planning."},
            {
                "role": "system",
                "content": [
                    {"type": "text", "text": "Reminder:", "cache_control": {"type": "ephemeral"}},
                    {"type": "text", "text": "stay in plan mode."},
                ],
            },
            {"role": "user", "content": "Go on."},
        ],
    }
    assert messages_of(body) == [
        {"role": "system", "content": "You are Claude Code."},
        {"role": "user", "content": "List the files."},
        {"role": "system", "content": "The user switched to plan mode."},
        {"role": "assistant", "content": "Planning."},
        {"role": "system", "content": "Reminder:\nstay in plan mode."},
        {"role": "user", "content": "Go on."},
    ]


def test_a_system_turn_holds_text_only():
    body = {"messages": [*HI, {"role": "system", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]}
    with pytest.raises(InvalidRequest) as caught:
        chat_of(body)
    assert caught.value.param == "messages.1.content.0"


def test_every_client_tool_field_is_accepted_and_the_tool_offered():
    bash = {
        "name": "Bash",
        "description": "Run a command.",
        "input_schema": SCHEMA,
        "cache_control": {"type": "ephemeral", "ttl": "1h"},
        "strict": True,
        "eager_input_streaming": True,
        "allowed_callers": ["direct"],
    }
    deferred = {
        "name": "NotebookEdit",
        "description": "Edit a notebook.",
        "input_schema": SCHEMA,
        "defer_loading": True,
        "input_examples": [{"command": "ls -la"}, {"command": "pwd"}],
    }
    tools = chat_of({"messages": HI, "tools": [bash, deferred]}).model_dump(exclude_none=True)["tools"]
    assert tools == [
        {"type": "function", "function": {"name": "Bash", "description": "Run a command.", "parameters": SCHEMA}},
        {
            "type": "function",
            "function": {  # a deferred tool is offered: there is no tool search to load it later
                "name": "NotebookEdit",
                "parameters": SCHEMA,
                "description": 'Edit a notebook.\n\nInput examples:\n{"command": "ls -la"}\n{"command": "pwd"}',
            },
        },
    ]


def test_server_tools_are_set_aside_and_named():
    body = {
        "messages": HI,
        "tools": [
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
            {"name": "Bash", "input_schema": SCHEMA},
            {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"},
            {"type": "code_execution_20250825"},
        ],
    }
    request = anthropic.MessagesRequest.model_validate({**CLAUDE, **body})
    chat = anthropic_translation.to_chat_request(request, SEAL)
    assert [tool.function.name for tool in chat.tools] == ["Bash"]
    assert request.set_aside_tools() == ["web_search", "tool_search_tool_regex", "code_execution_20250825"]


@pytest.mark.parametrize(
    "thinking, effort, expected",
    [
        ({"type": "enabled", "budget_tokens": 2048}, None, {"enable_thinking": True}),
        ({"type": "disabled"}, None, {"enable_thinking": False}),
        ({"type": "between_tools"}, None, {"enable_thinking": False}),
        ({"type": "adaptive"}, "high", {"reasoning_effort": "high"}),  # adaptive: the template's own default
        ({"type": "adaptive", "display": "omitted"}, "max", {"reasoning_effort": "max"}),
        (None, "low", {"reasoning_effort": "low"}),
        ({"type": "enabled", "budget_tokens": 1024}, "medium", {"enable_thinking": True, "reasoning_effort": "medium"}),
    ],
)
def test_thinking_and_effort_reach_the_template(thinking, effort, expected):
    body = {
        "messages": HI,
        **({"thinking": thinking} if thinking else {}),
        **({"output_config": {"effort": effort}} if effort else {}),
    }
    assert chat_of(body).template_variables() == expected


def test_output_format_holds_the_answer_to_the_schema():
    chat = chat_of({"messages": HI, "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}}})
    assert chat.response_format.type == "json_schema"
    assert chat.response_format.to_llamacpp() == {"json_schema": SCHEMA}
    with pytest.raises(InvalidRequest) as caught:
        chat_of({"messages": HI, "output_config": {"format": {"type": "json_schema", "schema": {"type": "nope"}}}})
    assert caught.value.param == "output_config.format.schema"


def assistant_with(*thinking_blocks: dict) -> dict:
    return {
        "messages": [
            *HI,
            {"role": "assistant", "content": [*thinking_blocks, {"type": "text", "text": "Hello."}]},
            {"role": "user", "content": "And?"},
        ]
    }


def test_a_thought_this_proxy_signed_reaches_the_template():
    block = {"type": "thinking", "thinking": "They greet me.", "signature": SEAL.sign(anthropic.THINKING, "They greet me.")}
    assert messages_of(assistant_with(block))[1] == {
        "role": "assistant",
        "content": "Hello.",
        "reasoning_content": "They greet me.",
    }


@pytest.mark.parametrize(
    "block",
    [
        {"type": "thinking", "thinking": "They greet me.", "signature": ELSEWHERE.sign(anthropic.THINKING, "They greet me.")},
        {"type": "thinking", "thinking": "They greet me!", "signature": SEAL.sign(anthropic.THINKING, "They greet me.")},
        {"type": "thinking", "thinking": "Claude's thought.", "signature": "EqQBCkgIARABGAIiQL..."},
        {"type": "thinking", "thinking": "", "signature": ELSEWHERE.wrap(anthropic.THINKING, "They greet me.")},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"},
    ],
)
def test_a_thought_signed_elsewhere_or_altered_is_left_out(block):
    assert messages_of(assistant_with(block))[1] == {"role": "assistant", "content": "Hello."}


@pytest.mark.parametrize(
    "block",
    [
        {"type": "thinking", "thinking": "", "signature": SEAL.wrap(anthropic.THINKING, "They greet me.")},  # display omitted
        {"type": "redacted_thinking", "data": SEAL.wrap(anthropic.THINKING, "They greet me.")},
    ],
)
def test_a_thought_carried_by_this_proxys_token_reaches_the_template(block):
    assert messages_of(assistant_with(block))[1]["reasoning_content"] == "They greet me."


def test_without_a_seal_no_thought_reaches_the_template():
    block = {"type": "thinking", "thinking": "They greet me.", "signature": SEAL.sign(anthropic.THINKING, "They greet me.")}
    assert "reasoning_content" not in messages_of(assistant_with(block), seal=None)[1]


BILLING = "x-anthropic-billing-header: cc_version=2.1.327.a1b; cc_entrypoint=sdk-cli; cch={};"


@pytest.mark.parametrize(
    "system",
    [
        lambda cch: [
            {"type": "text", "text": BILLING.format(cch)},
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Be brief."},
        ],
        lambda cch: BILLING.format(cch) + "\nYou are Claude Code.\nBe brief.",
    ],
)
def test_the_per_request_billing_header_is_kept_out_of_the_prompt(system):
    first, second = (messages_of({"system": system(cch), "messages": HI}) for cch in ("fa690", "0aaa9"))
    assert first == second
    assert first[0] == {"role": "system", "content": "You are Claude Code.\nBe brief."}


def test_claude_codes_other_request_fields_are_accepted():
    body = {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}]}],
        "metadata": {"user_id": "user_3f1c_account__session_9b2e"},
        "cache_control": {"type": "ephemeral"},
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": "high"},
        "context_management": {
            "edits": [
                {"type": "clear_thinking_20251015", "keep": "all"},
                {
                    "type": "clear_tool_uses_20250919",
                    "trigger": {"type": "input_tokens", "value": 180000},
                    "clear_at_least": {"type": "input_tokens", "value": 140000},
                    "clear_tool_inputs": ["Edit", "Write"],
                    "exclude_tools": ["Read"],
                },
                {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 150000}},
            ]
        },
        "diagnostics": {"previous_message_id": "msg_1"},
        "container": "container_1",
        "mcp_servers": [],
        "service_tier": "auto",
        "speed": "standard",
        "stream": True,
    }
    chat = chat_of(body)
    assert chat.messages[0].content == "Hi" and chat.stream is True


def test_a_system_turns_effort_is_the_turns_from_there_on():
    body = {
        "messages": [*HI, {"role": "system", "content": "Env.", "output_config": {"effort": "medium"}}],
        "output_config": {"effort": "high"},
    }
    assert chat_of(body).template_variables() == {"reasoning_effort": "medium"}
    later = {
        "messages": [
            *body["messages"],
            {"role": "assistant", "content": "Ok."},
            {"role": "system", "content": "Think harder now.", "output_config": {"effort": "max"}},
            {"role": "user", "content": "Go."},
        ]
    }
    assert chat_of(later).template_variables() == {"reasoning_effort": "max"}


@pytest.mark.parametrize("field, value", [("output_config", {"effort": "low"}), ("clear_at", "never")])
def test_system_turn_fields_on_other_turns_are_refused(field, value):
    with pytest.raises(InvalidRequest) as caught:
        chat_of({"messages": [{**HI[0], field: value}]})
    assert caught.value.param == f"messages.0.{field}"


def test_a_system_turn_cleared_at_the_next_user_message_shows_until_there_is_one():
    reminder = {"role": "system", "content": "Answer the question just asked.", "clear_at": "next_user_message"}
    assert messages_of({"messages": [*HI, reminder]})[-1] == {"role": "system", "content": reminder["content"]}
    later = messages_of(
        {"messages": [*HI, reminder, {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye."}]}
    )
    assert [m["role"] for m in later] == ["user", "assistant", "user"]


def test_tool_changes_in_a_system_turn_are_written_in_place():
    changes = [
        {"type": "text", "text": "Tools changed."},
        {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "WebFetch"}},
        {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "Bash"}},
        {"type": "tool_addition", "tool": {"type": "mcp_toolset_reference", "server_name": "github"}},
    ]
    assert messages_of({"messages": [*HI, {"role": "system", "content": changes}]})[-1] == {
        "role": "system",
        "content": "Tools changed.\nThe tool WebFetch is available from here on.\n"
        "The tool Bash is no longer available: do not call it.",
    }


def test_a_tool_searchs_result_names_the_tools_it_loaded():
    body = {
        "messages": [
            *HI,
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "ToolSearch", "input": {"query": "fetch"}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [
                            {"type": "tool_reference", "tool_name": "WebFetch"},
                            {"type": "tool_reference", "tool_name": "CronCreate"},
                        ],
                    },
                    {"type": "text", "text": "Tool loaded.", "cache_control": {"type": "ephemeral"}},
                ],
            },
        ]
    }
    assert messages_of(body)[-2:] == [
        {"role": "tool", "tool_call_id": "toolu_1", "content": "Tool loaded: WebFetch\nTool loaded: CronCreate"},
        {"role": "user", "content": "Tool loaded."},
    ]


def test_deferred_tools_are_offered_after_the_others():
    """Claude Code inserts the tools a search loads, deferred, in alphabetical order: offered last, they
    change the prompt as late as possible. A refusal still names the tool's own index."""
    tools = [
        {"name": "Agent", "input_schema": SCHEMA},
        {"name": "CronCreate", "input_schema": SCHEMA, "defer_loading": True},
        {"name": "Bash", "input_schema": SCHEMA},
        {"name": "Placeholder", "input_schema": SCHEMA, "defer_loading": True},
        {"name": "Write", "input_schema": SCHEMA},
    ]
    chat = chat_of({"messages": HI, "tools": tools})
    assert [tool.function.name for tool in chat.tools] == ["Agent", "Bash", "Write", "CronCreate", "Placeholder"]
    tools[1]["input_schema"] = {"type": "string"}
    with pytest.raises(InvalidRequest) as caught:
        chat_of({"messages": HI, "tools": tools})
    assert caught.value.param == "tools.1.input_schema"
