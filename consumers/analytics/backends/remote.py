"""Queries through a running sink: the way into a chDB folder that the sink's process holds."""

from __future__ import annotations

import httpx

from .base import AnalyticsError, Backend, QueryError, Result


class SinkBackend(Backend):
    """Read-only: POSTs {sql, params} to the sink's local query endpoint (server.py)."""

    def __init__(self, url: str, database: str, timeout_s: float = 120.0):
        self.url, self.database = url.rstrip("/"), database
        self.describe = f"the running analytics sink ({self.url})"
        # trust_env=False: a loopback call must never go through an HTTP(S)_PROXY from the environment.
        self._http = httpx.Client(timeout=httpx.Timeout(timeout_s, connect=2.0), trust_env=False)
        try:
            self._http.get(f"{self.url}/health").raise_for_status()
        except httpx.HTTPError:
            self._http.close()
            raise

    def execute(self, sql: str) -> None:
        raise AnalyticsError("the sink's query endpoint is read-only")

    def insert_rows(self, table: str, columns: list[str], body: bytes) -> None:
        raise AnalyticsError("the sink's query endpoint is read-only")

    def query(self, sql: str, params: dict[str, str] | None = None) -> Result:
        try:
            r = self._http.post(f"{self.url}/query", json={"sql": sql, "params": params or {}})
        except httpx.HTTPError as e:
            raise AnalyticsError(f"{self.describe} did not answer: {e}") from None
        body = r.json()
        if r.status_code != 200:
            raise QueryError(body.get("error", f"HTTP {r.status_code}"))
        return Result(body["columns"], body["types"], body["rows"])

    def close(self) -> None:
        self._http.close()
