"""A stand-in OpenTelemetry collector for tests: an OTLP/HTTP (protobuf) receiver that keeps the
spans and the metric data points it was sent. Decoding uses the official OTLP protobuf
definitions (opentelemetry-proto), so what it accepts is what a real collector would."""

import http.server
import threading

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2


class Sink:
    def __init__(self, host, port=4318):
        # Every span: service, resource {attribute: value}, name, kind, trace_id, span_id, parent_span_id (hex; "" for
        # a root), trace_state, links [(trace_id, span_id)], attributes {key: value}, status code (0 unset,
        # 1 ok, 2 error) and message.
        self.spans = []
        # (metric name, {attribute: value}, value); the resource's attributes are in the dict
        # too, as "resource.<key>" (resource.service.name, resource.service.instance.id, ...).
        self.points = []
        self.lock = threading.Lock()
        sink = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path == "/v1/traces":
                    req = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                    resp = trace_service_pb2.ExportTraceServiceResponse()
                    sink._traces(req)
                elif self.path == "/v1/metrics":
                    req = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
                    resp = metrics_service_pb2.ExportMetricsServiceResponse()
                    sink._metrics(req)
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                out = resp.SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer((host, port), Handler)
        self.url = f"http://{host}:{self.server.server_port}"  # what OTEL_EXPORTER_OTLP_ENDPOINT names
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @staticmethod
    def _service(resource):
        for a in resource.attributes:
            if a.key == "service.name":
                return a.value.string_value
        return ""

    @staticmethod
    def _value(v):
        kind = v.WhichOneof("value")
        return getattr(v, kind) if kind else None

    def _traces(self, req):
        with self.lock:
            for rs in req.resource_spans:
                svc = self._service(rs.resource)
                resource = {a.key: self._value(a.value) for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    self.spans.extend({
                        "service": svc, "resource": resource, "name": s.name, "kind": s.kind,
                        "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex(), "trace_state": s.trace_state,
                        "links": [(link.trace_id.hex(), link.span_id.hex()) for link in s.links],
                        "attributes": {a.key: self._value(a.value) for a in s.attributes},
                        "status": s.status.code, "status_message": s.status.message,
                    } for s in ss.spans)

    def _metrics(self, req):
        with self.lock:
            for rm in req.resource_metrics:
                resource = {f"resource.{a.key}": a.value.string_value for a in rm.resource.attributes}
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        kind = m.WhichOneof("data")
                        for p in getattr(m, kind).data_points:
                            attrs = {a.key: a.value.string_value for a in p.attributes}
                            attrs.update(resource)
                            if kind in ("sum", "gauge"):
                                value = p.as_int if p.WhichOneof("value") == "as_int" else p.as_double
                            else:
                                value = getattr(p, "count", 0)
                            self.points.append((m.name, attrs, value))

    def close(self):
        self.server.shutdown()
