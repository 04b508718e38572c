"""The analytics tables: one per record type, DDL generated from one column list per table.

Dedup key: every table is a ReplacingMergeTree ordered by (topic, partition, offset, record id); an
experience group fans out into one `experiences` row per experience, so there the id is experience_id. A
Kafka message re-delivered after a sink restart has the same position and id, so it collapses into
one row (at merge time, and at once under FINAL); a record that really was written twice upstream
sits at two offsets and stays visible as two rows, which is what lets analytics *find* duplicates.
Counting distinct ids (`uniqExact(id)`) gives the number of distinct records.

Times are DateTime64(3, 'UTC'): the records' int milliseconds and Kafka's message timestamps.
The same DDL runs on chDB and on a ClickHouse server (one dialect).
"""

from __future__ import annotations

from dataclasses import dataclass

TS = "DateTime64(3, 'UTC')"
# Columns every table starts with: where the message was (the dedup key's first part) and when.
POSITION = [
    ("topic", "LowCardinality(String)"),  # the TopicsConfig key (raw, curated, ...), stable across deployments
    ("kafka_topic", "LowCardinality(String)"),  # the topic's name
    ("partition", "Int32"),
    ("offset", "Int64"),
    ("kafka_ts", TS),
]
_INGESTED = ("ingested_at", f"{TS} DEFAULT now64(3)")


@dataclass(frozen=True)
class Table:
    name: str
    id_column: str | None  # None: the Kafka position alone identifies a row
    columns: list[tuple[str, str]]  # after POSITION

    @property
    def all_columns(self) -> list[tuple[str, str]]:
        return [*POSITION, *self.columns, _INGESTED]

    @property
    def insert_columns(self) -> list[str]:
        """The columns the sink writes (ingested_at is the server's default)."""
        return [n for n, _ in [*POSITION, *self.columns]]

    def ddl(self, database: str) -> str:
        cols = ",\n  ".join(f"`{n}` {t}" for n, t in self.all_columns)
        key = ", ".join(["topic", "partition", "offset"] + ([self.id_column] if self.id_column else []))
        # fsync: "durably written" before the offsets are committed means on disk, not in the page cache.
        return (f"CREATE TABLE IF NOT EXISTS {database}.{self.name} (\n  {cols}\n)\n"
                f"ENGINE = ReplacingMergeTree\nORDER BY ({key})\n"
                "SETTINGS fsync_after_insert = 1, fsync_part_directory = 1")


_META = ("metadata", "Map(String, String)")
_CREATED = ("created_at", TS)
# the images a prompt shows, by metadata (the bytes stay in Kafka and the store): sha256, size, inline or by uri
_IMAGES = [("image_sha256", "Array(String)"), ("image_bytes", "Array(Int64)"), ("image_uris", "Array(String)")]

TABLES: dict[str, Table] = {t.name: t for t in [
    Table("tasks", "task_id", [
        ("task_id", "String"), ("taskset", "LowCardinality(String)"), ("split", "LowCardinality(String)"),
        ("prompt", "String"), ("answer", "Nullable(String)"), ("workflow", "Nullable(String)"),
        ("n_samples", "Nullable(Int32)"), ("priority", "Float64"), _CREATED, _META,
        # lineage of a synthesized task (rftbus/producers/synthesis/): null parent for a taskset's own
        ("parent_task_id", "Nullable(String)"), ("synthesizer", "Nullable(String)"), ("generation", "Int32"),
        ("parent_outcome", "Nullable(String)"), *_IMAGES]),
    Table("experiences", "experience_id", [
        ("experience_id", "String"), ("group_id", "String"), ("task_id", "String"), ("sample_index", "Int32"),
        ("group_size", "Int32"), ("prompt_tokens", "UInt32"), ("response_tokens", "UInt32"),
        ("trainable_tokens", "UInt32"), ("mean_logprob", "Nullable(Float64)"),
        ("reward", "Nullable(Float64)"), ("reward_components", "Map(String, Float64)"),
        ("advantage", "Nullable(Float64)"), ("priority", "Float64"), ("model_version", "Int64"),
        ("source", "LowCardinality(String)"), ("explorer_id", "String"), ("prompt_text", "Nullable(String)"),
        ("response_text", "Nullable(String)"), ("finish_reason", "Nullable(String)"), ("generation_ms", "Float64"),
        ("reward_ms", "Float64"), _CREATED, _META, *_IMAGES]),
    Table("rejections", "rejection_id", [
        ("rejection_id", "String"), ("experience_id", "Nullable(String)"), ("group_id", "Nullable(String)"),
        ("experience_ids", "Array(String)"), ("reason", "LowCardinality(String)"),
        ("detail", "String"), ("stage", "LowCardinality(String)"), ("source_topic", "Nullable(String)"),
        ("source_partition", "Nullable(Int32)"), ("source_offset", "Nullable(Int64)"),
        ("original_bytes", "Nullable(UInt32)"), _CREATED]),
    Table("feedback", "feedback_id", [
        ("feedback_id", "String"), ("experience_id", "String"), ("kind", "LowCardinality(String)"),
        ("reward", "Nullable(Float64)"), ("rating", "Nullable(Float64)"), ("thumbs_up", "Nullable(Bool)"),
        ("preferred_id", "Nullable(String)"), ("rejected_id", "Nullable(String)"), ("correction", "Nullable(String)"),
        ("annotator", "Nullable(String)"), _CREATED, _META]),
    # WeightVersion has no id field: its identity is (model, version), spelled "model:version".
    Table("weights", "weight_id", [
        ("weight_id", "String"), ("model", "LowCardinality(String)"), ("version", "Int64"), ("step", "Int64"),
        ("uri", "String"), ("sha256", "String"), ("bytes", "Int64"), ("format", "LowCardinality(String)"),
        _CREATED, _META]),
    Table("metrics", "metric_id", [
        ("metric_id", "String"), ("model", "LowCardinality(String)"), ("kind", "LowCardinality(String)"),
        ("step", "Int64"), ("version", "Int64"), ("values", "Map(String, Float64)"), _CREATED]),
    # The promotion gate's decisions: which version served whom, and why (the studio's run dashboard shows them).
    Table("decisions", "decision_id", [
        ("decision_id", "String"), ("model", "LowCardinality(String)"), ("decision", "LowCardinality(String)"),
        ("version", "Int64"), ("serving", "Int64"), ("candidate", "Nullable(Int64)"), ("canary_share", "Float64"),
        ("gate", "String"), ("reason", "String"), ("test", "String"), ("evidence", "Map(String, Float64)"),
        _CREATED, ("lineage", "LowCardinality(String)"), ("serving_lineage", "LowCardinality(String)")]),
    # One row per experience of a trainer `trained` metric (a durable checkpoint's lineage): what was
    # trained, at which step/version, how stale. Derived from the metrics topic, so topic = "metrics".
    Table("trained", "experience_id", [
        ("metric_id", "String"), ("experience_id", "String"), ("model", "LowCardinality(String)"),
        ("step", "Int64"), ("version", "Int64"), ("staleness", "Int64"), ("trained_at", TS)]),
    # Messages that are not the record their topic carries: why, and where they are.
    Table("undecodable", None, [
        ("reason", "LowCardinality(String)"), ("detail", "String"), ("size", "UInt32"), ("key", "Nullable(String)")]),
]}

# TopicsConfig key -> (table, id column). Keys are exactly TopicsConfig's fields.
TOPIC_TABLES: dict[str, tuple[str, str]] = {
    "tasks": ("tasks", "task_id"),
    "raw": ("experiences", "experience_id"),
    "curated": ("experiences", "experience_id"),
    "curated_priority": ("experiences", "experience_id"),
    "expert": ("experiences", "experience_id"),
    "rejected": ("rejections", "rejection_id"),
    "feedback": ("feedback", "feedback_id"),
    "weights": ("weights", "weight_id"),
    "metrics": ("metrics", "metric_id"),
    "decisions": ("decisions", "decision_id"),
}


def ddl_statements(database: str) -> list[str]:
    return [f"CREATE DATABASE IF NOT EXISTS {database}"] + [t.ddl(database) for t in TABLES.values()]


def describe(database: str) -> list[dict]:
    """What SHOW TABLES and DESCRIBE would say, from the definitions (the query path runs neither)."""
    return [{"table": f"{database}.{t.name}", "columns": [{"name": n, "type": ty.split(" DEFAULT")[0]}
                                                        for n, ty in t.all_columns]} for t in TABLES.values()]
