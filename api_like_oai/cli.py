"""The command line: the original api_like_OAI.py flags plus ours -> Settings -> a WSGI server.

Every flag can also come from the environment as API_LIKE_OAI_<FLAG> (e.g. API_LIKE_OAI_LLAMA_API);
the command line wins.
"""

from __future__ import annotations

import argparse
import codecs
import logging
import os
import sys
from pathlib import Path

import requests

from . import __version__
from .prompts import LegacyFormatter, TemplateChoice, UnknownTemplate
from .prompts.base import FormatterOptions
from .prompts.legacy import DEFAULT_CHAT_PROMPT
from .prompts.resolve import load_plugin, named_formatter
from .settings import Limits, ModelSettings, Settings

ENV_PREFIX = "API_LIKE_OAI_"
LEGACY_DEFAULTS = {"chat_prompt": DEFAULT_CHAT_PROMPT, "user_name": "USER: ",
                   "ai_name": "ASSISTANT: ", "system_name": "ASSISTANT's RULE: ", "stop": "</s>"}

log = logging.getLogger("api_like_oai")


class StartupError(Exception):
    """A setting that makes start-up impossible; printed as one line, no traceback."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="api-like-oai",
        description="An OpenAI-compatible API for llama.cpp's server. A literal \\n in a prompt "
                    "flag means a newline. Every flag may also be set as API_LIKE_OAI_<FLAG>.")
    add = parser.add_argument
    add("--chat-prompt", help="the top prompt in chat completions (default: %(default)r)")
    add("--user-name", help="user name in chat completions (default: %(default)r)")
    add("--ai-name", help="assistant name in chat completions (default: %(default)r)")
    add("--system-name", help="system name in chat completions (default: %(default)r)")
    add("--stop", help="end-of-response marker in chat completions (default: %(default)r)")
    add("--llama-api", default="http://127.0.0.1:8080", help="llama.cpp server address (default: %(default)s)")
    add("--api-key", action="append", default=None,
        help="require this API key (repeat for several; default: no key needed)")
    add("--api-key-file", help="file with one API key per line (keeps keys out of `ps`)")
    add("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    add("--port", type=int, default=8081, help="port to listen on (default: %(default)s)")
    add("--chat-prompt-model", help="a chat template by name: shipped (chatml, llama-2, ...) or FastChat's (vicuna_v1.1, ...)")
    add("--chat-template", help="a Jinja chat template: a file path, an http(s) URL, or the template text")
    add("--chat-formatter", help="your own formatter class, module:Class or an entry-point name")
    add("--response-role", default="assistant", help="role of generated messages (default: %(default)s)")
    add("--model-name", default="llama.cpp", help="the model name /v1/models reports (default: %(default)s)")
    add("--connect-timeout", type=float, default=5.0, help="seconds to connect upstream (default: %(default)s)")
    add("--read-timeout", type=float, default=600.0, help="seconds to wait for upstream data (default: %(default)s)")
    add("--workers", type=int, default=1, help="server worker processes (default: %(default)s)")
    add("--threads", type=int, default=32, help="threads per worker, i.e. concurrent requests (default: %(default)s)")
    add("--grace-period", type=float, default=30.0,
        help="on SIGTERM, seconds in-flight requests may take to finish (default: %(default)s)")
    add("--cors-origins", help="comma-separated origins allowed cross-origin, or * (default: none)")
    add("--max-body-bytes", type=int, default=16 * 1024 * 1024, help="largest request body (default: %(default)s)")
    add("--max-messages", type=int, default=2048, help="most messages in a chat request (default: %(default)s)")
    add("--max-n", type=int, default=16, help="largest n (choices per request) (default: %(default)s)")
    add("--max-tokens-limit", type=int, default=None, help="largest max_tokens a request may ask for (default: none)")
    add("--debug", action="store_true", help="use Werkzeug's development server with the debugger")
    add("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    add("--log-format", default="text", choices=["text", "json"], help="access log format (default: %(default)s)")
    add("--log-prompts", action="store_true", help="log prompts (never logged otherwise)")
    add("--version", action="version", version=f"api-like-oai {__version__}")
    for name, default in LEGACY_DEFAULTS.items():
        parser.set_defaults(**{name: default})
    _defaults_from_environment(parser)
    return parser


def _defaults_from_environment(parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:
        if not action.option_strings or action.dest in ("help", "version"):
            continue
        value = os.environ.get(ENV_PREFIX + action.dest.upper())
        if value is None:
            continue
        if isinstance(action, argparse._StoreTrueAction):
            value = value.lower() in ("1", "true", "yes", "on")
        elif action.type is not None:
            value = action.type(value)
        elif isinstance(action, argparse._AppendAction):
            value = [key for key in value.split(",") if key]
        parser.set_defaults(**{action.dest: value})


def unescape_newlines(value: str) -> str:
    """The original script's rule: a literal backslash-n in a flag value is a newline."""
    return value.replace("\\n", "\n")


def settings_from_args(args: argparse.Namespace) -> Settings:
    legacy_values = {name: unescape_newlines(getattr(args, name)) for name in LEGACY_DEFAULTS}
    template_text, template_name = load_chat_template(args.chat_template)
    choice = TemplateChoice(
        chat_formatter=args.chat_formatter, chat_template=template_text,
        chat_template_name=template_name, chat_prompt_model=args.chat_prompt_model,
        legacy=LegacyFormatter(**legacy_values),
        legacy_explicit=any(legacy_values[n] != d for n, d in LEGACY_DEFAULTS.items()),
        response_role=args.response_role)
    check_template_choice(choice)
    return Settings(
        models=(ModelSettings(args.model_name, (args.llama_api,), choice),),
        api_keys=read_api_keys(args.api_key, args.api_key_file),
        host=args.host, port=args.port, connect_timeout=args.connect_timeout,
        read_timeout=args.read_timeout, workers=args.workers, threads=args.threads,
        debug=args.debug, log_level=args.log_level, log_prompts=args.log_prompts, log_format=args.log_format,
        cors_origins=tuple(o.strip() for o in (args.cors_origins or "").split(",") if o.strip()),
        limits=Limits(max_body_bytes=args.max_body_bytes, max_messages=args.max_messages, max_n=args.max_n,
                      max_tokens=args.max_tokens_limit),
        grace_period=args.grace_period)


def read_api_keys(keys: list[str] | None, key_file: str | None) -> tuple[str, ...]:
    collected = [key for key in keys or () if key]
    if key_file:
        try:
            collected += [line.strip() for line in Path(key_file).read_text().splitlines() if line.strip()]
        except OSError as exc:
            raise StartupError(f"cannot read --api-key-file {key_file}: {exc.strerror}") from None
    return tuple(collected)


def load_chat_template(value: str | None) -> tuple[str | None, str]:
    """(template text, where it came from) for --chat-template: a file, a URL, or inline text."""
    if not value:
        return None, "inline"
    if value.startswith(("http://", "https://")):
        try:
            response = requests.get(value, timeout=30)
            response.raise_for_status()
        except requests.RequestException as exc:
            raise StartupError(f"cannot fetch --chat-template {value}: {exc}") from None
        return response.text, value
    path = Path(value)
    if "\n" not in value and "{" not in value and len(value) < 4096 and path.is_file():
        return path.read_text("utf-8"), str(path)
    if "{" not in value:
        raise StartupError(f"--chat-template {value!r} is neither a file nor a Jinja template")
    return decode_inline_template(value), "inline"


def decode_inline_template(value: str) -> str:
    """A single-line template's escapes (\\n, \\t, ...) decoded, as vLLM does; non-ASCII kept."""
    if "\n" in value:
        return value
    return codecs.decode(value.encode("latin-1", "backslashreplace"), "unicode_escape")


def check_template_choice(choice: TemplateChoice) -> None:
    """Fail start-up on a template that can never work (unknown name, bad syntax, bad plug-in)."""
    try:
        if choice.chat_formatter:
            load_plugin(choice.chat_formatter)
        elif choice.chat_template:
            from .prompts.jinja import compile_template
            compile_template(choice.chat_template)
        elif choice.chat_prompt_model:
            named_formatter(choice.chat_prompt_model, FormatterOptions())
    except (UnknownTemplate, Exception) as exc:  # noqa: BLE001 - any failure here stops start-up
        raise StartupError(str(getattr(exc, "message", exc))) from None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = settings_from_args(args)
    except StartupError as exc:
        print(f"api-like-oai: error: {exc}", file=sys.stderr)
        return 2
    from .app import create_app
    from .server import serve

    serve(create_app(settings), settings)
    return 0
