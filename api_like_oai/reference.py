"""The manual's references made from the code, so that they cannot drift from it: every flag (argparse,
in `--help`'s groups) and every endpoint (the routes the app registers, described as /openapi.json
describes them). Each is a block of a page between `<!-- generated: NAME ... -->` and
`<!-- /generated: NAME -->`; `python -m api_like_oai.reference` rewrites the blocks, `--check` says
which are behind the code (tests/unit/test_reference.py runs it; so does `scripts/docs build`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

from .arguments import ENV_PREFIX, FLAG_GROUPS, build_parser

ROOT = Path(__file__).resolve().parents[1]
# The manual's page on each group of flags (arguments.FLAG_GROUPS' titles): (its title, its link).
GROUP_PAGES = {
    "the original script's flags, the config file, llama.cpp's address": (
        "the config file",
        "configuration.md#config-file-several-models-several-servers",
    ),
    "keys": ("Keys, limits and usage", "keys.md"),
    "listening": ("Deployment", "deployment.md"),
    "prompts and answers": ("Chat templates", "chat-templates.md"),
    "timeouts, workers and CORS": ("Deployment", "deployment.md"),
    "request limits, images and audio": ("Images and audio", "images-and-audio.md"),
    "context, routing and max_tokens": ("Context", "context.md"),
    "logs, metrics, traces and llama.cpp's own API": ("Operations", "operations.md"),
    "stored responses and conversations": ("Stored responses", "responses.md#stored-responses-and-conversations"),
    "MCP tools' bounds": ("MCP tools", "mcp.md"),
    "models on demand": ("Models on demand", "models-on-demand.md"),
    "a fleet": ("A fleet", "fleet.md"),
}


def _cell(text: str) -> str:
    """Plain text safe in a Markdown table cell: no HTML, no emphasis, no column break."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("*", r"\*").replace("|", r"\|")


@contextlib.contextmanager
def _without_environment():
    """The defaults as shipped: API_LIKE_OAI_<FLAG> variables set aside while the parser is built."""
    saved = {name: os.environ.pop(name) for name in list(os.environ) if name.startswith(ENV_PREFIX)}
    try:
        yield
    finally:
        os.environ.update(saved)


def flag_reference() -> str:
    """Every flag, group by group as `--help` shows them: the flag as `--help` writes it, and its help."""
    with _without_environment():
        parser = build_parser()
    formatter = parser._get_formatter()
    titles = {title for title, _ in FLAG_GROUPS}
    out = []
    for group in parser._action_groups:
        if group.title not in titles:
            continue
        label, link = GROUP_PAGES[group.title]
        out += [f"### {group.title[0].upper()}{group.title[1:]}", "", f"The manual's page: [{label}]({link}).", ""]
        out += ["| flag | what it does |", "| --- | --- |"]
        for action in group._group_actions:
            invocation = formatter._format_action_invocation(action)
            out.append(f"| `{invocation}` | {_cell(formatter._expand_help(action))} |")
        out.append("")
    return "\n".join(out)


def endpoint_rows() -> list[tuple[str, str, list[str], str, str]]:
    """(method, path, its aliases, what it does, who may call it) of every documented route, read from the
    route declarations (routes/declare.py) in their modules' order: the one place a route is written."""
    from .routes.declare import all_declarations
    from .routes.docs import openapi_path

    rows = []
    for declaration in all_declarations():
        if not declaration.documented:
            continue
        path, *aliases = [openapi_path(rule) for rule in declaration.paths]
        for method in sorted(set(declaration.methods) - {"HEAD", "OPTIONS"}):  # as /openapi.json lists them
            rows.append((method.lower(), path, sorted(set(aliases) - {path}), declaration.summary, declaration.access))
    return sorted(rows, key=lambda row: (row[1], row[0]))  # by path: the same whatever imported the routes first


def endpoint_table() -> str:
    lines = ["| method | path | also at | what it does | who may call it |", "| --- | --- | --- | --- | --- |"]
    for method, path, other_paths, summary, access in endpoint_rows():
        also = ", ".join(f"`{other}`" for other in other_paths)
        lines.append(f"| {method.upper()} | `{path}` | {also} | {_cell(summary)} | {access} |")
    return "\n".join(lines) + "\n"


# page -> {block name -> what makes its text}
BLOCKS: dict[str, dict[str, Callable[[], str]]] = {
    "docs/configuration.md": {"flags": flag_reference},
    "docs/endpoints.md": {"endpoints": endpoint_table},
}


def _block(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- generated: {name} [^\n]*-->\n)(.*?)(<!-- /generated: {name} -->)", re.S)


def refreshed(text: str, blocks: dict[str, Callable[[], str]]) -> str:
    """`text` with each named block's content made anew; a page without the block's markers is an error."""
    for name, make in blocks.items():
        pattern = _block(name)
        if not pattern.search(text):
            raise ValueError(f"no '<!-- generated: {name} ... -->' block")
        content = make().rstrip("\n") + "\n"
        text = pattern.sub(lambda match, content=content: match.group(1) + "\n" + content + "\n" + match.group(3), text)
    return text


def stale_pages(root: Path = ROOT, write: bool = False) -> list[str]:
    """The pages whose generated blocks differ from the code's; rewritten when `write`."""
    stale = []
    for page, blocks in BLOCKS.items():
        path = root / page
        text = path.read_text(encoding="utf-8")
        fresh = refreshed(text, blocks)
        if fresh != text:
            stale.append(page)
            if write:
                path.write_text(fresh, encoding="utf-8")
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m api_like_oai.reference", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 naming the pages behind the code")
    check = parser.parse_args(argv).check
    stale = stale_pages(write=not check)
    for page in stale:
        print(f"{page}: {'behind the code: run python -m api_like_oai.reference' if check else 'rewritten'}", file=sys.stderr)
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
