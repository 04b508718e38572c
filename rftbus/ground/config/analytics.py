"""The `analytics:` config section (pydantic only: no heavy imports here)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class AnalyticsConfig(BaseModel):
    """Analytics: every experience in ClickHouse (embedded chDB or a server)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    backend: Literal["chdb", "clickhouse"] = Field(
        "chdb", description="chdb: embedded, a folder under state_dir; clickhouse: a server via clickhouse-connect")
    path: str | None = Field(None, description="chDB folder; default <state_dir>/analytics/chdb")
    url: str = Field("http://localhost:8123", description="ClickHouse server HTTP(S) URL (backend: clickhouse); "
                     "a chdb:///folder DSN runs clickhouse-connect's embedded chDB client instead of a server")
    database: str = Field("rftbus", description="database holding the analytics tables (created if missing)")
    user: str = Field("default", description="ClickHouse user (backend: clickhouse)")
    password: SecretStr = Field(SecretStr(""), description="never logged")
    group_id: str = Field("rftbus-analytics", description="the sink's Kafka consumer group")
    batch_rows: int = Field(5000, ge=1, description="flush the buffered rows (all tables) after this many ...")
    batch_seconds: float = Field(1.0, gt=0, description="... or once the oldest buffered row is this old")
    insert_retries: int = Field(5, ge=0, description="retries (with backoff) of a failed batch insert before "
                                "the sink stops; offsets are committed only after an insert succeeded")
    drain_timeout_s: float = Field(15.0, ge=0, description="on stop, keep reading until every assigned partition "
                                   "is at its end, at most this long, so a clean stop leaves nothing behind")
    lock_wait_s: float = Field(30.0, ge=0, description="how long a process waits for the chDB folder when "
                               "another process holds it (chDB allows one process per folder)")
    connect_timeout_s: float = Field(10.0, gt=0, description="ClickHouse server connect timeout")
    query_timeout_s: float = Field(30.0, gt=0, description="every read (reports, studio, `analytics query`) is "
                                   "stopped by ClickHouse after this long (max_execution_time): a query that would "
                                   "run forever holds no lock past it")
    query_max_rows: int = Field(10_000_000, ge=1, description="a read whose result has more rows fails (max_result_rows)")
    query_max_bytes: int = Field(32 * 2**20, ge=1, description="... or more bytes (max_result_bytes; the sandboxed "
                                 "reader's answer is cut there too)")
    query_max_chars: int = Field(64 * 1024, ge=1, description="a user's SQL longer than this is refused before it "
                                 "is parsed")
    query_max_memory_bytes: int = Field(2 * 2**30, ge=1, description="memory one read may use (max_memory_usage)")
    max_readers: int = Field(4, ge=1, description="sandboxed readers (about 250 MB each) one process runs at once; "
                             "a read past them is refused at once (the studio's SQL answers 429)")
    pass_threshold: float = Field(1.0, description="a sample passes when its reward is at least this "
                                  "(report: per-task pass rate, feedback agreement)")

    @field_validator("database")
    @classmethod
    def _identifier(cls, v: str) -> str:
        # Interpolated into SQL as an identifier (databases cannot be query parameters).
        if not _IDENT.match(v):
            raise ValueError("must be a plain identifier (letters, digits, underscore)")
        return v
