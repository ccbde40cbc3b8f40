"""Traces over OTLP/HTTP (--otlp-endpoint or OTEL_EXPORTER_OTLP_ENDPOINT), through OpenTelemetry's SDK.

Imported only when traces are on: the opentelemetry packages are the optional extra
`api-like-oai[otel]`, and without them nothing of this runs. A request's trace is made when its
RequestRecord closes, from the times the record kept (observability.stage, its upstream marks): the
spans carry their real start and end times, and the token path does nothing for them. One trace per
request, continuing the client's `traceparent`:

    {operation} {model}   (SERVER; GenAI attributes, the HTTP route and status, error.type)
      admission           parsing, limits, the model looked up (and a load waited for)
      render              the prompt: template, tools, fitted to the context
      store               stored responses read and written (the Responses API)
      upstream queue      sent, until the upstream starts reading the prompt (with prefill progress)
      prefill             the prompt read, until the answer's first event
      generation          the answer, until its last event
      mcp SERVER TOOL     each MCP listing and call the proxy ran (mcp.method.name, gen_ai.tool.name, the
                          server's label, error.type and the error as the span's status)
"""

from __future__ import annotations

import os
import time

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .version import __version__

# The GenAI semantic conventions are still marked Development: these attribute names are those of
# semantic conventions 1.44.0 (opentelemetry-semantic-conventions 0.66b2), pinned here.
SEMCONV_SCHEMA_URL = "https://opentelemetry.io/schemas/1.44.0"
PROVIDER_NAME = "llama.cpp"
OPERATIONS = {
    "/v1/chat/completions": "chat",
    "/chat/completions": "chat",
    "/v1/messages": "chat",
    "/v1/responses": "chat",
    "/v1/completions": "text_completion",
    "/completions": "text_completion",
    "/v1/embeddings": "embeddings",
    "/embeddings": "embeddings",
    "/v1/rerank": "rerank",
    "/rerank": "rerank",
    "/v1/reranking": "rerank",
    "/v2/rerank": "rerank",
    "/v1/audio/transcriptions": "transcription",
    "/v1/audio/translations": "translation",
}


class Tracing:
    """The trace exporter of one process (made again after a fork: gunicorn's workers each have theirs)."""

    def __init__(self, endpoint: str):
        self.traces_url = traces_url(endpoint)
        self._tracer = None
        self._pid: int | None = None

    def tracer(self):
        if self._pid != os.getpid():
            provider = TracerProvider(resource=Resource.create({"service.name": "api-like-oai", "service.version": __version__}))
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=self.traces_url)))
            self._tracer = provider.get_tracer("api_like_oai", __version__, schema_url=SEMCONV_SCHEMA_URL)
            self._pid = os.getpid()
        return self._tracer

    def export(self, record, closed_at: float) -> None:
        """The trace of one closed request (a RequestRecord), handed to the batch exporter."""
        clock = _Clock(record.started)
        parent = TraceContextTextMapPropagator().extract({"traceparent": record.traceparent}) if record.traceparent else None
        root = self.tracer().start_span(
            _root_name(record),
            context=parent,
            kind=SpanKind.SERVER,
            start_time=clock.ns(record.started),
            attributes=root_attributes(record),
        )
        if record.status >= 400:
            root.set_status(Status(StatusCode.ERROR, record.error_code or str(record.status)))
        inside = set_span_in_context(root)
        for name, started, ended in child_spans(record):
            self.tracer().start_span(name, context=inside, start_time=clock.ns(started)).end(clock.ns(ended))
        for step in record.mcp_steps:
            span = self.tracer().start_span(
                f"mcp {step.server} {step.tool}",
                context=inside,
                start_time=clock.ns(step.started),
                attributes=mcp_attributes(step),
            )
            if step.error is not None:
                span.set_status(Status(StatusCode.ERROR, step.error))
            span.end(clock.ns(step.ended or closed_at))
        root.end(clock.ns(closed_at))


def traces_url(endpoint: str) -> str:
    """OTLP/HTTP's traces URL from a base endpoint, as OTEL_EXPORTER_OTLP_ENDPOINT means it."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else endpoint + "/v1/traces"


class _Clock:
    """perf_counter readings as wall-clock nanoseconds (what spans take)."""

    def __init__(self, started: float):
        self.offset_ns = time.time_ns() - int((time.perf_counter() - started) * 1e9) - int(started * 1e9)

    def ns(self, reading: float) -> int:
        return self.offset_ns + int(reading * 1e9)


def _root_name(record) -> str:
    operation = OPERATIONS.get(record.endpoint)
    return f"{operation} {record.requested_model or record.model}" if operation else record.endpoint


def root_attributes(record) -> dict:
    """The request span's attributes: GenAI semantic conventions for generation endpoints, HTTP's for all."""
    attributes = {
        "http.route": record.endpoint,
        "http.response.status_code": record.status,
        "api_like_oai.request_id": record.request_id,
    }
    if record.status >= 400:
        attributes["error.type"] = record.error_code or str(record.status)
    operation = OPERATIONS.get(record.endpoint)
    if operation is None:
        return attributes
    attributes |= {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": PROVIDER_NAME,
        "gen_ai.request.model": record.requested_model or record.model,
        "gen_ai.response.model": record.model,
        "gen_ai.usage.input_tokens": record.prompt_tokens,
        "gen_ai.usage.output_tokens": record.completion_tokens,
    }
    if record.upstream != "-":
        attributes["server.address"] = record.upstream
    if record.route != "-":  # why that upstream (prefix routing's reason, a fleet front's route=)
        attributes["api_like_oai.route"] = record.route
    if record.first_token is not None:
        attributes["gen_ai.response.time_to_first_chunk"] = record.first_token - record.started
    return attributes


def mcp_attributes(step) -> dict:
    """An MCP step's span attributes (observability.McpStep): the MCP semantic conventions' method and
    tool (a call is GenAI's execute_tool), the server as the request named it, the error's type."""
    attributes = {"mcp.method.name": step.method, "api_like_oai.mcp.server": step.server}
    if step.method == "tools/call":
        attributes |= {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": step.tool}
    if step.error_type is not None:
        attributes["error.type"] = step.error_type
    return attributes


def child_spans(record) -> list[tuple[str, float, float]]:
    """(name, start, end) of the stages the request went through, as the record timed them, by start."""
    spans = [tuple(entry) for entry in record.stages]
    read_from = record.prefill_at or record.upstream_at
    if record.upstream_at is not None and record.prefill_at is not None:
        spans.append(("upstream queue", record.upstream_at, record.prefill_at))
    if read_from is not None and record.prompt_read_at is not None:
        spans.append(("prefill", read_from, record.prompt_read_at))
    if record.prompt_read_at is not None and record.generated_at is not None:
        spans.append(("generation", record.prompt_read_at, record.generated_at))
    return sorted(spans, key=lambda span: span[1])
