"""What the dialects share: their tools, tool choices, content and sampling fields written as the
chat request's, and that request validated once, its errors naming the dialect's own fields."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..errors import InvalidRequest
from ..protocol import ChatCompletionRequest

TEXT_ONLY = "content is not supported by this proxy (text only)"


def function_tool(name: str, description: str | None, parameters: dict | None, strict: bool | None = None) -> dict:
    """A chat request's function tool."""
    function: dict[str, Any] = {"name": name}
    if description is not None:
        function["description"] = description
    if parameters is not None:
        function["parameters"] = parameters
    if strict is not None:
        function["strict"] = strict
    return {"type": "function", "function": function}


def named_tool_choice(name: str) -> dict:
    """The chat request's tool_choice that forces the function `name`."""
    return {"type": "function", "function": {"name": name}}


def text_only(kind: str, param: str) -> InvalidRequest:
    """The 400 for an image, document, file or audio part: a text model cannot read it."""
    return InvalidRequest(f"{kind} {TEXT_ONLY}", param=param, code="model_not_supported")


def given(request, names: tuple[str, ...]) -> dict:
    """The fields of `request` named in `names` that the client set (not None), by name."""
    return {name: value for name in names if (value := getattr(request, name)) is not None}


def chat_request(fields: dict, tool_params: list[str]) -> ChatCompletionRequest:
    """`fields` validated as the chat request. The chat schema's own checks of the tools (parameters a
    grammar can follow, unique names, a tool_choice among them) are the only ones; a refusal names the
    dialect's field: `tool_params[n]` is where the parameters of the chat request's tool n came from."""
    image_params = _take_image_params(fields.get("messages") or ())
    try:
        request = ChatCompletionRequest.model_validate(fields)
    except InvalidRequest as exc:
        raise as_sent(exc, tool_params) from None
    request._dialect_tool_params = tuple(tool_params)
    request._dialect_image_params = tuple(image_params)
    return request


def image_part(url: str, sent_as: str) -> dict:
    """The chat request's part for a dialect's image at `url` (a data URL or an http(s) URL), which the
    client sent at `sent_as` (named so if the image is refused)."""
    return {"type": "image_url", "image_url": {"url": url}, SENT_AS: sent_as}


SENT_AS = "sent_as"


def _take_image_params(messages) -> list[str]:
    """Where each image part of the translated `messages` was sent, in order, taken out of the parts."""
    return [
        part.pop(SENT_AS)
        for message in messages
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if isinstance(part, dict) and SENT_AS in part
    ]


def as_sent(error: InvalidRequest, tool_params: Sequence[str]) -> InvalidRequest:
    """`error` naming the client's own field where it names a chat request's tool parameters
    (`tool_params[n]`: where tool n's came from); else `error` itself."""
    param = _dialect_param(error.param, tool_params)
    return error if param == error.param else InvalidRequest(error.message, param=param, code=error.code)


_TOOL_PARAMETERS = re.compile(r"^tools\.(\d+)\.function\.parameters")


def _dialect_param(param: str | None, tool_params: Sequence[str]) -> str | None:
    match = _TOOL_PARAMETERS.match(param or "")
    if match is None or int(match[1]) >= len(tool_params):
        return param
    return tool_params[int(match[1])] + param[match.end() :]


SET_ASIDE_TOOLS_HEADER = "X-Tools-Set-Aside"
_HEADER_WORD = re.compile(r"[A-Za-z0-9_.:/-]{1,64}")


def header_list(names) -> str:
    """Names a client sent (a tool's, an item's kind), as a header's comma-separated list: one that is not
    a plain word (it could hold a line break, or anything a header may not) is written `other`."""
    return ", ".join(dict.fromkeys(name if _HEADER_WORD.fullmatch(name) else "other" for name in names))


def set_aside_header(tool_names: list[str]) -> dict[str, str]:
    """The response header naming the tools left out of the prompt because only the API's own
    servers run them (web search, code execution, ...), so nobody is misled; none when there are none."""
    return {SET_ASIDE_TOOLS_HEADER: header_list(tool_names)} if tool_names else {}
