"""Distinct records per topic, after dedup: what reconciliation and chaos tests compare with Kafka."""

from __future__ import annotations

from rftbus.ground.config import Config

from .backends import Backend
from .schema import TOPIC_TABLES


def counts_sql(database: str) -> str:
    """One row per topic key: distinct record ids, messages (rows after FINAL), undecodable messages."""
    parts = [f"SELECT topic, {id_col} AS id, 0 AS bad FROM {database}.{table} FINAL WHERE topic = '{key}'"
             for key, (table, id_col) in TOPIC_TABLES.items()]
    parts.append(f"SELECT topic, '' AS id, 1 AS bad FROM {database}.undecodable FINAL")
    union = "\n  UNION ALL ".join(parts)
    return (f"SELECT topic, uniqExactIf(id, bad = 0) AS records, countIf(bad = 0) AS messages, "
            f"countIf(bad = 1) AS undecodable\nFROM (\n  {union}\n)\nGROUP BY topic ORDER BY topic")


def table_counts(backend: Backend) -> dict[str, dict[str, int]]:
    """{topic key: {records, messages, undecodable}} for every TopicsConfig key (zeros where none)."""
    out = {key: {"records": 0, "messages": 0, "undecodable": 0} for key in TOPIC_TABLES}
    for row in backend.query(counts_sql(backend.database)).dicts():
        if row["topic"] in out:
            out[row["topic"]] = {k: int(row[k]) for k in ("records", "messages", "undecodable")}
    return out


def counts(cfg: Config) -> dict[str, int]:
    """Distinct records per topic key (exactly TopicsConfig's field names), after dedup."""
    from .reader import open_reader

    with open_reader(cfg) as b:
        return {k: v["records"] for k, v in table_counts(b).items()}


def ids(cfg: Config, topic_key: str) -> set[str]:
    """The distinct record ids on one topic (experience_id for the experience topics, task_id, ...)."""
    from .backends import QueryError
    from .reader import open_reader

    if topic_key not in TOPIC_TABLES:
        raise QueryError(f"unknown topic key {topic_key!r}; one of {', '.join(TOPIC_TABLES)}")
    table, id_col = TOPIC_TABLES[topic_key]
    with open_reader(cfg) as b:
        res = b.query(f"SELECT DISTINCT {id_col} FROM {b.database}.{table} FINAL WHERE topic = {{t:String}}",
                      {"t": topic_key})
    return {r[0] for r in res.rows}
