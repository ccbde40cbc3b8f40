"""README.md is the front door (issue 53): short, and every link in it leads somewhere, on GitHub (the
file exists, its heading exists) as in the site (`scripts/docs build` checks the same strictly)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

from api_like_oai.arguments import parse_settings

from ..servers import ROOT

README = ROOT / "README.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """A heading's anchor as GitHub and the site's toc both make it for plain headings."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text))


def anchors(path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {slug(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def local_links() -> list[str]:
    return [target for target in LINK.findall(README.read_text()) if not re.match(r"[a-z]+://", target)]


def test_the_readme_is_a_front_door_of_at_most_300_lines():
    assert len(README.read_text().splitlines()) <= 300


def test_every_link_of_the_readme_resolves():
    links = local_links()
    assert "docs/getting-started.md" in links and "DESIGN.md" in links
    broken = []
    for target in links:
        path, _, anchor = target.partition("#")
        file = ROOT / path if path else README
        if not file.is_file() or (anchor and anchor not in anchors(file)):
            broken.append(target)
    assert broken == []


def test_the_anchor_check_sees_a_missing_heading():
    assert "the-regression-guard" in anchors(ROOT / "docs" / "benchmarks.md")
    assert "no-such-heading" not in anchors(ROOT / "docs" / "benchmarks.md")
    assert slug("Config file: several models, several servers") == "config-file-several-models-several-servers"


# The README's set-ups, run as far as a test can without their machines: the server lines parse into
# settings (a wrong flag, a missing value, a flag that needs another fails start-up there), and the
# `keys`/`usage` lines run against a store in a temporary folder.
PATH_FLAGS = {"--model": "model.gguf", "--admin-key-file": "admin-key", "--api-key-file": "keys.txt"}


def readme_commands() -> list[list[str]]:
    text = README.read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    lines = [shlex.split(line, comments=True) for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    return [line for line in lines if line[:1] == ["api-like-oai"]]


def runnable(argv: list[str], folder) -> list[str]:
    """`argv` with its files and folders made in `folder`, its store there, and a llama-server binary."""
    out = []
    for previous, argument in zip(["", *argv[:-1]], argv, strict=True):
        if previous in PATH_FLAGS:
            argument = str(folder / PATH_FLAGS[previous])
        elif previous == "--models-dir":
            argument = str(folder)
        elif previous == "--fleet-secret-file":
            argument = str(folder / "fleet-secret")
        elif previous == "--store" and argument.startswith("sqlite://"):
            argument = f"sqlite:///{folder}/store.sqlite3"
        out.append(argument)
    return out


def test_the_readmes_commands_run_as_written(tmp_path):
    for name in ("model.gguf", "admin-key", "keys.txt"):
        (tmp_path / name).write_text("key-for-the-readme-test\n")
    (tmp_path / "fleet-secret").write_text("a-fleet-secret-of-more-than-16\n")
    llama_server = tmp_path / "llama-server"
    llama_server.write_text("#!/bin/sh\n")
    llama_server.chmod(0o755)
    commands = readme_commands()
    servers = [argv for argv in commands if argv[1] not in ("keys", "usage")]
    managing = [argv for argv in commands if argv not in servers]
    assert len(servers) >= 4 and [argv[1:3] for argv in managing] == [["keys", "create"], ["usage", "--store"]]
    for argv in servers:
        parse_settings([*runnable(argv[1:], tmp_path), "--llama-server", str(llama_server)])
    for argv in managing:
        command = [sys.executable, "-m", "api_like_oai", *runnable(argv[1:], tmp_path)]
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
        assert done.returncode == 0, (argv, done.stderr)
