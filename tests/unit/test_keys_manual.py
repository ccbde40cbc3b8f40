"""The manual's "Keys, limits and usage" commands (docs/keys.md), run as written (the `keys` and `usage` lines of its sh
block, on a config file of that name in a temporary directory, as a user would run them)."""

from __future__ import annotations

import csv
import io
import re
import shlex
import subprocess
import sys

import pytest

from ..servers import ROOT

PAGE = ROOT / "docs" / "keys.md"


def readme_commands() -> list[list[str]]:
    """The page's first sh block's `api-like-oai keys|usage ...` command lines (continuations joined,
    comments dropped)."""
    block = re.search(r"```sh\n(.*?)```", PAGE.read_text(), re.S).group(1).replace("\\\n", " ")
    lines = [shlex.split(line, comments=True) for line in block.splitlines()]
    return [line for line in lines if line[:1] == ["api-like-oai"] and line[1] in ("keys", "usage")]


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "config.yaml").write_text(
        f"store: sqlite://{tmp_path}/store.sqlite3\nmodels:\n  smol:\n    upstreams: [http://127.0.0.1:9]\n"
    )
    return tmp_path


def run(workdir, argv: list[str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "api_like_oai", *argv[1:]],
        cwd=workdir,
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, (argv, done.stderr)
    return done.stdout


def test_the_readmes_key_commands_run_as_written(workdir):
    commands = readme_commands()
    assert [command[1:3] for command in commands] == [
        ["keys", "create"],
        ["keys", "create"],
        ["keys", "create"],
        ["keys", "list"],
        ["keys", "update"],
        ["keys", "revoke"],
        ["usage", "--config"],
        ["usage", "--config"],
    ]
    outputs = [run(workdir, command) for command in commands]
    assert all(output.startswith("sk-alo-") for output in outputs[:3])
    listed = outputs[3].splitlines()
    assert listed[0].startswith("batch\tmodels=*\tno limits\tpriority=low\t")
    assert listed[1].startswith("voice\tmodels=*\taudio_seconds_per_day=3600\tpriority=normal\t")
    assert listed[2].startswith(
        "writer\tmodels=smol\trpm=60 tpm=20000 tokens_per_day=500000 max_parallel=2 max_stored_mib=100\tpriority=normal\texpires="
    )
    assert outputs[4].startswith(
        "writer\tmodels=smol\ttpm=20000 tokens_per_day=500000 max_parallel=2 max_stored_mib=100\tpriority=high"
    )
    assert outputs[5] == "key 'writer' revoked\n"
    assert list(csv.reader(io.StringIO(outputs[6])))[0][:4] == ["day", "key", "model", "api"]
    assert outputs[7].strip() == "[]"  # no request was made: no usage
