"""Start-up's arguments: the original api_like_OAI.py flags plus ours, the environment and the YAML
config merged into Settings, and the checks that fail start-up early (templates, plug-ins, extras).

Every flag can also come from the environment as API_LIKE_OAI_<FLAG> (e.g. API_LIKE_OAI_LLAMA_API);
the command line wins. No command runs here: cli.py dispatches; the server and `keys` read this.
"""

from __future__ import annotations

import argparse
import codecs
import dataclasses
import importlib.util
import logging
import os
from pathlib import Path

from .backends.routing import MODES, RoutingPolicy
from .installation import data_dir
from .mcp.policy import Bounds, NamedServer
from .prompts import LegacyFormatter, TemplateChoice, UnknownTemplate
from .prompts.base import FormatterOptions
from .prompts.legacy import DEFAULT_CHAT_PROMPT
from .prompts.resolve import load_plugin, named_formatter
from .settings import AudioLimits, ImageLimits, Limits, ModelSettings, Policy, Settings
from .store.settings import DEFAULT_TTL_SECONDS, StoreSettings, duration, store_settings
from .supervisor.configure import discover, find_llama_server, launch_spec, supervisor_settings
from .tools.formats import FORMATS
from .version import __version__

ENV_PREFIX = "API_LIKE_OAI_"
LEGACY_DEFAULTS = {
    "chat_prompt": DEFAULT_CHAT_PROMPT,
    "user_name": "USER: ",
    "ai_name": "ASSISTANT: ",
    "system_name": "ASSISTANT's RULE: ",
    "stop": "</s>",
}

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")

log = logging.getLogger("api_like_oai")


class StartupError(Exception):
    """A setting that makes start-up impossible; printed as one line, no traceback."""


class Switch(argparse.BooleanOptionalAction):
    """An on/off flag spelled `--flag`, `--no-flag` or `--flag false` (also true/yes/no/on/off/1/0)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.nargs = "?"

    def __call__(self, parser, namespace, values, option_string=None):
        if option_string.startswith("--no-"):
            if values is not None:
                parser.error(f"{option_string} takes no value")
            setattr(namespace, self.dest, False)
        elif values is None:
            setattr(namespace, self.dest, True)
        else:
            setattr(namespace, self.dest, _switch_value(parser, option_string, values))


def _switch_value(parser: argparse.ArgumentParser, option_string: str, value) -> bool:
    word = str(value).strip().lower()
    if word not in TRUE_WORDS + FALSE_WORDS:
        parser.error(f"{option_string}: expected true or false, not {value!r}")
    return word in TRUE_WORDS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="api-like-oai",
        allow_abbrev=False,  # --model is not --model-name: a mistyped flag is an error
        description="An OpenAI-compatible API for llama.cpp's server. A literal \\n in a prompt "
        "flag means a newline. Every flag may also be set as API_LIKE_OAI_<FLAG>.",
    )
    for title, add_flags in FLAG_GROUPS:
        add_flags(parser.add_argument_group(title).add_argument)
    parser.add_argument("--version", action="version", version=f"api-like-oai {__version__}")
    for name, default in LEGACY_DEFAULTS.items():
        parser.set_defaults(**{name: default})
    _defaults_from_environment(parser)
    return parser


def _add_original_flags(add) -> None:
    """The original script's flags, the config file and the llama.cpp address."""
    add("--chat-prompt", help="the top prompt in chat completions (default: %(default)r)")
    add("--user-name", help="user name in chat completions (default: %(default)r)")
    add("--ai-name", help="assistant name in chat completions (default: %(default)r)")
    add("--system-name", help="system name in chat completions (default: %(default)r)")
    add("--stop", help="end-of-response marker in chat completions, and a stop string (default: %(default)r)")
    add("--config", help="a YAML config file (see config.example.yaml); flags and environment override it")
    add("--llama-api", default="http://127.0.0.1:8080", help="llama.cpp server address (default: %(default)s)")


def _add_key_flags(add) -> None:
    """Which keys a request needs, and what a key's requests get."""
    add(
        "--api-key",
        action="append",
        default=None,
        help="require this API key, as `Authorization: Bearer` or `x-api-key` (repeat for several; default: no key needed)",
    )
    add("--api-key-file", help="file with one API key per line (keeps keys out of `ps` and shell history)")
    add(
        "--admin-key",
        action="append",
        default=None,
        help="an admin key (repeat for several): any API, plus managing keys under /v1/internal/keys; "
        "with it (or --api-key), the store's managed keys are accepted too (`api-like-oai keys --help`)",
    )
    add("--admin-key-file", help="file with one admin key per line: as --admin-key, kept out of `ps` (recommended)")
    add(
        "--limits-on-store-error",
        default="closed",
        choices=["open", "closed"],
        help="a key with limits while the store cannot be reached: refuse its requests (closed, 503) "
        "or let a key read before run unchecked (open); the log and api_like_oai_limits_unchecked_total "
        "say so (default: %(default)s)",
    )
    add(
        "--api-key-priority",
        default="normal",
        choices=["high", "normal", "low"],
        help="the priority for a free upstream slot of requests with a key from --api-key/--admin-key (or with "
        "no key when none is asked); managed keys have their own (keys create --priority) (default: %(default)s)",
    )
    _add_lane_flags(add)


def _add_lane_flags(add) -> None:
    """What batch lines leave to people (access/priority.py), in the keys' group of --help."""
    add(
        "--batch-free-slots",
        type=count,
        default=None,
        metavar="N",
        help="slots of each model that batch lines leave free while people use it (a request of a key's priority "
        "in the last 20 s), so their next request starts at once; at most all but one. On a CPU-bound llama-server "
        "the lines still decoding share every step with a person's prompt: more keeps their first token nearer "
        "the idle box's, at the cost of the batch's rate while people are about (default: all but one where "
        "--batch-yield is on, else 1)",
    )
    add(
        "--batch-yield",
        default="auto",
        choices=["auto", "on", "off"],
        help="on: a request of a key's priority stops every batch line of its model and holds them back until "
        "its first token, so its prompt is read alone (on a CPU every line decoding beside it shares the cores); "
        "auto: on for a model whose llama-servers run on this machine when it has no GPU device, off otherwise "
        "(on a GPU lines beside a prompt cost it little, and stopping them loses their progress) "
        "(default: %(default)s)",
    )


def _add_listen_flags(add) -> None:
    """Where the proxy listens."""
    add("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    add("--port", type=int, default=8081, help="port to listen on (default: %(default)s)")
    add(
        "--ollama-port",
        type=int,
        help="also listen on this port of --host (11434, Ollama's), so clients set up for a "
        "local Ollama need no setting; every route answers on both",
    )
    add(
        "--ollama-listen",
        action="append",
        default=None,
        metavar="HOST:PORT",
        help="also listen on this address (repeat for several), as --ollama-port does",
    )


def _ollama_listen(args) -> tuple[str, ...]:
    """The extra addresses to listen on: --ollama-port on --host, then each --ollama-listen."""
    addresses = [f"{args.host}:{args.ollama_port}"] if args.ollama_port else []
    return (*addresses, *(args.ollama_listen or ()))


def _add_template_flags(add) -> None:
    """How prompts are made and answers read."""
    add("--chat-prompt-model", help="a chat template by name: shipped (chatml, llama-2, ...) or FastChat's (vicuna_v1.1, ...)")
    add("--chat-template", help="a Jinja chat template: a file path, an http(s) URL, or the template text")
    add("--chat-formatter", help="your own formatter class, module:Class or an entry-point name")
    add(
        "--tool-call-format",
        default="auto",
        choices=["auto", *FORMATS],
        help="how the model writes tool calls (default: auto, detected from the chat template)",
    )
    add(
        "--reasoning-format",
        default="auto",
        choices=["auto", "none", "deepseek"],
        help="split <think> reasoning into reasoning_content (deepseek), keep it inline (none), "
        "or decide from the chat template (default: auto)",
    )
    add("--response-role", default="assistant", help="role of generated messages (default: %(default)s)")
    add("--model-name", default="llama.cpp", help="the model name /v1/models reports (default: %(default)s)")


def _add_server_flags(add) -> None:
    """Timeouts, workers and CORS."""
    add("--connect-timeout", type=float, default=5.0, help="seconds to connect upstream (default: %(default)s)")
    add("--read-timeout", type=float, default=600.0, help="seconds to wait for upstream data (default: %(default)s)")
    add(
        "--workers",
        type=int,
        default=1,
        help="server worker processes; each holds thousands of streams, one per core is plenty (default: %(default)s)",
    )
    add(
        "--worker-class",
        default="gevent",
        choices=["gevent", "gthread"],
        help="gevent: one event loop per worker, thousands of streams each; gthread: a thread per "
        "request, at most --threads at once (default: %(default)s)",
    )
    add(
        "--threads",
        type=int,
        default=32,
        help="with --worker-class gthread: threads per worker, i.e. concurrent requests (default: %(default)s)",
    )
    add(
        "--grace-period",
        type=float,
        default=30.0,
        help="on SIGTERM, seconds in-flight requests may take to finish before their streams end with an "
        "error (default: %(default)s)",
    )
    add("--cors-origins", help="comma-separated origins allowed cross-origin, or * (default: none)")
    add(
        "--allowed-hosts",
        help="comma-separated names (Host headers) a proxy with no API key on a loopback address answers besides "
        "localhost and IP addresses, or * for any: others are refused, as a web page reaches it by pointing its "
        "own name at 127.0.0.1 (DNS rebinding); a reverse proxy that passes its own Host needs it (default: none)",
    )


def _add_limit_flags(add) -> None:
    """Request limits, images and audio."""
    add(
        "--max-body-bytes",
        type=int,
        default=16 * 1024 * 1024,
        help="largest request body, in bytes (413 above) (default: %(default)s)",
    )
    add("--max-messages", type=int, default=2048, help="most messages in a chat request (default: %(default)s)")
    add("--max-n", type=int, default=16, help="most choices per request: n, or prompts × n (default: %(default)s)")
    add(
        "--max-image-bytes",
        type=int,
        default=20 * 1024 * 1024,
        help="largest image, decoded, in a request, in bytes (400 above) (default: %(default)s)",
    )
    add(
        "--max-request-image-bytes",
        type=int,
        default=50 * 1024 * 1024,
        help="most bytes of images, decoded, in one request (default: %(default)s)",
    )
    add(
        "--image-fetch-timeout",
        type=float,
        default=10.0,
        help="seconds to fetch an image a request names by URL, at most 3 redirects included (default: %(default)s)",
    )
    add(
        "--image-tokens",
        type=int,
        default=576,
        help="tokens an image is counted as when a prompt is fitted to the context: llama.cpp's /tokenize "
        "knows no images, and its projector decides (576 for LLaVA-1.5, 256 for Gemma 3) (default: %(default)s)",
    )
    add(
        "--max-audio-seconds",
        type=float,
        default=1500.0,
        help="longest audio file to transcribe, by its header (its bytes are held to OpenAI's 25 MB) (default: %(default)s)",
    )
    add(
        "--allow-private-image-urls",
        action="store_true",
        help="fetch images from private, loopback and link-local addresses too (default: public ones only)",
    )


def _add_context_flags(add) -> None:
    """Context fitting, routing among a model's upstreams, and the max_tokens cap."""
    add(
        "--context-overflow",
        default="truncate",
        choices=["truncate", "error"],
        help="a conversation too long for max_tokens: keep it and shorten the reply, dropping old turns "
        "only to keep a reply reserve (truncate), or answer 400 as OpenAI does (error) (default: %(default)s)",
    )
    add(
        "--reply-reserve",
        type=float,
        default=0.25,
        help="share of the context kept for the reply before old turns are dropped (default: %(default)s)",
    )
    add(
        "--drop-step",
        type=float,
        default=0.125,
        help="old turns are dropped in steps of this share of the context, so that the next turns extend the "
        "same prompt and llama.cpp reuses its cache; 0 drops the fewest (default: %(default)s)",
    )
    add(
        "--routing",
        default="prefix",
        choices=list(MODES),
        help="which of a model's upstreams a request goes to: the one holding the longest prefix of its "
        "prompt, else its session's, else the least busy (prefix); or the least busy (default: %(default)s)",
    )
    add(
        "--routing-load-margin",
        type=int,
        default=2,
        help="with --routing prefix: how many more requests in flight than the least busy upstream the one "
        "holding a prompt's prefix may have before the request goes to the least busy (default: %(default)s)",
    )
    add("--max-tokens-limit", type=int, default=None, help="largest max_tokens a request may ask for (default: none)")


def _add_log_flags(add) -> None:
    """What is logged and measured, and llama.cpp's own API."""
    add(
        "--metrics-per-key",
        action="store_true",
        help="/metrics counts requests and tokens per managed key, labelled by its name (one series per key)",
    )
    add("--debug", action="store_true", help="use Werkzeug's development server with the debugger")
    add(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="the least severe log lines written (default: %(default)s)",
    )
    add("--log-format", default="text", choices=["text", "json"], help="access log format (default: %(default)s)")
    add("--log-prompts", action="store_true", help="log prompts (never logged otherwise)")
    add(
        "--native-api",
        action=Switch,
        default=True,
        metavar="BOOL",
        help="serve llama.cpp's own API (/completion, /infill, /props, ...) for llama.cpp models "
        "(default: on; --no-native-api or --native-api false turns it off: 404)",
    )
    add(
        "--upstream-metrics",
        action="store_true",
        help="/metrics also carries each llama-server's own metrics (start them with --metrics), labelled "
        "with model and upstream, scraped when /metrics is",
    )
    add(
        "--open-pool-metrics",
        action="store_true",
        help="serve /metrics/pool (each started model's requests waiting and running and KV-cache use, for an "
        "inference pool's endpoint picker, which sends no key) without a key; without it, it needs the admin key as /metrics",
    )
    add(
        "--otlp-endpoint",
        metavar="URL",
        help="send a trace of each request over OTLP/HTTP to URL (needs api-like-oai[otel]; default: "
        "$OTEL_EXPORTER_OTLP_ENDPOINT, else no traces)",
    )


def _add_store_flags(add) -> None:
    """Where stored objects live, how long, and how much a key may store."""
    add(
        "--store",
        metavar="URL",
        help="where stored responses and conversations live: sqlite:///PATH, "
        "redis://HOST:PORT/DB or none (default: sqlite under $XDG_DATA_HOME/api-like-oai/)",
    )
    add(
        "--store-ttl",
        type=duration,
        default=DEFAULT_TTL_SECONDS,
        metavar="DURATION",
        help="how long a stored object is kept after its last write: seconds, or 90m, 12h, 30d (default: 30d)",
    )
    add(
        "--store-secret-file",
        metavar="PATH",
        help="the secret API keys are hashed with for the store "
        "(created if missing; default: beside the SQLite file, or kept in Redis)",
    )
    add(
        "--max-stored-mib",
        type=int,
        metavar="MIB",
        help="what one key's stored responses and conversations may hold; then its writes are refused (429) "
        "(a managed key's own --max-stored-mib wins; default: no quota)",
    )


def _add_mcp_flags(add) -> None:
    """The bounds of what a request's MCP tools may make the proxy do (mcp/policy.Bounds)."""
    add(
        "--mcp-allow-private-urls",
        action="store_true",
        help="connect to MCP servers at private, loopback and link-local addresses too (default: public ones only)",
    )
    add(
        "--mcp-connect-timeout",
        type=float,
        default=10.0,
        help="seconds to connect to an MCP server and list its tools (default: %(default)s)",
    )
    add(
        "--mcp-call-timeout",
        type=float,
        default=60.0,
        help="seconds one MCP tool call may take; past it the call's item has the error (default: %(default)s)",
    )
    add(
        "--mcp-max-output-bytes",
        type=int,
        default=64 * 1024,
        help="an MCP tool's output past this is cut, with a note the model reads (default: %(default)s)",
    )
    add("--mcp-max-tools", type=int, default=128, help="tools kept of one MCP server's list (default: %(default)s)")
    add(
        "--mcp-max-rounds",
        type=int,
        default=8,
        help="rounds of MCP calls the proxy answers within one response; past it the response is incomplete "
        "(default: %(default)s)",
    )


def _mcp_bounds(args: argparse.Namespace, config=None) -> Bounds:
    """The --mcp-* bounds and the config's named MCP servers."""
    named = tuple(
        NamedServer(
            name,
            server.url,
            tuple(server.headers.items()),
            (server.command, *server.args) if server.command else (),
            tuple(server.env.items()),
        )
        for name, server in (getattr(config, "mcp_servers", None) or {}).items()
    )
    return Bounds(
        connect_timeout=args.mcp_connect_timeout,
        call_timeout=args.mcp_call_timeout,
        max_output_bytes=args.mcp_max_output_bytes,
        max_tools=args.mcp_max_tools,
        max_rounds=args.mcp_max_rounds,
        allow_private_urls=args.mcp_allow_private_urls,
        named_servers=named,
    )


def _add_launch_flags(add) -> None:
    """Models on demand: llama-servers the proxy starts, swaps and stops itself."""
    add(
        "--model",
        metavar="PATH.gguf",
        help="run llama-server with this model (no --llama-api needed); named by the file's stem unless --model-name is given",
    )
    add(
        "--models-dir",
        metavar="DIR",
        help="serve every *.gguf under DIR, each named by its file's stem and "
        "started on its first request (an mmproj-* beside it is its projector)",
    )
    add("--llama-server", metavar="PATH", help="the llama-server binary (default: on PATH, else the one scripts/provision built)")
    add(
        "--llama-args",
        metavar="ARGS",
        help="llama-server flags for the models of --model and --models-dir, "
        "as one shell-quoted string (e.g. '--ctx-size 8192 --parallel 4')",
    )
    add(
        "--memory-budget",
        type=int,
        metavar="MIB",
        help="memory the started models may use together, in MiB, "
        "one pool for all devices (default: a budget per GPU, its free memory per nvidia-smi less 512 MiB, and "
        "one for the CPU, the available memory less 1 GiB)",
    )
    add("--max-loaded", type=int, metavar="N", help="most models loaded at once (default: no limit)")
    add(
        "--model-ttl",
        type=_ttl,
        metavar="DURATION",
        default=None,
        help="idle time before a started model is unloaded: seconds, or 90m, 12h; 0 never (default: 15m)",
    )
    add(
        "--slot-save-dir",
        metavar="DIR",
        help="where models with slot_save keep their KV caches across swaps (default: a temporary directory)",
    )


def _add_fleet_flags(add) -> None:
    """A fleet: several instances, one API, through one Redis (docs/fleet.md)."""
    add(
        "--fleet",
        metavar="REDIS_URL",
        help="join the fleet whose state is in this Redis (redis://HOST:PORT/DB): "
        "requests for models this instance does not serve go to a box of the fleet that does",
    )
    add(
        "--advertise",
        metavar="URL",
        help="with --fleet: this instance is a box, reached by the others at URL "
        "(e.g. http://10.0.0.2:8081); without it, a front only",
    )
    add(
        "--fleet-secret-file",
        metavar="PATH",
        help="with --fleet: the file holding the secret the fleet's "
        "instances prove themselves to each other with (at least 16 characters, the same file on every instance)",
    )
    add(
        "--rpc-lend",
        type=int,
        metavar="MIB",
        help="with --advertise: lend MIB of this box's --memory-budget to "
        "models too large for any one box, through an rpc-server it runs (llama.cpp's RPC backend; trusted network only)",
    )
    add("--rpc-server", metavar="PATH", help="with --rpc-lend: the rpc-server binary (default: beside llama-server)")


def count(value) -> int:
    """A whole number, 0 or more (a flag's type)."""
    number = int(value)
    if number < 0:
        raise ValueError(f"{value} is below 0")
    return number


def _ttl(value: str) -> float:
    return 0.0 if str(value).strip() == "0" else duration(value)


# The flags in the groups `--help` shows them in, and the manual's flag reference (api_like_oai/reference.py).
FLAG_GROUPS = (
    ("the original script's flags, the config file, llama.cpp's address", _add_original_flags),
    ("keys", _add_key_flags),
    ("listening", _add_listen_flags),
    ("prompts and answers", _add_template_flags),
    ("timeouts, workers and CORS", _add_server_flags),
    ("request limits, images and audio", _add_limit_flags),
    ("context, routing and max_tokens", _add_context_flags),
    ("logs, metrics, traces and llama.cpp's own API", _add_log_flags),
    ("stored responses and conversations", _add_store_flags),
    ("MCP tools' bounds", _add_mcp_flags),
    ("models on demand", _add_launch_flags),
    ("a fleet", _add_fleet_flags),
)


def flag_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [action for action in parser._actions if action.option_strings and action.dest not in ("help", "version")]


def _convert(action: argparse.Action, value):
    """A value from the environment or the config file, as the command line would have given it."""
    if isinstance(action, argparse._StoreTrueAction | Switch):
        return value if isinstance(value, bool) else str(value).strip().lower() in TRUE_WORDS
    if isinstance(action, argparse._AppendAction):
        values = value if isinstance(value, list) else str(value).split(",")
        return [str(item) for item in values if item]
    if action.type is not None and value is not None:
        return action.type(value)
    return value if value is None or isinstance(value, str) else str(value)


def _defaults_from_environment(parser: argparse.ArgumentParser) -> None:
    for action in flag_actions(parser):
        value = os.environ.get(ENV_PREFIX + action.dest.upper())
        if value is not None:
            parser.set_defaults(**{action.dest: _convert(action, value)})


def _defaults_from_config(parser: argparse.ArgumentParser, config) -> None:
    for action in flag_actions(parser):
        value = getattr(config, action.dest, None)
        if value is not None:
            try:
                parser.set_defaults(**{action.dest: _convert(action, value)})
            except (TypeError, ValueError) as exc:
                raise StartupError(f"{parser.get_default('config')}: {action.dest}: {exc}") from None


def parse_settings(argv: list[str] | None) -> Settings:
    """Settings from the command line, over the environment, over the config file."""
    return settings_from_args(*parse_arguments(argv))


def parse_arguments(argv: list[str] | None) -> tuple[argparse.Namespace, object]:
    """(the flags' values, the config file or None): the command line over the environment over the file."""
    parser = build_parser()
    config_path = parser.parse_known_args(argv)[0].config
    config = None
    if config_path:
        # Imported only for a config file: it brings pydantic, which gunicorn's master otherwise does
        # without (every page the master holds is one the worker may copy: idle memory, PROFILE.md).
        from .config import ConfigError, load_config

        try:
            config = load_config(config_path, [action.dest for action in flag_actions(parser)])
        except ConfigError as exc:
            raise StartupError(str(exc)) from None
        parser.set_defaults(config=config_path)
        _defaults_from_config(parser, config)
        _defaults_from_environment(parser)  # the environment wins over the file
    return parser.parse_args(argv), config


def unescape_newlines(value: str) -> str:
    """The original script's rule: a literal backslash-n in a flag value is a newline."""
    return value.replace("\\n", "\n")


def template_choice(args: argparse.Namespace, model_config=None) -> TemplateChoice:
    """The template settings of one model: its own keys in the config file, else the flags."""

    def pick(name: str):
        own = getattr(model_config, name, None) if model_config is not None else None
        return own if own is not None else getattr(args, name)

    legacy_values = {name: unescape_newlines(pick(name)) for name in LEGACY_DEFAULTS}
    uses_own_template = model_config is not None and model_config.template == "auto"
    template_text, template_name = (None, "inline") if uses_own_template else load_chat_template(pick("chat_template"))
    choice = TemplateChoice(
        chat_formatter=None if uses_own_template else pick("chat_formatter"),
        chat_template=template_text,
        chat_template_name=template_name,
        chat_prompt_model=None if uses_own_template else pick("chat_prompt_model"),
        legacy=LegacyFormatter(**legacy_values),
        legacy_explicit=not uses_own_template and any(legacy_values[n] != d for n, d in LEGACY_DEFAULTS.items()),
        response_role=pick("response_role"),
    )
    check_template_choice(choice)
    return choice


def models_from_config(args: argparse.Namespace, config) -> tuple[ModelSettings, ...]:
    return tuple(_model_settings(args, name, model) for name, model in config.models.items())


def _model_settings(args: argparse.Namespace, name: str, model) -> ModelSettings:
    launch = None
    if model.model is not None:
        launch = launch_spec(
            name,
            model.model,
            replicas=model.replicas,
            args=model.args,
            avoid_port=args.port,
            header_cache=_header_cache(),
            **_launch_options(args, model),
        )
    return ModelSettings(
        name,
        launch.urls if launch else tuple(model.upstreams),
        _model_template(args, name, model),
        tuple(model.aliases),
        model.kind,
        model.upstream_model,
        dict(model.defaults),
        dict(model.overrides),
        model.max_tokens,
        model.context_length,
        model.tool_call_format or args.tool_call_format,
        model.reasoning_format or args.reasoning_format,
        _context_policy(args, model),
        _routing_policy(args, model),
        launch,
        tuple(model.capabilities or ()),
        boxes=model.boxes or 1,
    )


def _launch_options(args: argparse.Namespace, model_config=None) -> dict:
    """A started model's lifecycle settings: its own keys in the config file, else the flags'."""

    def own(name: str):
        return getattr(model_config, name, None) if model_config is not None else None

    return {
        "mmproj": own("mmproj"),
        "env": dict(own("env") or {}),
        "memory_mib": own("memory"),
        "ttl": own("ttl") if own("ttl") is not None else args.model_ttl,
        "preload": own("preload"),
        "pinned": own("pinned"),
        "slot_save": own("slot_save"),
        "load_timeout": own("load_timeout"),
        "queue_limit": own("queue_limit"),
        "draft": own("draft"),
        "draft_args": own("draft_args") or None,
        "draft_replicas": own("draft_replicas"),
        "devices": own("devices"),
    }


def models_from_flags(args: argparse.Namespace, known: set[str]) -> tuple[ModelSettings, ...]:
    """The models --model and --models-dir say to start (those named in the config file already left out)."""
    files = discover(args.models_dir) if args.models_dir else {}
    if args.model:
        name = args.model_name if args.model_name != "llama.cpp" else Path(args.model).stem
        files = {name: (args.model, None), **files}
    first = next(iter(files), None)
    return tuple(
        _flag_model(args, name, path, mmproj, preload=bool(args.model) and name == first)
        for name, (path, mmproj) in files.items()
        if name not in known
    )


def _header_cache() -> str:
    """Where the GGUF files' headers are kept between starts (gguf_header.cached_header)."""
    return str(data_dir() / "gguf-headers")


def _flag_model(args: argparse.Namespace, name: str, path: str, mmproj: str | None, *, preload: bool) -> ModelSettings:
    """A model --model (preloaded) or --models-dir (started on its first request) names."""
    spec = launch_spec(
        name,
        path,
        args=args.llama_args or (),
        avoid_port=args.port,
        header_cache=_header_cache(),
        **{**_launch_options(args), "mmproj": mmproj, "preload": preload},
    )
    return ModelSettings(
        name,
        spec.urls,
        template_choice(args),
        tool_call_format=args.tool_call_format,
        reasoning_format=args.reasoning_format,
        context_policy=_context_policy(args),
        routing=_routing_policy(args),
        launch=spec,
    )


def _context_policy(args: argparse.Namespace, model_config=None) -> Policy:
    return Policy(*(_own_or_flag(args, model_config, name) for name in ("context_overflow", "reply_reserve", "drop_step")))


def _own_or_flag(args: argparse.Namespace, model_config, name: str):
    """A model's own setting in the config file, else the flag's value."""
    own = getattr(model_config, name, None) if model_config is not None else None
    return own if own is not None else getattr(args, name)


def _routing_policy(args: argparse.Namespace, model_config=None) -> RoutingPolicy:
    return RoutingPolicy(_own_or_flag(args, model_config, "routing"), _own_or_flag(args, model_config, "routing_load_margin"))


def _model_template(args: argparse.Namespace, name: str, model) -> TemplateChoice:
    try:
        return template_choice(args, model)
    except StartupError as exc:
        from .config import error_at

        key = next((k for k in ("chat_template", "chat_prompt_model", "chat_formatter") if getattr(model, k)), "template")
        raise StartupError(str(error_at(args.config, ("models", name, key), str(exc)))) from None


def settings_from_args(args: argparse.Namespace, config=None) -> Settings:
    models = _models(args, config)
    return Settings(
        models=models,
        strict_model_names=(config is not None and bool(config.models)) or bool(args.models_dir),
        default_model=getattr(config, "default_model", None),
        api_keys=read_api_keys(args.api_key, args.api_key_file),
        supervisor=_supervisor(args, models),
        admin_keys=read_api_keys(args.admin_key, args.admin_key_file, "--admin-key-file"),
        limits_on_store_error=args.limits_on_store_error,
        metrics_per_key=args.metrics_per_key,
        max_stored_mib=args.max_stored_mib or None,
        api_key_priority=args.api_key_priority,
        batch_free_slots=args.batch_free_slots,
        batch_yield=args.batch_yield,
        host=args.host,
        port=args.port,
        ollama_listen=_ollama_listen(args),
        connect_timeout=args.connect_timeout,
        read_timeout=args.read_timeout,
        workers=args.workers,
        worker_class=args.worker_class,
        threads=args.threads,
        debug=args.debug,
        log_level=args.log_level,
        log_prompts=args.log_prompts,
        log_format=args.log_format,
        cors_origins=tuple(o.strip() for o in (args.cors_origins or "").split(",") if o.strip()),
        allowed_hosts=tuple(h.strip() for h in (args.allowed_hosts or "").split(",") if h.strip()),
        limits=Limits(
            max_body_bytes=args.max_body_bytes, max_messages=args.max_messages, max_n=args.max_n, max_tokens=args.max_tokens_limit
        ),
        grace_period=args.grace_period,
        native_api=args.native_api,
        store=store_settings_of(args),
        images=_image_limits(args),
        audio=AudioLimits(max_seconds=args.max_audio_seconds),
        mcp=_mcp_bounds(args, config),
        upstream_metrics=args.upstream_metrics,
        open_pool_metrics=args.open_pool_metrics,
        otlp_endpoint=_otlp_endpoint(args),
        fleet=_fleet(args),
    )


def _models(args: argparse.Namespace, config) -> tuple[ModelSettings, ...]:
    """The config's models, then the flags' (--model, --models-dir), else the one model at --llama-api."""
    models = models_from_config(args, config) if config is not None and config.models else ()
    models += models_from_flags(args, {model.name for model in models})
    if not models and (args.fleet is None or args.advertise):  # a fleet's front alone has no models of its own
        models = (
            ModelSettings(
                args.model_name,
                (args.llama_api,),
                template_choice(args),
                tool_call_format=args.tool_call_format,
                reasoning_format=args.reasoning_format,
                context_policy=_context_policy(args),
                routing=_routing_policy(args),
            ),
        )
    return models


def _image_limits(args: argparse.Namespace) -> ImageLimits:
    return ImageLimits(
        max_image_bytes=args.max_image_bytes,
        max_request_bytes=args.max_request_image_bytes,
        fetch_timeout=args.image_fetch_timeout,
        allow_private_urls=args.allow_private_image_urls,
        tokens_per_image=args.image_tokens,
    )


def _supervisor(args: argparse.Namespace, models: tuple[ModelSettings, ...]):
    specs = [model.launch for model in models if model.launch is not None]
    if not specs:
        return None
    binary = find_llama_server(args.llama_server)
    if binary is None:
        raise StartupError(
            "no llama-server to start the models with: give --llama-server PATH, put it on PATH, or run scripts/provision"
        )
    settings = supervisor_settings(specs, binary, args.memory_budget, args.max_loaded, args.slot_save_dir, _header_cache())
    if args.rpc_lend:  # what the box lends to a pooled model elsewhere is not its own models' to use
        settings = dataclasses.replace(settings, memory_budget_mib=settings.memory_budget_mib - args.rpc_lend)
    return settings


def _fleet(args: argparse.Namespace):
    if args.fleet is None:
        if args.advertise or args.fleet_secret_file or args.rpc_lend:
            raise StartupError("--advertise, --fleet-secret-file and --rpc-lend need --fleet redis://...")
        return None
    from .fleet.settings import FleetSettings

    if not args.fleet.startswith(("redis://", "rediss://", "unix://")):
        raise StartupError(f"--fleet takes a Redis URL (redis://HOST:PORT/DB), not {args.fleet!r}")
    if importlib.util.find_spec("redis") is None:
        raise StartupError("--fleet needs the redis client: pip install 'api-like-oai[redis]'")
    if not args.fleet_secret_file:
        raise StartupError("--fleet needs --fleet-secret-file: the secret the fleet's instances share")
    try:
        secret = Path(args.fleet_secret_file).read_text().strip()
    except OSError as exc:
        raise StartupError(f"cannot read --fleet-secret-file {args.fleet_secret_file}: {exc.strerror}") from None
    if len(secret) < 16:
        raise StartupError(f"--fleet-secret-file {args.fleet_secret_file}: the secret must be at least 16 characters")
    return FleetSettings(
        args.fleet,
        secret,
        args.advertise.rstrip("/") if args.advertise else None,
        rpc_lend_mib=args.rpc_lend or 0,
        rpc_server=_rpc_server(args),
    )


def _rpc_server(args: argparse.Namespace) -> str | None:
    """The rpc-server a box lending memory runs: --rpc-server, else the one beside llama-server."""
    if not args.rpc_lend:
        return None
    if not args.advertise:
        raise StartupError("--rpc-lend needs --advertise: the rpc-server listens on the advertised host")
    llama_server = find_llama_server(args.llama_server)
    binary = args.rpc_server or (os.path.join(os.path.dirname(llama_server), "rpc-server") if llama_server else None)
    if not binary or not os.access(binary, os.X_OK):
        raise StartupError("--rpc-lend needs rpc-server: give --rpc-server PATH (scripts/provision builds it)")
    return binary


def store_settings_of(args: argparse.Namespace) -> StoreSettings:
    try:
        settings = store_settings(args.store, args.store_ttl, args.store_secret_file)
    except ValueError as exc:
        raise StartupError(str(exc)) from None
    if settings.kind == "redis" and importlib.util.find_spec("redis") is None:
        raise StartupError("--store redis://... needs the redis client: pip install 'api-like-oai[redis]'")
    return settings


def _otlp_endpoint(args: argparse.Namespace) -> str | None:
    """Where traces go: --otlp-endpoint, else OpenTelemetry's own variable; None for no traces."""
    endpoint = args.otlp_endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None
    if endpoint and importlib.util.find_spec("opentelemetry.exporter.otlp.proto.http") is None:
        raise StartupError("--otlp-endpoint needs OpenTelemetry: pip install 'api-like-oai[otel]'")
    return endpoint


def read_api_keys(keys: list[str] | None, key_file: str | None, flag: str = "--api-key-file") -> tuple[str, ...]:
    """The keys given, then those of `key_file` (one a line; `flag` names it in an error)."""
    collected = [key for key in keys or () if key]
    if key_file:
        try:
            collected += [line.strip() for line in Path(key_file).read_text().splitlines() if line.strip()]
        except OSError as exc:
            raise StartupError(f"cannot read {flag} {key_file}: {exc.strerror}") from None
    return tuple(collected)


def load_chat_template(value: str | None) -> tuple[str | None, str]:
    """(template text, where it came from) for --chat-template: a file, a URL, or inline text."""
    if not value:
        return None, "inline"
    if value.startswith(("http://", "https://")):
        import requests  # here, not at the top: gunicorn's master must not import urllib3 (server.py)

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
