"""Hugging Face style Jinja chat templates, rendered only in Jinja's immutable sandbox.

A template from a GGUF file or the internet is untrusted code (CVE-2024-34359), so it is
compiled in `ImmutableSandboxedEnvironment`: attribute walks such as `''.__class__` raise
`SecurityError`, which we turn into a clean `TemplateError`.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..digests import DigestCache, digest
from ..errors import TemplateError
from .base import ChatPrompt, FormatterOptions


class TemplateRaised(Exception):
    """What a template's own `raise_exception(message)` throws."""


def _raise_exception(message):
    raise TemplateRaised(message)


def _strftime_now(format_string):
    return datetime.now().strftime(format_string)


_JSON_TEXTS = DigestCache(max_entries=256)  # per worker: the tools an agent resends, as templates write them


def _tojson(value, indent=None, ensure_ascii=False, separators=None, sort_keys=False):
    # HF's tojson: unlike Jinja's built-in, it does not HTML-escape, which would corrupt prompts.
    def write() -> str:
        return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, separators=separators, sort_keys=sort_keys)

    if not isinstance(value, (dict, list)):
        return write()  # scalars: writing them is cheaper than a digest
    value_digest = digest(value)
    key = None if value_digest is None else (value_digest, indent, ensure_ascii, str(separators), sort_keys)
    return _JSON_TEXTS.get(key, write)


class _StrictSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, failing loudly: an unsafe attribute raises at once instead of
    rendering as an empty Undefined, so a probing template is refused rather than half-rendered."""

    def unsafe_undefined(self, obj, attribute):
        raise SecurityError(f"access to attribute {attribute!r} of a {type(obj).__name__!r} object is unsafe")


class _GenerationTag(jinja2.ext.Extension):
    """HF's `{% generation %}...{% endgeneration %}`, which marks the assistant's tokens for training
    masks (LFM2.5's and Laguna's templates use it): for a prompt, its body as it is."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


@functools.lru_cache(maxsize=1)
def _environment() -> ImmutableSandboxedEnvironment:
    env = _StrictSandbox(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols", _GenerationTag])
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.filters["tojson"] = _tojson
    return env


@functools.lru_cache(maxsize=64)
def compile_template(source: str) -> jinja2.Template:
    """The compiled template for `source`, cached by content; TemplateError if it does not parse."""
    try:
        return _environment().from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(f"chat template does not parse: {exc.message} (line {exc.lineno})") from exc


_TURN_MARKER = "\x00api-like-oai:generation-starts-here\x00"


@dataclass(frozen=True)
class JinjaFormatter:
    """Renders `template_source` with HF's variables; `name` says where the source came from."""

    template_source: str
    options: FormatterOptions = FormatterOptions()
    source: str = "chat_template"
    name: str = "inline"

    def __post_init__(self):
        compile_template(self.template_source)  # fail at start-up, not on the first request

    def describe(self) -> dict:
        return {"source": self.source, "name": self.name}

    def render(
        self, messages, *, add_generation_prompt=True, continue_final_message=False, tools=None, template_variables=None
    ) -> ChatPrompt:
        opens_other_role = add_generation_prompt and not continue_final_message and self.options.response_role != "assistant"
        if opens_other_role:
            # Templates hard-code the assistant's turn; open the response role's turn instead by
            # rendering a turn of that role around a marker and cutting at the marker.
            messages = [*messages, {"role": self.options.response_role, "content": _TURN_MARKER}]
        variables = {
            **(template_variables or {}),  # chat_template_kwargs & co.; never over what follows
            "messages": messages,
            "add_generation_prompt": add_generation_prompt and not continue_final_message and not opens_other_role,
            "bos_token": self.options.bos_token,
            "eos_token": self.options.eos_token,
        }
        if tools is not None:
            variables["tools"] = tools
        text = self._render(variables)
        if opens_other_role:
            if _TURN_MARKER not in text:
                raise TemplateError(f"the chat template writes no turn for the response role {self.options.response_role!r}")
            text = text[: text.rindex(_TURN_MARKER)]
        elif continue_final_message:
            text = _cut_after_final_message(text, messages)
        if self.options.upstream_adds_bos and self.options.bos_token:
            text = text.removeprefix(self.options.bos_token)  # llama.cpp adds its own
        return ChatPrompt(text, (self.options.eos_token,) if self.options.eos_token else ())

    def knows_role(self, role: str) -> bool:
        """Whether the template's text mentions `role` (a template for the developer role does)."""
        return f"'{role}'" in self.template_source or f'"{role}"' in self.template_source

    def _render(self, variables: dict) -> str:
        try:
            return compile_template(self.template_source).render(variables)
        except TemplateRaised as exc:
            raise TemplateError(f"chat template refused the conversation: {exc}") from exc
        except SecurityError as exc:
            raise TemplateError(f"chat template tried an unsafe operation: {exc}") from exc
        except jinja2.TemplateError as exc:
            raise TemplateError(f"chat template failed: {exc}") from exc
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            raise TemplateError(f"chat template failed on this conversation: {exc}") from exc


def _cut_after_final_message(text: str, messages: list[dict]) -> str:
    """`text` ending right after the last message's content, so generation continues it."""
    final_content = messages[-1]["content"] if messages else ""
    position = text.rfind(final_content) if final_content else -1
    if position < 0:
        raise TemplateError("continue_final_message: the template does not contain the final message's content verbatim")
    return text[: position + len(final_content)]
