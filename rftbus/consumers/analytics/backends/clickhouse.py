"""A ClickHouse server through clickhouse-connect (HTTP), what docker-compose runs.

Inserts go as JSONEachRow through `raw_insert` (the same body the chDB backend sends), reads as
JSONCompact through `raw_query` with server-side `{name:Type}` binding and `readonly=2`, so the
server refuses writes on the query path. A `chdb:///folder` URL gives clickhouse-connect's own
embedded chDB client instead of HTTP: the same client code (statement building, parameter binding,
settings) against the same dialect, which is how this backend is tested without a server.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlparse

from .base import READ_SETTINGS, read_limits, Backend, FolderLocked, QueryError, Result, WriteError, check_params, short_error


def connect_client(url: str, user: str, password: str, connect_timeout_s: float) -> Any:
    import clickhouse_connect

    if url.startswith("chdb:"):
        try:
            return clickhouse_connect.get_client(dsn=url)
        except Exception as e:
            if "Cannot lock file" in str(e):
                raise FolderLocked(f"chDB folder of {url} is in use by another process") from None
            raise
    u = urlparse(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise QueryError(f"analytics.url {url!r} is not an http(s):// ClickHouse URL (or a chdb:///folder DSN)")
    secure = u.scheme == "https"
    try:
        return clickhouse_connect.get_client(
            host=u.hostname, port=u.port or (8443 if secure else 8123), username=user, password=password,
            secure=secure, connect_timeout=int(max(1, connect_timeout_s)), proxy_path=u.path.rstrip("/"))
    except Exception as e:
        raise QueryError(f"ClickHouse at {url} is not reachable: {short_error(e)}") from None


class ClickHouseBackend(Backend):
    def __init__(self, client: Any, database: str, describe: str, *, writable: bool, limits: dict | None = None):
        self.client, self.database, self.describe = client, database, describe
        self.limits = limits or read_limits()
        self._lock = threading.Lock()  # clickhouse-connect clients are not meant for concurrent use
        if writable:
            self.ensure_schema()
        try:
            self.client.database = database
        except Exception as e:
            raise QueryError(f"{describe}: database {database} is missing ({short_error(e)})") from None

    @classmethod
    def connect(cls, url: str, database: str, user: str, password: str, connect_timeout_s: float,
                *, writable: bool, limits: dict | None = None) -> ClickHouseBackend:
        client = connect_client(url, user, password, connect_timeout_s)
        u = urlparse(url)
        shown = url if u.scheme == "chdb" else f"ClickHouse {u.scheme}://{u.hostname}:{u.port or ''}{u.path}"
        return cls(client, database, shown, writable=writable, limits=limits)

    def execute(self, sql: str) -> None:
        with self._writing():
            self.client.command(sql)

    def insert_rows(self, table: str, columns: list[str], body: bytes) -> None:
        with self._writing():
            self.client.raw_insert(f"{self.database}.{table}", columns, insert_block=body, fmt="JSONEachRow")

    @contextmanager
    def _writing(self):
        from clickhouse_connect.driver.exceptions import ClickHouseError

        with self._lock:
            try:
                yield
            except (ClickHouseError, OSError) as e:  # server errors and transport failures alike
                raise WriteError(f"{self.describe}: {short_error(e)}") from e

    def query(self, sql: str, params: dict[str, str] | None = None) -> Result:
        params = check_params(sql, params)
        try:
            with self._lock:
                out = self.client.raw_query(sql.strip().rstrip(";"), parameters=params or None,
                                            settings={"readonly": 2, **READ_SETTINGS, **self.limits}, fmt="JSONCompact")
        except Exception as e:
            raise QueryError(short_error(e)) from None
        return Result.from_json_compact(out)

    def close(self) -> None:
        with self._lock:
            self.client.close()
