"""Traces are off by default and then cost no import; where they go when on; the request's live view."""

from __future__ import annotations

import subprocess
import sys

import pytest

from api_like_oai.arguments import build_parser, settings_from_args
from api_like_oai.observability import Metrics, RequestRecord, stage
from api_like_oai.tracing import traces_url


def test_without_an_endpoint_no_opentelemetry_is_imported():
    script = (
        "import sys; from api_like_oai import create_app; from api_like_oai.arguments import parse_settings; "
        "app = create_app(parse_settings(['--llama-api', 'http://127.0.0.1:9'])); "
        "assert app.test_client().get('/v1/internal/requests').status_code == 200; "
        "print([m for m in sys.modules if m.startswith('opentelemetry')])"
    )
    env = {"PATH": "/usr/bin:/bin"}  # no OTEL_EXPORTER_OTLP_ENDPOINT
    output = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env).stdout
    assert output.strip() == "[]"


def test_the_endpoint_comes_from_the_flag_or_opentelemetrys_variable(monkeypatch):
    assert settings_from_args(build_parser().parse_args([])).otlp_endpoint is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    assert settings_from_args(build_parser().parse_args([])).otlp_endpoint == "http://collector:4318"
    flagged = settings_from_args(build_parser().parse_args(["--otlp-endpoint", "http://other:4318"]))
    assert flagged.otlp_endpoint == "http://other:4318"


@pytest.mark.parametrize(
    ("endpoint", "url"),
    [
        ("http://c:4318", "http://c:4318/v1/traces"),
        ("http://c:4318/", "http://c:4318/v1/traces"),
        ("http://c:4318/v1/traces", "http://c:4318/v1/traces"),
    ],
)
def test_the_traces_url_is_otlps(endpoint, url):
    assert traces_url(endpoint) == url


def test_stages_are_not_timed_without_traces():
    record = RequestRecord("/v1/chat/completions", Metrics())
    with stage(record, "render"):
        pass
    assert record.stages == []


def test_the_live_view_says_the_phase_and_nothing_of_the_prompt():
    from api_like_oai.backends.events import PromptProgress
    from api_like_oai.services.inflight import UsageCounter

    record = RequestRecord("/v1/messages", Metrics(), model="smollm")
    assert record.live()["phase"] == "queued"
    record.prompt_progress(PromptProgress(total=200, cached=100, processed=125, elapsed_ms=50))
    assert (record.live()["phase"], record.live()["prefill_percent"]) == ("prefill", 25.0)
    record.prompt_read()
    record.usage = UsageCounter()
    record.token_arrived()
    assert record.live()["phase"] == "generating" and record.live()["generated_tokens"] == 0
    assert set(record.live()) == {
        "request_id",
        "endpoint",
        "model",
        "upstream",
        "phase",
        "elapsed_seconds",
        "prefill_percent",
        "prompt_tokens",
        "generated_tokens",
        "tokens_per_second",
        "stoppable",
    }


def test_a_relayed_requests_span_names_its_box_and_the_fleets_route():
    from api_like_oai.tracing import root_attributes

    record = RequestRecord("/v1/chat/completions", Metrics(), model="smol")
    record.upstream, record.route, record.status = "http://10.0.0.2:8081", "prefix", 200
    attributes = root_attributes(record)
    assert (attributes["server.address"], attributes["api_like_oai.route"]) == ("http://10.0.0.2:8081", "prefix")
    assert "api_like_oai.route" not in root_attributes(RequestRecord("/v1/chat/completions", Metrics(), model="smol"))


def test_an_mcp_steps_span_carries_its_method_tool_server_and_error():
    from api_like_oai.observability import McpStep
    from api_like_oai.tracing import mcp_attributes

    assert mcp_attributes(McpStep("files", "tools/list", "tools/list")) == {
        "mcp.method.name": "tools/list",
        "api_like_oai.mcp.server": "files",
    }
    failed = McpStep("files", "fail", "tools/call", error_type="mcp_tool_execution_error", error="it failed")
    assert mcp_attributes(failed) == {
        "mcp.method.name": "tools/call",
        "api_like_oai.mcp.server": "files",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "fail",
        "error.type": "mcp_tool_execution_error",
    }
