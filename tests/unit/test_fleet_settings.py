"""--fleet, --advertise and --fleet-secret-file: what start-up accepts, and the secret kept out of sight."""

from __future__ import annotations

import pytest

from api_like_oai.arguments import StartupError, build_parser, settings_from_args
from api_like_oai.cli import main

REDIS = "redis://127.0.0.1:6379/0"


def settings(*argv: str):
    return settings_from_args(build_parser().parse_args(list(argv)))


@pytest.fixture
def secret_file(tmp_path):
    path = tmp_path / "fleet-secret"
    path.write_text("s3cret-of-the-fleet-0123456789\n")
    return str(path)


def test_a_front_has_no_models_of_its_own_and_a_box_advertises_its_address(secret_file):
    front = settings("--fleet", REDIS, "--fleet-secret-file", secret_file)
    assert front.models == () and front.fleet.advertise is None
    assert front.fleet.secret == "s3cret-of-the-fleet-0123456789"
    box = settings("--fleet", REDIS, "--fleet-secret-file", secret_file, "--advertise", "http://10.0.0.2:8081/")
    assert box.fleet.advertise == "http://10.0.0.2:8081" and [m.name for m in box.models] == ["llama.cpp"]


def test_the_secret_is_in_no_repr_of_the_settings(secret_file):
    assert "s3cret" not in repr(settings("--fleet", REDIS, "--fleet-secret-file", secret_file))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--fleet", REDIS], "--fleet needs --fleet-secret-file"),
        (["--fleet", "10.0.0.1:6379", "--fleet-secret-file", "x"], "--fleet takes a Redis URL"),
        (["--advertise", "http://10.0.0.2:8081"], "need --fleet"),
        (["--fleet", REDIS, "--fleet-secret-file", "/nonexistent/secret"], "cannot read --fleet-secret-file"),
        (["--rpc-lend", "300"], "need --fleet"),
    ],
)
def test_a_fleet_that_cannot_work_stops_start_up(argv, message):
    with pytest.raises(StartupError, match=message):
        settings(*argv)


def test_a_short_secret_is_refused(tmp_path, capsys):
    short = tmp_path / "short"
    short.write_text("1234")
    assert main(["--fleet", REDIS, "--fleet-secret-file", str(short)]) == 2
    assert "at least 16 characters" in capsys.readouterr().err


def test_lending_memory_needs_an_advertised_box_and_an_rpc_server(secret_file, tmp_path):
    fleet = ["--fleet", REDIS, "--fleet-secret-file", secret_file, "--rpc-lend", "300"]
    with pytest.raises(StartupError, match="--rpc-lend needs --advertise"):
        settings(*fleet)
    with pytest.raises(StartupError, match="--rpc-lend needs rpc-server"):
        settings(*fleet, "--advertise", "http://10.0.0.3:8081", "--rpc-server", str(tmp_path / "missing"))
    binary = tmp_path / "rpc-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    lender = settings(*fleet, "--advertise", "http://10.0.0.3:8081", "--rpc-server", str(binary))
    assert (lender.fleet.rpc_lend_mib, lender.fleet.rpc_server, lender.fleet.advertised_host) == (300, str(binary), "10.0.0.3")
