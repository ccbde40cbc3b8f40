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
import tempfile
from collections.abc import Callable
from pathlib import Path

from .arguments import ENV_PREFIX, FLAG_GROUPS, build_parser, settings_from_args

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


def _apps() -> list:
    """The app as the CLI builds it with its default flags, and as a fleet member (the fleet's routes)."""
    from .app import create_app

    with tempfile.TemporaryDirectory() as folder, _without_environment():
        secret = Path(folder) / "fleet-secret"
        secret.write_text("a-secret-of-the-fleet-for-the-reference\n")
        argument_lists = [[], ["--fleet", "redis://127.0.0.1:1/0", "--fleet-secret-file", str(secret)]]
        return [
            create_app(settings_from_args(build_parser().parse_args(["--chat-prompt-model", "chatml", *a])))
            for a in argument_lists
        ]


def endpoint_rows() -> list[tuple[str, str, list[str], str]]:
    """(method, path, the other paths of the same view, what it does) of every public route of the apps,
    in /openapi.json's order (each API's, then the proxy's own). The one place the endpoint table is
    read from the code: when routes declare themselves, read the declarations here."""
    from .routes.docs import documentation, endpoints

    order = {(method, path): index for index, (method, path, *_) in enumerate(endpoints())}
    rows: dict[tuple[str, str], tuple[str, list[str]]] = {}
    aliases: dict[tuple[str, str], list[str]] = {}
    for app in _apps():
        for (method, path), (entry, alias_of) in documentation(app).items():
            if alias_of is None:
                rows[method, path] = (entry[2], aliases.setdefault((method, path), []))
            elif path not in aliases.setdefault((method, alias_of), []):
                aliases[method, alias_of].append(path)
    ranked = sorted(rows, key=lambda key: (order.get(key, len(order)), key[1], key[0]))
    return [(method, path, sorted(aliases[method, path]), rows[method, path][0]) for method, path in ranked]


def endpoint_table() -> str:
    lines = ["| method | path | also at | what it does |", "| --- | --- | --- | --- |"]
    for method, path, other_paths, summary in endpoint_rows():
        also = ", ".join(f"`{other}`" for other in other_paths)
        lines.append(f"| {method.upper()} | `{path}` | {also} | {_cell(summary)} |")
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
