"""Embedded ClickHouse (chDB): a folder under the state folder, one process at a time.

chDB locks its folder (`<folder>/status`) for the whole process, read-only sessions included
(measured with chdb 4.4: a second process fails with "Cannot lock file ... Another server instance
in same directory is already running"). Inside one process, sessions on the same folder share the
engine, so a writer process keeps two: a read-write one for its inserts and a `readonly=1` one that
answers queries (ClickHouse itself then refuses writes, any SET, and the table functions that reach
outside the database, such as file() and url(): an embedded engine has no user_files_path to confine
them). Other processes reach a running sink's data through the sink (see server.py / reader.py).
"""

from __future__ import annotations

import threading
from pathlib import Path
from urllib.parse import urlencode

from .base import READ_SETTINGS, read_limits, Backend, FolderLocked, QueryError, Result, WriteError, check_params, short_error

_LOCKED = "Cannot lock file"


def _session(path: Path, **settings):
    import chdb.session

    conn = f"file:{path}" + (f"?{urlencode(settings)}" if settings else "")
    try:
        return chdb.session.Session(conn)
    except Exception as e:  # chdb raises RuntimeError with the engine's message
        if _LOCKED in str(e):
            raise FolderLocked(f"chDB folder {path} is in use by another process") from None
        raise


class ChdbBackend(Backend):
    def __init__(self, path: Path, database: str, *, writable: bool, limits: dict | None = None):
        self.path, self.database = Path(path), database
        self.describe = f"chDB {self.path}"
        # One lock per session: a long report query must not hold up the sink's inserts.
        self._wlock, self._rlock = threading.Lock(), threading.Lock()
        self._rw = None
        if writable:
            self.path.mkdir(parents=True, exist_ok=True)
            self._rw = _session(self.path)
        elif not (self.path / "metadata").is_dir():
            raise QueryError(f"no analytics data at {self.path}: run `rftbus analytics sink` (or `rftbus run`) first")
        try:
            self._ro = _session(self.path, readonly=1, **READ_SETTINGS, **(limits or read_limits()))
        except BaseException:
            if self._rw is not None:
                self._rw.close()
            raise
        self._use_database()

    def _use_database(self) -> None:
        if self._rw is not None:
            self.ensure_schema()
        try:
            self._ro.query(f"USE {self.database}")
        except Exception as e:
            raise QueryError(f"{self.describe}: database {self.database} is missing ({short_error(e)})") from None

    def execute(self, sql: str) -> None:
        if self._rw is None:
            raise QueryError(f"{self.describe} was opened read-only")
        try:
            with self._wlock:
                self._rw.query(sql)
        except Exception as e:  # chDB raises ChdbError / RuntimeError; the caller decides whether to retry
            raise WriteError(f"{self.describe}: {short_error(e)}") from e

    def insert_rows(self, table: str, columns: list[str], body: bytes) -> None:
        cols = ", ".join(f"`{c}`" for c in columns)
        self.execute(f"INSERT INTO {self.database}.{table} ({cols}) FORMAT JSONEachRow\n" + body.decode())

    def query(self, sql: str, params: dict[str, str] | None = None) -> Result:
        params = check_params(sql, params)
        with self._rlock:
            try:
                out = self._ro.query(sql.strip().rstrip(";"), "JSONCompact", params=params or None)
            except Exception as e:
                self._drain()
                raise QueryError(short_error(e)) from None
        return Result.from_json_compact(out.bytes())

    def _drain(self) -> None:
        """chDB 4.4.0 keeps what a failed query (a timeout, a result over its limit) had already formatted and
        returns it ahead of the session's next result, which then is not one JSON document (seen here; no
        upstream issue found). A throwaway query takes that output; tests/unit/test_sql_guard.py fails without it."""
        try:
            self._ro.query("SELECT 1", "JSONCompact")
        except Exception:  # noqa: BLE001 - the session itself is broken: the next real query says how
            pass

    def close(self) -> None:
        for s in (self._ro, self._rw):
            if s is not None:
                s.close()
        self._ro = self._rw = None
