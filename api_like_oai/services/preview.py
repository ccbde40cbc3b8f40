"""The chat-prompt preview (/v1/internal/chat-prompt): what a chat request would send upstream,
rendered as the chat path renders it, without generating."""

from __future__ import annotations

from ..protocol import ChatCompletionRequest
from .chat import plan_tools, render_prompt, tool_constraint
from .media import resolve_images
from .models import ServedModel


def chat_prompt(chat_request: ChatCompletionRequest, model: ServedModel) -> dict:
    """The prompt text and stop strings; with tools, their format and the grammar that would hold them."""
    chat_request, _ = resolve_images(model.adjust(chat_request), model)  # images shown as their placeholders
    tool_plan = plan_tools(chat_request, model)
    prompt = render_prompt(chat_request, model, tool_plan=tool_plan)
    answer = {"prompt": prompt.text, "stop": list(prompt.stop)}
    if tool_plan is not None:
        constraint = tool_constraint(chat_request, model, tool_plan)
        answer |= {
            "tool_call_format": tool_plan.format.name,
            "grammar": constraint.get("grammar"),
            "grammar_lazy": constraint.get("grammar_lazy", False),
        }
    return answer
