"""A stand-in OpenTelemetry collector for `bench/run.py --tracing`: accepts OTLP/HTTP exports
(POST /v1/traces), counts them and their bytes, and answers `GET /stats` with the counts.

    python bench/otlp_sink.py PORT

It decodes nothing: the gateway's cost is what is measured, not the collector's.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_lock = threading.Lock()
_stats = {"exports": 0, "bytes": 0}


class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # the exporter keeps its connection

    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with _lock:
            _stats["exports"] += 1
            _stats["bytes"] += len(body)
        self._answer(b"", "application/x-protobuf")

    def do_GET(self):  # noqa: N802
        with _lock:
            body = json.dumps(_stats).encode()
        self._answer(body, "application/json")

    def _answer(self, body: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
