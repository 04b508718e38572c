"""Experience analytics: every rftbus topic into ClickHouse (chDB embedded, or a server).

Public API (light to import: heavy modules load on first call):
  counts(cfg) -> {topic key: distinct records}   ids(cfg, topic_key) -> set of record ids
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rftbus.ground.config import Config


def counts(cfg: Config) -> dict[str, int]:
    """Distinct records per TopicsConfig key in ClickHouse, after dedup (works while a sink runs)."""
    from .tally import counts as _counts

    return _counts(cfg)


def ids(cfg: Config, topic_key: str) -> set[str]:
    """The distinct record ids stored for one topic key (e.g. experience ids of `curated`)."""
    from .tally import ids as _ids

    return _ids(cfg, topic_key)


__all__ = ["counts", "ids"]
