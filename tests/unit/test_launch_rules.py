"""A load's `args` are held to an allowlist of tuning flags with checked values (issue 48: a load's args
were any llama-server flags, so anyone reaching the port could read files, run commands, write files,
listen on every interface or add a key); the proxy's own flags come last, so they win."""

from __future__ import annotations

import pytest

from api_like_oai.supervisor.launch_rules import MAX_ARGS, DisallowedFlag, check_requested
from api_like_oai.supervisor.spec import LaunchSpec

# What issue 48 reproduced, and their neighbours: a file read, a shell, a file written, an address, a key.
REFUSED = [
    (["--chat-template-file", "/etc/shadow"], "--chat-template-file"),
    (["--tools", "exec_shell_command"], "--tools"),
    (["--tools", "all"], "--tools"),
    (["--log-file", "/root/.bashrc"], "--log-file"),
    (["--slot-save-path", "/"], "--slot-save-path"),
    (["--host", "0.0.0.0"], "--host"),
    (["--port", "22"], "--port"),
    (["--api-key", "mine"], "--api-key"),
    (["--api-key-file", "/srv/k"], "--api-key-file"),
    (["--cors-origins", "*"], "--cors-origins"),
    (["--path", "/"], "--path"),
    (["--rpc", "10.0.0.1:50052"], "--rpc"),
    (["-m", "/etc/passwd"], "-m"),
    (["--model", "/etc/passwd"], "--model"),
    (["--lora", "/srv/x.gguf"], "--lora"),
    (["--mmproj", "/srv/x.gguf"], "--mmproj"),
    (["--grammar-file", "/etc/passwd"], "--grammar-file"),
    (["--no-such-flag"], "--no-such-flag"),
    (["--ctx-size", "512", "--chat-template-file=/etc/shadow"], "--chat-template-file"),
    (["--host=0.0.0.0"], "--host"),
]


@pytest.mark.parametrize(("args", "flag"), REFUSED)
def test_a_flag_that_names_a_file_address_key_or_tool_is_refused_by_name(args, flag):
    with pytest.raises(DisallowedFlag, match=f"^{flag} may not be set"):
        check_requested(args)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--ctx-size", "--host", "0.0.0.0"], "--ctx-size takes an integer, not '--host'"),
        (["--ctx-size"], "--ctx-size needs a value"),
        (["--ctx-size", "512", "/etc/passwd"], "'/etc/passwd' is not a flag"),
        (["--ctx-size", "1e3"], "takes an integer"),
        (["--ctx-size", "99999999999"], "from 0 to"),
        (["--flash-attn", "/srv"], "takes one of auto, off, on"),
        (["--cache-type-k", "q4_0; id"], "takes one of"),
        (["--tensor-split", "1,-2"], "non-negative"),
        (["--no-repack=1"], "takes no value"),
        (["--ctx-size", "512"] * (MAX_ARGS // 2 + 1), f"at most {MAX_ARGS}"),
        (["--ctx-size", "5" * 200], "too long"),
    ],
)
def test_a_value_is_checked_and_cannot_smuggle_a_flag(args, said):
    with pytest.raises(DisallowedFlag, match=said.replace("(", r"\(")):
        check_requested(args)


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--ctx-size", "4096", "--parallel", "2", "--batch-size", "512", "-ub", "256"],
        ["-ngl", "99", "--tensor-split", "3,1", "--split-mode", "layer", "--main-gpu", "0"],
        ["-ngl", "auto"],
        ["--cache-type-k", "q8_0", "--cache-type-v", "q8_0", "--flash-attn", "on"],
        ["--flash-attn=auto", "--no-repack", "--threads", "2"],
        ["--temp", "0.7", "--top-p", "0.9", "--seed", "-1", "--repeat-penalty", "1.1"],
        ["--rope-scaling", "yarn", "--rope-scale", "4", "--yarn-orig-ctx", "8192"],
    ],
)
def test_tuning_flags_with_sane_values_are_taken_as_given(args):
    assert check_requested(args) == tuple(args)


def test_the_proxys_own_flags_come_after_the_operators_and_the_loads_so_they_win():
    spec = LaunchSpec("m", "/models/m.gguf", (8001,), args=("--ctx-size", "2048"))
    argv = spec.argv("llama-server", 0, "/slots", ("--ctx-size", "512"))
    assert argv[:5] == ["llama-server", "--ctx-size", "2048", "--ctx-size", "512"]
    own = argv[5:]
    assert own[:7] == ["--model", "/models/m.gguf", "--host", "127.0.0.1", "--port", "8001", "--cors-origins"]
    assert own[-2:] == ["--slot-save-path", "/slots"]
