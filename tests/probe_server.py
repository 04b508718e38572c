"""A local HTTP server that records every request it gets: the host service a sandbox or a forged record must never
reach (tests/integration/test_sql_reader.py, test_weights_admit.py)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def probe_server(body: bytes = b"secret_header\n1\n") -> Iterator[tuple[int, list[str]]]:
    """(its port on 127.0.0.1, the paths requested so far)."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's naming)
            hits.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv.server_address[1], hits
    finally:
        srv.shutdown()
