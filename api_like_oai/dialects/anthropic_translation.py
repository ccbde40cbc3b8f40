"""Anthropic's Messages request as the internal chat request (`to_chat_request`): system and messages
(thinking blocks verified with the seal), tools and tool choice, sampling and the template's fields."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from ..errors import InvalidRequest
from ..protocol import ChatCompletionRequest, check_schema
from ..sealing import Seal
from .anthropic import (
    THINKING,
    CountTokensRequest,
    CustomTool,
    ImageBlock,
    InputMessage,
    MessagesRequest,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
)
from .anthropic_mcp import result_text
from .common import chat_request, function_tool, given, image_part, named_tool_choice, text_only


def to_chat_request(
    request: CountTokensRequest, seal: Seal | None = None, mcp_tools: Sequence[tuple[str, dict]] = ()
) -> ChatCompletionRequest:
    """The chat request `request` becomes: system and messages, tools (the client's, then `mcp_tools`:
    (param, chat tool) of its MCP servers' tools) and tool choice, sampling; the chat schema checks the
    tools (a refusal names `tools.N.input_schema`). A thinking block reaches the template only when
    `seal` verifies its signature."""
    messages = chat_messages(request, seal)
    fields: dict[str, Any] = {"model": request.model, "messages": messages}
    tools = request.client_tools()
    if tools or mcp_tools:
        fields["tools"] = [function_tool(tool.name, _described(tool), tool.input_schema) for _, tool in tools] + [
            tool for _, tool in mcp_tools
        ]
    fields |= _tool_choice_fields(request.tool_choice)
    if _continues_last_message(request):
        fields |= {"add_generation_prompt": False, "continue_final_message": True}
    fields |= _template_fields(request)
    if isinstance(request, MessagesRequest):
        fields |= {"max_tokens": request.max_tokens, "stream": bool(request.stream)}
        fields |= given(request, ("temperature", "top_p", "top_k"))
        if request.stop_sequences:
            fields["stop"] = list(request.stop_sequences)
        if request.metadata is not None and request.metadata.user_id:
            fields["user"] = request.metadata.user_id  # a session key for routing (backends/routing.py)
    return chat_request(fields, [f"tools.{n}.input_schema" for n, _ in tools] + [param for param, _ in mcp_tools])


def _template_fields(request: CountTokensRequest) -> dict:
    """thinking (Qwen3's `enable_thinking` switch, as llama-server and vLLM users set it) and the
    effort (`reasoning_effort`) as template variables; output_config.format as the response format."""
    variables: dict[str, Any] = {}
    if request.thinking is not None and request.thinking.type != "adaptive":
        variables["enable_thinking"] = request.thinking.type == "enabled"
    if request.effort() is not None:
        variables["reasoning_effort"] = request.effort()  # "max" too: the template gets the value as sent
    fields: dict[str, Any] = {"chat_template_kwargs": variables} if variables else {}
    output = request.output_config
    if output is not None and output.format is not None:
        check_schema(output.format.json_schema, "output_config.format.schema")
        fields["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": output.format.json_schema},
        }
    return fields


def _described(tool: CustomTool) -> str | None:
    """The tool's description, with its input examples written after it for the model to read."""
    if not tool.input_examples:
        return tool.description
    examples = "\n".join(json.dumps(example, ensure_ascii=False) for example in tool.input_examples)
    return f"{tool.description or ''}\n\nInput examples:\n{examples}".lstrip()


def chat_messages(request: CountTokensRequest, seal: Seal | None = None) -> list[dict]:
    """The system prompt and the turns as chat messages: tool results become `tool` messages, tool
    uses an assistant's `tool_calls`, this proxy's thoughts its `reasoning_content`; `system` turns
    keep their place (one to be cleared at the next user message, until there is one)."""
    messages = []
    system = system_text(request.system)
    if system:
        messages.append({"role": "system", "content": system})
    last_user = max((n for n, message in enumerate(request.messages) if message.role == "user"), default=-1)
    for n, message in enumerate(request.messages):
        _check_system_only_fields(message, n)
        if message.role == "user":
            messages += _user_turn(message, n)
        elif message.role == "system":
            if message.clear_at != "next_user_message" or n > last_user:
                messages.append({"role": "system", "content": _system_turn_text(message, n)})
        else:
            messages += _assistant_turns(message, n, seal)
    return messages


# Claude Code's first system block (2.1.36 on): `x-anthropic-billing-header: cc_version=...; cch=...;`,
# whose cch changes with every request; at the prompt's start it would defeat llama.cpp's prefix cache.
_BILLING_HEADER = re.compile(r"^x-anthropic-billing-header:[^\n]*(\n|$)", re.IGNORECASE | re.MULTILINE)


def system_text(system: str | list[TextBlock] | None) -> str:
    """The system prompt's text, without Claude Code's per-request billing header line."""
    texts = [system or ""] if system is None or isinstance(system, str) else [block.text for block in system]
    return "\n".join(kept for text in texts if (kept := _BILLING_HEADER.sub("", text)))


def _check_system_only_fields(message: InputMessage, n: int) -> None:
    for name in ("output_config", "clear_at"):
        if message.role != "system" and getattr(message, name) is not None:
            raise InvalidRequest(
                f"{name} belongs to system messages only", param=f"messages.{n}.{name}", code="block_not_allowed"
            )


def _system_turn_text(message: InputMessage, n: int) -> str:
    """A system turn's text, its tool changes written as notes in place."""
    if isinstance(message.content, str):
        return message.content
    for m, block in enumerate(message.content):
        if block.type not in ("text", "tool_addition", "tool_removal"):
            raise _unsupported(block.type, f"messages.{n}.content.{m}", "system")
    texts = (block.text if block.type == "text" else block.note() for block in message.content)
    return "\n".join(text for text in texts if text)


def _user_turn(message: InputMessage, n: int) -> list[dict]:
    if isinstance(message.content, str):
        return [{"role": "user", "content": message.content}]
    turns: list[dict] = []
    for m, block in enumerate(message.content):
        param = f"messages.{n}.content.{m}"
        if block.type == "tool_result":
            turns.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": _result_content(block, param)})
        elif block.type in ("text", "image"):
            if not turns or turns[-1]["role"] != "user":
                turns.append({"role": "user", "content": []})
            turns[-1]["content"].append(_user_part(block, param, follows_text=bool(turns[-1]["content"])))
        elif block.type not in ("thinking", "redacted_thinking"):
            raise _unsupported(block.type, param, "user")
    return [_joined(turn) for turn in turns] or [{"role": "user", "content": ""}]


def _user_part(block, param: str, follows_text: bool) -> dict:
    """A text or image block as a chat content part; a text block after another part starts a new line."""
    if block.type == "image":
        return _image_part(block, param)
    return {"type": "text", "text": ("\n" if follows_text else "") + block.text}


def _joined(turn: dict) -> dict:
    """A user turn of text parts only as one string, as before images were taken."""
    parts = turn["content"]
    if isinstance(parts, list) and all(part["type"] == "text" for part in parts):
        return {**turn, "content": "".join(part["text"] for part in parts)}
    return turn


def _image_part(block: ImageBlock, param: str) -> dict:
    """An image block as the chat request's image_url part (a data URL for base64, the URL for url)."""
    source = block.source
    if source.type == "file" or (source.type == "base64" and not source.data) or (source.type == "url" and not source.url):
        what = (
            "file sources (the Files API) are not supported"
            if source.type == "file"
            else f"a {source.type} source needs its {'data' if source.type == 'base64' else 'url'}"
        )
        raise InvalidRequest(f"image: {what}; send a base64 or a url source", param=f"{param}.source", code="not_supported")
    url = source.url if source.type == "url" else f"data:{source.media_type or 'image/png'};base64,{source.data}"
    return image_part(url, param)


def _assistant_turns(message: InputMessage, n: int, seal: Seal | None) -> list[dict]:
    """An assistant turn; one holding the results of MCP calls the proxy ran is cut after each result
    (a `tool` message), as its rounds were; tool listings say nothing to the model."""
    if isinstance(message.content, str) or all(block.type != "mcp_tool_result" for block in message.content):
        return [_assistant_turn(message, n, seal)]
    turns, run = [], []
    for block in message.content:
        if block.type == "mcp_tool_result":
            if run:
                turns.append(_assistant_turn(message.model_copy(update={"content": run}), n, seal))
            turns.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": result_text(block)})
            run = []
        else:
            run.append(block)
    if run:
        turns.append(_assistant_turn(message.model_copy(update={"content": run}), n, seal))
    return turns


def _assistant_turn(message: InputMessage, n: int, seal: Seal | None) -> dict:
    if isinstance(message.content, str):
        return {"role": "assistant", "content": message.content}
    texts, calls, thoughts = [], [], []
    for m, block in enumerate(message.content):
        if block.type == "text":
            texts.append(block.text)
        elif block.type in ("tool_use", "mcp_tool_use"):
            calls.append(
                {
                    "id": block.id,
                    "type": "function",
                    "function": {"name": block.name, "arguments": json.dumps(block.input, ensure_ascii=False)},
                }
            )
        elif block.type in ("thinking", "redacted_thinking"):
            thoughts.append(thought_of(block, seal))
        elif block.type != "mcp_tool_listing":
            raise _unsupported(block.type, f"messages.{n}.content.{m}", "assistant")
    turn: dict = {"role": "assistant", "content": "\n".join(texts) if texts or not calls else None}
    if calls:
        turn["tool_calls"] = calls
    if any(thoughts):
        turn["reasoning_content"] = "\n\n".join(thought for thought in thoughts if thought)
    return turn


def thought_of(block: ThinkingBlock | RedactedThinkingBlock, seal: Seal | None) -> str | None:
    """The thought a thinking block carries back, if this installation signed it: the text its signature
    verifies, or (display "omitted", redacted) the text its token wraps; None for another server's."""
    if seal is None:
        return None
    if block.type == "redacted_thinking":
        return seal.unwrap(THINKING, block.data)
    if block.thinking:
        return block.thinking if seal.verify(THINKING, block.thinking, block.signature) else None
    return seal.unwrap(THINKING, block.signature)


def _result_content(block: ToolResultBlock, param: str) -> str | list[dict]:
    """A tool result's content: its text, or text and image parts when it holds images."""
    prefix = "Error: " if block.is_error else ""
    if block.content is None or isinstance(block.content, str):
        return prefix + (block.content or "")
    parts = [{"type": "text", "text": prefix}] if prefix else []
    for m, part in enumerate(block.content):
        if part.type == "image":
            parts.append(_image_part(part, f"{param}.content.{m}"))
        elif part.type in ("text", "tool_reference"):
            # A tool search's result names the tools it loaded; here every tool is offered from the start.
            text = part.text if part.type == "text" else f"Tool loaded: {part.tool_name}"
            parts.append({"type": "text", "text": ("\n" if len(parts) > bool(prefix) else "") + text})
        else:
            raise _unsupported(part.type, f"{param}.content.{m}", "tool_result")
    return _joined({"content": parts})["content"]


def _unsupported(kind: str, param: str, where: str) -> InvalidRequest:
    if kind == "document":
        return text_only(kind, param)
    return InvalidRequest(f"a {kind!r} block cannot be in a {where} message", param=param, code="block_not_allowed")


def _tool_choice_fields(choice) -> dict:
    if choice is None:
        return {}
    if choice.type == "none":
        return {"tool_choice": "none"}
    fields: dict[str, Any] = {
        "tool_choice": {"auto": "auto", "any": "required"}.get(choice.type) or named_tool_choice(choice.name)
    }
    if choice.disable_parallel_tool_use:
        fields["parallel_tool_calls"] = False
    return fields


def _continues_last_message(request: CountTokensRequest) -> bool:
    """Anthropic's prefill: a conversation that ends with an assistant's text is continued, not answered."""
    last = request.messages[-1]
    if last.role != "assistant":
        return False
    return isinstance(last.content, str) or all(block.type == "text" for block in last.content)
