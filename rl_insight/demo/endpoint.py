"""Serve a prometheus-client registry on a free loopback port, always in the classic text format.

Real engines' names contain ':' (`vllm:num_requests_running`). prometheus-client's OpenMetrics
output (which Prometheus negotiates by default) escapes them to '_' in newer releases; the
stand-ins answer in the text format so that they show the names as the engines define them.
Dashboards accept both spellings (`vllm[:_]…`).
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST


class MetricsEndpoint:
    def __init__(self, registry: CollectorRegistry, host: str = "127.0.0.1") -> None:
        reg = registry

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = generate_latest(reg)
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer((host, 0), Handler)
        self._httpd.daemon_threads = True
        self.address = f"{host}:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, name="demo-metrics-endpoint", daemon=True).start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
