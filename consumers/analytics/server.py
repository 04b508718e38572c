"""The sink's read-only query endpoint (127.0.0.1, an ephemeral port, advertised in its status file).

Why: chDB lets one process open a folder, so while the sink runs, `rftbus analytics query / report /
counts` (and `rftbus.consumers.analytics.counts`) ask the sink, which answers from its read-only
session. Bound to loopback only; like `run_query` it runs only what statement.check accepts (one read-only
statement: chDB's readonly=1 alone lets INTO OUTFILE and file() through), within the session's read limits.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .backends.base import AnalyticsError, Backend
from .statement import check

MAX_BODY = 1 << 20  # a query and its parameters; a larger body is refused unread


class QueryServer:
    def __init__(self, backend: Backend, host: str = "127.0.0.1"):
        self.backend = backend
        handler = _handler(backend)
        self.httpd = ThreadingHTTPServer((host, 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://{host}:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="analytics-query", daemon=True)

    def start(self) -> QueryServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _handler(backend: Backend) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: dict) -> None:
            data = json.dumps(body, default=str).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            if self.path == "/health":
                self._send(200, {"ok": True, "database": backend.database})
            else:
                self._send(404, {"error": f"no such endpoint {self.path}"})

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/query":
                self._send(404, {"error": f"no such endpoint {self.path}"})
                return
            length = self.headers.get("Content-Length", "0") or "0"
            size = int(length) if length.isdigit() else MAX_BODY + 1
            if size > MAX_BODY:  # refused before it is read
                self._send(413, {"error": f"request body of {size} bytes is over {MAX_BODY}"})
                return
            try:
                req = json.loads(self.rfile.read(size) or b"{}")
                sql, params = req["sql"], {str(k): str(v) for k, v in (req.get("params") or {}).items()}
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                self._send(400, {"error": f"bad request: {e}"})
                return
            try:
                check(sql)
                res = backend.query(sql, params)
            except AnalyticsError as e:
                self._send(400, {"error": str(e)})
                return
            self._send(200, {"columns": res.columns, "types": res.types, "rows": res.rows})

        def log_message(self, format, *args) -> None:  # queries are not worth a log line each
            pass

    return Handler
