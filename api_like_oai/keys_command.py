"""`api-like-oai keys create|list|update|revoke|usage` (and `api-like-oai usage`): managing keys on the
store the server reads, named as the server names it (--store, --config, API_LIKE_OAI_STORE, ...)."""

from __future__ import annotations

import argparse
import datetime
import json
import sys

from pydantic import ValidationError

from .access import manage
from .access.book import open_book
from .access.keys import KeyProblem, KeyRecord, models_list
from .access.usage import GROUPS, as_csv, as_json, summed
from .arguments import StartupError, parse_arguments, store_settings_of
from .errors import StoreUnavailable
from .store import open_store
from .store.settings import duration

LIMIT_OPTIONS = (
    ("--rpm", "requests per minute"),
    ("--tpm", "tokens (prompt + completion) per minute"),
    ("--tokens-per-day", "tokens per UTC day"),
    ("--max-parallel", "requests in flight at once"),
    ("--max-stored-mib", "MiB its stored responses and conversations may hold"),
    ("--audio-seconds-per-day", "seconds of audio (transcribed, or in chat) per UTC day"),
)
LIMIT_NAMES = tuple(option[2:].replace("-", "_") for option, _ in LIMIT_OPTIONS)


def keys_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="api-like-oai keys",
        description="Manage the API keys kept in the "
        "store running proxies read (they need --admin-key or --api-key to ask for keys).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    create = _command(commands, "create", "make a key; it is printed once, on standard output")
    create.add_argument("--name", required=True, help="the key's name (unique; shown in usage and logs)")
    _add_changes(create)
    update = _command(commands, "update", "change a key's models, limits or expiry (0 or '' clears one)")
    update.add_argument("name")
    _add_changes(update)
    _command(commands, "revoke", "refuse the key from now on, on every instance").add_argument("name")
    _command(commands, "list", "every key, revoked ones included").add_argument("--json", action="store_true")
    usage = _command(commands, "usage", "requests, tokens and audio seconds per key, model, API and day")
    usage.add_argument("--since", type=duration, default=7 * 86400, help="how far back: 12h, 7d, ... (default: 7d)")
    usage.add_argument("--by", help=f"sum by these, comma-separated, of {', '.join(GROUPS)} (default: every row)")
    usage.add_argument("--key", help="only this key's usage")
    usage.add_argument("--csv", action="store_true", help="CSV instead of a table")
    return parser


def _command(commands, name: str, description: str) -> argparse.ArgumentParser:
    command = commands.add_parser(name, help=description, description=description)
    command.add_argument("--store", help="the server's --store (sqlite:///PATH or redis://HOST:PORT/DB)")
    command.add_argument("--config", help="the server's config file (its store settings are used)")
    command.add_argument("--store-secret-file", help="the server's --store-secret-file")
    return command


def _add_changes(command: argparse.ArgumentParser) -> None:
    command.add_argument("--models", help="comma-separated model names the key may use (default: every model)")
    command.add_argument(
        "--mcp-servers",
        help="comma-separated MCP servers of the config the key may use: a name "
        "(every tool) or name.tool (that tool) (default: none)",
    )
    for option, description in LIMIT_OPTIONS:
        command.add_argument(option, type=int, help=description + " (default: no limit)")
    command.add_argument(
        "--priority",
        choices=("high", "normal", "low"),
        help="its requests' place among those waiting for a busy upstream's slot (default: normal)",
    )
    command.add_argument("--expires", help="the key expires after this long: 90m, 12h, 30d (default: never)")


def keys_main(argv: list[str]) -> int:
    args = keys_parser().parse_args(argv)
    try:
        book = open_book(open_store(_store_settings(args), 1))
        if book is None:
            raise StartupError("managed keys need a store: --store sqlite:///PATH or redis://HOST:PORT/DB")
        return COMMANDS[args.command](book, args)
    except (StartupError, KeyProblem, StoreUnavailable) as exc:
        print(f"api-like-oai keys: error: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 1
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        print(f"api-like-oai keys: error: {'.'.join(map(str, error['loc']))}: {error['msg']}", file=sys.stderr)
        return 2


def _store_settings(args: argparse.Namespace):
    """The store the server would open with these flags, the environment and the config file."""
    server_argv = [
        part
        for flag in ("config", "store", "store_secret_file")
        if getattr(args, flag)
        for part in ("--" + flag.replace("_", "-"), getattr(args, flag))
    ]
    return store_settings_of(parse_arguments(server_argv)[0])


def _changes(args: argparse.Namespace) -> manage.KeyChanges:
    given = {name: getattr(args, name) for name in (*LIMIT_NAMES, "priority", "expires") if getattr(args, name) is not None}
    if args.models is not None:
        models = models_list(args.models)
        given["models"] = list(models) if models is not None else None
    if args.mcp_servers is not None:
        given["mcp_servers"] = [name.strip() for name in args.mcp_servers.split(",") if name.strip()]
    return manage.KeyChanges(**given)


def _create(book, args) -> int:
    key, record = manage.create_key(book, args.name, _changes(args))
    print(key)
    print(f"key {record.name!r} created; it is shown only now: {_summary(record)}", file=sys.stderr)
    return 0


def _update(book, args) -> int:
    print(_summary(manage.update_key(book, args.name, _changes(args))))
    return 0


def _revoke(book, args) -> int:
    record = manage.revoke_key(book, args.name)
    print(f"key {record.name!r} revoked")
    return 0


def _list(book, args) -> int:
    records = book.records()
    if args.json:
        print(json.dumps([record.public() for record in records], indent=2))
    else:
        for record in records:
            print(_summary(record))
    return 0


def _usage(book, args) -> int:
    entries = manage.usage_since(book, args.since, args.key)
    if args.by:
        entries = summed(entries, tuple(name.strip() for name in args.by.split(",")))
    if args.csv:
        print(as_csv(entries), end="")
    else:
        print(json.dumps([as_json(entry) for entry in entries], indent=2))
    return 0


def _summary(record: KeyRecord) -> str:
    """One line: name, models, limits, expiry, state."""
    limits = " ".join(f"{name}={getattr(record, name)}" for name in LIMIT_NAMES if getattr(record, name) is not None)
    expires = (
        datetime.datetime.fromtimestamp(record.expires_at, datetime.UTC).isoformat(timespec="seconds")
        if record.expires_at
        else "never"
    )
    state = "revoked" if record.revoked else "active"
    return (
        f"{record.name}\tmodels={','.join(record.models) if record.models else '*'}\t{limits or 'no limits'}"
        f"\tpriority={record.priority}\texpires={expires}\t{state}"
    )


COMMANDS = {"create": _create, "update": _update, "revoke": _revoke, "list": _list, "usage": _usage}
