"""The one interface both ClickHouse backends (embedded chDB, a server via clickhouse-connect) implement.

Both speak the same dialect, so everything above this line (DDL, inserts as JSONEachRow, read-only
parameterized queries answered as JSONCompact) is shared text; a backend only moves it.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from rftbus.ground.config.analytics import AnalyticsConfig
from rftbus.ground.errors import RftbusError

from ..schema import TABLES, ddl_statements

# Settings every read asks for, so both backends answer the same JSON whatever their version's defaults.
READ_SETTINGS = {"output_format_json_quote_64bit_integers": 0, "output_format_json_quote_decimals": 0}


def read_limits(a: AnalyticsConfig | None = None) -> dict[str, Any]:
    """ClickHouse settings that bound every read on the query path (time, result, memory), fixed on the
    connection: a user's statement cannot loosen them (readonly, and statement.py refuses SETTINGS)."""
    a = a or AnalyticsConfig()
    return {"max_execution_time": a.query_timeout_s, "max_result_rows": a.query_max_rows,
            "max_result_bytes": a.query_max_bytes, "result_overflow_mode": "throw",
            "max_memory_usage": a.query_max_memory_bytes}


_PLACEHOLDER = re.compile(r"\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*:")


class AnalyticsError(RftbusError):
    """An analytics problem with a message for the user."""


class QueryError(AnalyticsError):
    """ClickHouse refused a query (bad SQL, unknown table, a write on the read-only path, ...)."""


class WriteError(AnalyticsError):
    """ClickHouse refused or failed a write (DDL or insert); the sink retries, then stops."""


class FolderLocked(AnalyticsError):
    """Another process holds the chDB folder (chDB allows one process per folder)."""


@dataclass
class Result:
    columns: list[str]
    types: list[str]
    rows: list[list[Any]] = field(default_factory=list)

    def dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r)) for r in self.rows]

    def scalar(self) -> Any:
        return self.rows[0][0] if self.rows and self.rows[0] else None

    @classmethod
    def from_json_compact(cls, text: str | bytes) -> Result:
        doc = json.loads(text) if text else {"meta": [], "data": []}
        meta = doc.get("meta", [])
        return cls([m["name"] for m in meta], [m["type"] for m in meta], doc.get("data", []))


def encode_rows(rows: list[dict[str, Any]], columns: list[str]) -> bytes:
    """JSONEachRow body for `columns` (missing keys are sent as null -> the column's default)."""
    return "\n".join(json.dumps({c: r.get(c) for c in columns}, ensure_ascii=False, separators=(",", ":"))
                     for r in rows).encode()


def check_params(sql: str, params: dict[str, str] | None) -> dict[str, str]:
    """Every --param must be used as {name:Type}: a typo'd name would otherwise be silently ignored."""
    params = dict(params or {})
    used = set(_PLACEHOLDER.findall(sql))
    unused = sorted(set(params) - used)
    if unused:
        raise QueryError(f"parameter(s) {', '.join(unused)} not used in the query; write them as "
                         "{name:Type}, e.g. WHERE model_version = {v:Int64}")
    missing = sorted(used - set(params))
    if missing:
        raise QueryError(f"the query uses {', '.join('{' + m + ':...}' for m in missing)} but no "
                         f"--param {missing[0]}=VALUE was given")
    return params


def short_error(e: BaseException) -> str:
    """ClickHouse's message without the stack trace / 'Expected one of' essay."""
    text = str(e).strip()
    text = text.split("Stack trace", 1)[0]
    text = re.split(r"\.?\s*Expected one of", text, maxsplit=1)[0]
    text = " ".join(text.split())
    return text[:400]


class Backend(ABC):
    """A ClickHouse to write the sink's batches to and to read reports from."""

    database: str
    describe: str  # where the data is, for messages and the status file

    @abstractmethod
    def execute(self, sql: str) -> None:
        """Run one statement that returns nothing (DDL)."""

    @abstractmethod
    def insert_rows(self, table: str, columns: list[str], body: bytes) -> None:
        """Insert a JSONEachRow body into database.table; returns once the server has it."""

    @abstractmethod
    def query(self, sql: str, params: dict[str, str] | None = None) -> Result:
        """A read-only query (writes are refused by ClickHouse itself) with {name:Type} parameters."""

    @abstractmethod
    def close(self) -> None: ...

    # -- shared ------------------------------------------------------------------------------------
    def ensure_schema(self) -> None:
        """Create what is missing; a table an older rftbus made gains the columns added since (each added column
        has a default, as every field added to a schema does), so an existing store keeps its rows."""
        for stmt in ddl_statements(self.database):
            self.execute(stmt)
        for t in TABLES.values():
            for n, ty in t.all_columns:
                self.execute(f"ALTER TABLE {self.database}.{t.name} ADD COLUMN IF NOT EXISTS `{n}` {ty}")

    def insert(self, table: str, rows: list[dict[str, Any]]) -> None:
        if rows:
            cols = TABLES[table].insert_columns
            self.insert_rows(table, cols, encode_rows(rows, cols))

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
