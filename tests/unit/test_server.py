"""What gunicorn's master imports: nothing that the gevent worker must patch first, nor gevent."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from api_like_oai.arguments import parse_settings
from api_like_oai.server import is_loopback, warn_if_open_to_the_network

PATCH_FIRST = ("urllib3", "requests", "flask", "werkzeug", "prometheus_client", "api_like_oai.app", "gevent", "redis")


def test_the_master_imports_nothing_the_worker_must_patch_first():
    script = (
        "import sys, api_like_oai.cli, api_like_oai.arguments, api_like_oai.server, api_like_oai.worker; "
        "from gunicorn.util import load_class; load_class('api_like_oai.worker.EventWorker'); "
        "api_like_oai.arguments.parse_settings(['--workers', '2', '--store', 'redis://127.0.0.1:6379/0']); "
        f"print([m for m in {PATCH_FIRST!r} if m in sys.modules])"
    )
    output = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "[]"


@pytest.mark.parametrize(
    "host, loopback",
    [
        ("127.0.0.1", True),
        ("127.8.0.1", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.10", False),
        ("10.1.2.3", False),
        ("fe80::1", False),
        ("no-such-host.invalid", False),
    ],
)
def test_loopback_is_told_from_addresses_and_names(host, loopback):
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(
    "argv, warned",
    [
        (["--host", "0.0.0.0"], True),
        (["--host", "192.168.1.10", "--port", "9000"], True),
        (["--host", "0.0.0.0", "--api-key", "secret-key"], False),
        (["--host", "127.0.0.1"], False),
        ([], False),
    ],
)
def test_listening_beyond_loopback_without_a_key_is_a_warning_naming_the_address(caplog, argv, warned):
    settings = parse_settings(argv)
    with caplog.at_level(logging.WARNING, logger="api_like_oai"):
        warn_if_open_to_the_network(settings)
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    if not warned:
        assert warnings == []
        return
    [warning] = warnings
    assert f"listens on {settings.host} port {settings.port} with no API key" in warning


# What the master holds, the worker copies page by page as it uses it (idle memory): the master
# imports pydantic and the request models only to read a config file.
WORKER_ONLY = ("pydantic", "api_like_oai.protocol", "api_like_oai.config")
# Imported by the first request that needs them, not when the app is built.
ON_FIRST_USE = (
    "api_like_oai.dialects.anthropic",
    "api_like_oai.dialects.responses",
    "api_like_oai.services.stored_responses",
    "api_like_oai.services.tool_calling",
)


def test_the_master_without_a_config_file_imports_no_pydantic():
    script = (
        "import sys, api_like_oai.cli, api_like_oai.arguments, api_like_oai.server, api_like_oai.worker; "
        "api_like_oai.arguments.parse_settings(['--workers', '2']); "
        f"print([m for m in {WORKER_ONLY!r} if m in sys.modules])"
    )
    output = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "[]"


def test_the_app_imports_the_dialects_and_tool_calling_on_first_use_and_openapi_still_lists_them():
    script = (
        "import sys; from api_like_oai import create_app; from api_like_oai.arguments import parse_settings; "
        "app = create_app(parse_settings(['--llama-api', 'http://127.0.0.1:9'])); "
        f"print([m for m in {ON_FIRST_USE!r} if m in sys.modules]); "
        "paths = app.test_client().get('/openapi.json').get_json()['paths']; "
        "print('/v1/messages' in paths and '/v1/responses' in paths)"
    )
    output = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert output.split("\n")[:2] == ["[]", "True"]


def test_a_streams_head_waits_for_its_first_chunk_and_nothing_else_does():
    """worker.send_flags: gunicorn sends a chunked answer's head on its own just before the first chunk;
    MSG_MORE lets the kernel send both in one segment (issue 54). Any other head, and every chunk (the
    last, empty one too), goes at once."""
    import socket

    from api_like_oai.worker import send_flags

    stream_head = (
        b"HTTP/1.1 200 OK\r\nServer: gunicorn\r\nDate: Sun, 06 Dec 2026 19:48:49 GMT\r\nConnection: keep-alive\r\n"
        b"Transfer-Encoding: chunked\r\nContent-Type: text/event-stream; charset=utf-8\r\n\r\n"
    )
    plain_head = b"HTTP/1.1 200 OK\r\nServer: gunicorn\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n"
    assert send_flags(stream_head) == socket.MSG_MORE
    assert send_flags(plain_head) == 0
    assert send_flags(plain_head + b"Transfer-Encoding: chunked\r\n") == 0  # in a body, not the head
    assert send_flags(b"D9\r\ndata: {}\n\n\r\n") == send_flags(b"0\r\n\r\n") == 0
