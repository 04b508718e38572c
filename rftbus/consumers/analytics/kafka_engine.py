"""The server-side alternative to the sink: ClickHouse consumes the topics itself.

Kafka engine tables (`kafka_format = 'AvroConfluent'`, so the Schema Registry docker-compose runs) and
materialized views that write into the *same* tables the sink fills (schema.py), with the same
derived columns and the same dedup key. Kafka-table columns are derived from the `.avsc` files, so
they follow schema evolution. `kafka_handle_error_mode = 'stream'` turns a message that does not
decode into an `undecodable` row instead of stopping the consumer.

`source_engine` lets a test replace the Kafka engine by `Null` (chDB cannot run Kafka engine tables)
and push Avro data through the very same views.
"""

from __future__ import annotations

import json

from rftbus.ground.config import Config
from rftbus.ground.kafka import registry
from rftbus.ground.schemas import SCHEMA_DIR

RECORD_TABLES = {"Task": "kafka_tasks", "ExperienceGroup": "kafka_experiences", "Rejection": "kafka_rejections",
                 "Feedback": "kafka_feedback", "WeightVersion": "kafka_weights", "TrainerMetric": "kafka_metrics",
                 "GateDecision": "kafka_decisions"}
# Kafka table -> (record schema, topic keys it reads): one table per record type, over every topic that holds it.
SOURCES: dict[str, tuple[str, list[str]]] = {
    table: (record, [t.key for t in registry.avro_topics() if t.value is not None and t.value.__name__ == record])
    for record, table in RECORD_TABLES.items()}
TARGET = {"kafka_tasks": "tasks", "kafka_experiences": "experiences", "kafka_rejections": "rejections",
          "kafka_feedback": "feedback", "kafka_weights": "weights", "kafka_metrics": "metrics",
          "kafka_decisions": "decisions"}
# The Kafka engine's virtual columns the views read (types as the engine declares them).
VIRTUAL = [("_topic", "LowCardinality(String)"), ("_key", "String"), ("_partition", "UInt64"), ("_offset", "UInt64"),
           ("_timestamp_ms", "Nullable(DateTime64(3))"), ("_raw_message", "String"), ("_error", "String")]

_PRIMITIVE = {"string": "String", "int": "Int32", "long": "Int64", "float": "Float32", "double": "Float64",
              "boolean": "Bool", "bytes": "String"}

def _s(field: str) -> str:
    """A field of the sample a group's row is about (the view ARRAY JOINs the samples as `s`)."""
    return f"tupleElement(s, '{field}')"


# A prompt's images by metadata (the bytes are not copied into ClickHouse), as the sink writes them.
_IMAGES = {"image_sha256": "arrayMap(i -> tupleElement(i, 'sha256'), src.images)",
           "image_bytes": "arrayMap(i -> tupleElement(i, 'size'), src.images)",
           "image_uris": "arrayMap(i -> ifNull(tupleElement(i, 'uri'), ''), src.images)"}

# Target columns computed from the record (anything not listed is the record field of the same name).
# A group fans out into one experiences row per sample (per survivor on a curated lane), as the sink does.
DERIVED: dict[str, dict[str, str]] = {
    "experiences": {
        "experience_id": _s("experience_id"), "sample_index": "toInt32(idx - 1)", "group_size": "length(src.samples)",
        "prompt_tokens": "length(src.prompt_ids)", "response_tokens": f"length({_s('response_ids')})",
        "trainable_tokens": f"arrayCount(x -> x, {_s('loss_mask')})",
        "mean_logprob": f"if(empty({_s('logprobs')}), NULL, arrayAvg({_s('logprobs')}))",
        "reward": _s("reward"), "reward_components": _s("reward_components"), "advantage": _s("advantage"),
        "model_version": _s("model_version"), "response_text": _s("response_text"),
        "finish_reason": _s("finish_reason"), "generation_ms": _s("generation_ms"), "reward_ms": _s("reward_ms"),
        "metadata": f"mapUpdate(src.metadata, {_s('metadata')})", "source": "toString(src.source)", **_IMAGES},
    "tasks": dict(_IMAGES),
    "rejections": {"source_partition": "src.partition", "source_offset": "src.offset",
                   # what it covers: v1 rejections name at most one experience (Rejection.covers)
                   "experience_ids": "if(empty(src.experience_ids) AND isNotNull(src.experience_id), "
                                     "[assumeNotNull(src.experience_id)], src.experience_ids)",
                   "original_bytes": "if(isNull(src.original), NULL, length(assumeNotNull(src.original)))"},
    "feedback": {"kind": "toString(src.kind)"},
    "weights": {"weight_id": "concat(src.model, ':', toString(src.version))"},
}


def avro_type(t) -> str:
    """ClickHouse type that AvroConfluent reads an Avro type into."""
    if isinstance(t, str):
        return _PRIMITIVE[t]
    if isinstance(t, list):  # ["null", X]
        inner = [x for x in t if x != "null"]
        if len(inner) != 1 or len(t) != 2:
            return "String"
        one = avro_type(inner[0])
        # ClickHouse has no Nullable(Array/Map/Tuple): a null reads as the empty value (input_format_null_as_default)
        return one if one.startswith(("Array(", "Map(", "Tuple(")) else f"Nullable({one})"
    kind = t["type"]
    if kind == "long" and t.get("logicalType") == "timestamp-millis":
        return "DateTime64(3, 'UTC')"
    if kind == "record":  # AvroConfluent reads a nested record into a named tuple
        return "Tuple(" + ", ".join(f"{f['name']} {avro_type(f['type'])}" for f in t["fields"]) + ")"
    if kind == "array":
        return f"Array({avro_type(t['items'])})"
    if kind == "map":
        return f"Map(String, {avro_type(t['values'])})"
    if kind == "enum":
        return "String"
    return avro_type(kind)


def avro_columns(record: str) -> list[tuple[str, str]]:
    schema = json.loads((SCHEMA_DIR / f"{record}.avsc").read_text())
    return [(f["name"], avro_type(f["type"])) for f in schema["fields"]]


def _position(cfg: Config, keys: list[str]) -> list[str]:
    names = [getattr(cfg.topics, k).name for k in keys]
    topic = f"transform(src._topic, {names!r}, {keys!r}, '')".replace('"', "'")
    return [f"{topic} AS topic", "src._topic AS kafka_topic", "toInt32(src._partition) AS `partition`",
            "toInt64(src._offset) AS `offset`", "coalesce(src._timestamp_ms, now64(3)) AS kafka_ts"]


def source_table(cfg: Config, db: str, name: str, *, brokers: str, registry_url: str, source_engine: str | None = None) -> str:
    record, keys = SOURCES[name]
    cols = avro_columns(record)
    if source_engine is not None:  # a stand-in: the virtual columns become real ones
        cols = cols + VIRTUAL
    body = ",\n  ".join(f"`{n}` {t}" for n, t in cols)
    if source_engine is not None:
        return f"CREATE TABLE IF NOT EXISTS {db}.{name} (\n  {body}\n) ENGINE = {source_engine}"
    topics = ",".join(getattr(cfg.topics, k).name for k in keys)
    return (f"CREATE TABLE IF NOT EXISTS {db}.{name} (\n  {body}\n) ENGINE = Kafka\nSETTINGS\n"
            f"  kafka_broker_list = '{brokers}',\n  kafka_topic_list = '{topics}',\n"
            f"  kafka_group_name = '{cfg.analytics.group_id}-server',\n  kafka_format = 'AvroConfluent',\n"
            f"  format_avro_schema_registry_url = '{registry_url}',\n  kafka_handle_error_mode = 'stream',\n"
            "  kafka_isolation_level = 'read_committed',\n  kafka_num_consumers = 1")


def views(cfg: Config, db: str, name: str) -> list[str]:
    from .schema import TABLES

    record, keys = SOURCES[name]
    target = TABLES[TARGET[name]]
    own = {n for n, _ in avro_columns(record)}
    derived = DERIVED.get(target.name, {})
    pos = _position(cfg, keys)
    cols = [f"{derived[n]} AS `{n}`" if n in derived else f"src.`{n}` AS `{n}`"
            for n, _ in target.columns if n in derived or n in own]
    ok = "WHERE length(src._error) = 0"
    sep = ",\n  "
    source = f"{db}.{name} AS src"
    where = ok
    if target.name == "experiences":  # one row per sample; on a curated lane only the survivors
        source += "\nARRAY JOIN src.samples AS s, arrayEnumerate(src.samples) AS idx"
        lanes = [getattr(cfg.topics, k).name for k in registry.keys(curated=True)]
        where += f" AND (src._topic NOT IN {tuple(lanes)!r} OR has(src.survivors, toInt32(idx - 1)))".replace('"', "'")
    out = [f"CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.{name}_mv TO {db}.{target.name} AS\n"
           f"SELECT\n  {sep.join(pos + cols)}\nFROM {source}\n{where}",
           f"CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.{name}_undecodable_mv TO {db}.undecodable AS\n"
           f"SELECT\n  {sep.join(pos)},\n  'avro_error' AS reason, src._error AS detail,\n"
           "  toUInt32(length(src._raw_message)) AS size, src._key AS key\n"
           f"FROM {db}.{name} AS src\nWHERE length(src._error) > 0"]
    if name == "kafka_metrics":  # the trainer's lineage records fan out into `trained`
        out.append(f"CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.kafka_trained_mv TO {db}.trained AS\n"
                   f"SELECT\n  {sep.join(pos)},\n  src.metric_id AS metric_id, e AS experience_id, src.model AS model,\n"
                   "  src.step AS step, src.version AS version, toInt64(s) AS staleness, src.created_at AS trained_at\n"
                   f"FROM {db}.{name} AS src ARRAY JOIN mapKeys(src.`values`) AS e, mapValues(src.`values`) AS s\n"
                   f"{ok} AND src.kind = 'trained'")
    return out


def kafka_engine_ddl(cfg: Config, *, brokers: str, registry_url: str, source_engine: str | None = None) -> list[str]:
    """Kafka engine tables + views, after schema.ddl_statements (the target tables)."""
    db = cfg.analytics.database
    out = []
    for name in SOURCES:
        out.append(source_table(cfg, db, name, brokers=brokers, registry_url=registry_url, source_engine=source_engine))
        out += views(cfg, db, name)
    return out
