"""Backends behind one interface (base.Backend): chDB embedded, a ClickHouse server, a running sink."""

from __future__ import annotations

from pathlib import Path

from rftbus.ground.config import Config

from .base import AnalyticsError, Backend, FolderLocked, QueryError, Result, read_limits


def chdb_path(cfg: Config) -> Path:
    a = cfg.analytics
    return Path(a.path).expanduser().absolute() if a.path else cfg.state_dir / "analytics" / "chdb"


def is_embedded(cfg: Config) -> bool:
    """True when the data lives in a chDB folder that only one process can open at a time."""
    a = cfg.analytics
    return a.backend == "chdb" or a.url.startswith("chdb:")


def where(cfg: Config) -> str:
    """Where the data is, for status files and messages (never with a password)."""
    a = cfg.analytics
    return f"chdb:{chdb_path(cfg)}" if a.backend == "chdb" else a.url.split("@")[-1]


def open_backend(cfg: Config, *, writable: bool) -> Backend:
    """The configured backend, opened directly (a writer creates the database and tables)."""
    a = cfg.analytics
    if a.backend == "chdb":
        from .chdb import ChdbBackend

        return ChdbBackend(chdb_path(cfg), a.database, writable=writable, limits=read_limits(a))
    from .clickhouse import ClickHouseBackend

    return ClickHouseBackend.connect(a.url, a.database, a.user, a.password.get_secret_value(),
                                     a.connect_timeout_s, writable=writable, limits=read_limits(a))


__all__ = ["AnalyticsError", "Backend", "FolderLocked", "QueryError", "Result", "chdb_path", "is_embedded",
           "open_backend", "where"]
