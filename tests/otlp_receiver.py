"""A real OTLP/HTTP trace receiver for the tests: it decodes each export's protobuf with
`opentelemetry-proto` (as a collector does) and keeps the spans, flattened into plain dicts."""

from __future__ import annotations

import http.server
import threading
import time
from dataclasses import dataclass, field

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest, ExportTraceServiceResponse
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

KINDS = {Span.SPAN_KIND_SERVER: "server", Span.SPAN_KIND_INTERNAL: "internal", Span.SPAN_KIND_CLIENT: "client"}


@dataclass
class OtlpReceiver:
    spans: list[dict] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    server: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def start(self) -> OtlpReceiver:
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802 - http.server's naming
                export = ExportTraceServiceRequest.FromString(self.rfile.read(int(self.headers["Content-Length"])))
                receiver.paths.append(self.path)
                receiver.spans += flattened(export)
                body = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def trace_of(self, request_id: str, timeout: float = 20) -> list[dict]:
        """The spans of the trace whose root has api_like_oai.request_id `request_id`, root first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            roots = [span for span in self.spans if span["attributes"].get("api_like_oai.request_id") == request_id]
            if roots:
                trace = [span for span in self.spans if span["trace_id"] == roots[0]["trace_id"]]
                return sorted(trace, key=lambda span: (span is not roots[0], span["start"]))
            time.sleep(0.1)
        raise AssertionError(f"no trace for request {request_id}; spans: {[s['name'] for s in self.spans]}")

    def stop(self) -> None:
        self.server.shutdown()


def flattened(export: ExportTraceServiceRequest) -> list[dict]:
    spans = []
    for resource_spans in export.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            spans += [
                {
                    "name": span.name,
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(),
                    "kind": KINDS.get(span.kind, span.kind),
                    "start": span.start_time_unix_nano,
                    "end": span.end_time_unix_nano,
                    "attributes": attributes(span.attributes),
                    "error": span.status.code == Status.STATUS_CODE_ERROR,
                    "schema_url": scope_spans.schema_url,
                    "resource": resource,
                }
                for span in scope_spans.spans
            ]
    return spans


def attributes(key_values) -> dict:
    return {item.key: getattr(item.value, item.value.WhichOneof("value")) for item in key_values}
