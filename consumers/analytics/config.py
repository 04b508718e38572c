"""The `analytics:` config section (pydantic only: no heavy imports here)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class AnalyticsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Literal["chdb", "clickhouse"] = Field(
        "chdb", description="chdb: embedded, a folder under state_dir; clickhouse: a server via clickhouse-connect")
    path: str | None = Field(None, description="chDB folder; default <state_dir>/analytics/chdb")
    url: str = Field("http://localhost:8123", description="ClickHouse server HTTP URL (backend: clickhouse)")
    database: str = "rftbus"
    user: str = "default"
    password: SecretStr = Field(SecretStr(""), description="never logged")
    group_id: str = Field("rftbus-analytics", description="the sink's Kafka consumer group")
    batch_rows: int = Field(5000, ge=1, description="flush a table after this many rows ...")
    batch_seconds: float = Field(1.0, gt=0, description="... or after this long, whichever first")
