"""Analytics: message -> rows, DDL + dedup + read-only queries on both backends (chDB, and the
clickhouse-connect backend on clickhouse-connect's embedded chDB client, the same dialect a server
speaks), and the real sink process on the session broker: exact counts across a SIGTERM drain, a
SIGKILL and a restart in the same group, and a full re-delivery; queries answered while it holds the
chDB folder.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from rftbus.consumers.analytics.backends import QueryError, open_backend
from rftbus.consumers.analytics.backends.chdb import ChdbBackend
from rftbus.consumers.analytics.backends.clickhouse import ClickHouseBackend
from rftbus.consumers.analytics.batch import Batch
from rftbus.consumers.analytics.kafka_engine import SOURCES, avro_columns, kafka_engine_ddl
from rftbus.consumers.analytics.query import as_csv, as_json, parse_params, run_query
from rftbus.consumers.analytics.reader import open_reader
from rftbus.consumers.analytics.tally import table_counts
from rftbus.consumers.analytics.rows import Position, to_rows
from rftbus.consumers.analytics.schema import TABLES, ddl_statements
from rftbus.ground.kafka.clients import make_admin, make_consumer, make_producer
from rftbus.ground.kafka.topics import create_topics
from rftbus.ground.kafka import registry
from rftbus.ground.schemas import (
    SCHEMA_DIR, DecodeError, Experience, ExperienceGroup, Feedback, FeedbackKind, GateDecision, Rejection, Source, Task,
    TrainerMetric,
    WeightVersion, make_codec,
)
from tests.conftest import make_config, rftbus_cli

CODEC = make_codec(None)
DECODE = CODEC.deserializer(None)
TOPIC_KEYS = [t.key for t in registry.avro_topics()]  # what the sink stores (the spans topic is OTLP, not Avro)
RECORD = {"tasks": Task, "raw": ExperienceGroup, "curated": ExperienceGroup, "curated_priority": ExperienceGroup,
          "expert": ExperienceGroup, "rejected": Rejection, "feedback": Feedback, "weights": WeightVersion,
          "metrics": TrainerMetric, "decisions": GateDecision}
CURATED = ("curated", "curated_priority")


# ---- helpers (also used by test_analytics_run.py) -------------------------------------------------
def record_ids(rec, key: str) -> list[str]:
    """The ids the sink stores for one record: a group's experiences (a curated lane's survivors)."""
    if isinstance(rec, WeightVersion):
        return [f"{rec.model}:{rec.version}"]
    if isinstance(rec, ExperienceGroup):
        return [s.experience_id for s in rec.kept()] if key in CURATED else rec.experience_ids()
    return [getattr(rec, {Task: "task_id", Rejection: "rejection_id", Feedback: "feedback_id",
                          TrainerMetric: "metric_id", GateDecision: "decision_id"}[type(rec)])]


def read_all_topics(cfg, timeout_s: float = 60.0):
    """Every message of every rftbus topic up to each partition's current end (one consumer, no group)."""
    from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

    consumer = make_consumer(cfg, "rftbus-test-truth", **{"enable.partition.eof": True})
    try:
        md = consumer.list_topics(timeout=10).topics
        tps = [TopicPartition(getattr(cfg.topics, k).name, p, OFFSET_BEGINNING) for k in TOPIC_KEYS
               for p in sorted(md[getattr(cfg.topics, k).name].partitions)]
        consumer.assign(tps)
        pending, deadline = {(tp.topic, tp.partition) for tp in tps}, time.monotonic() + timeout_s
        while pending:
            assert time.monotonic() < deadline, f"topics not read to their end: {sorted(pending)[:3]}"
            for msg in consumer.consume(500, 0.5):
                if msg.error() is None:
                    yield msg
                elif msg.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard((msg.topic(), msg.partition()))
                else:
                    raise RuntimeError(msg.error().str())
    finally:
        consumer.close()


def kafka_truth(cfg) -> dict[str, dict]:
    """Per topic key, straight from Kafka: rows the topic's records make (a group: one per experience the
    sink keeps), their distinct ids, and the other messages (garbage, another record type, tombstones)."""
    key_of = {getattr(cfg.topics, k).name: k for k in TOPIC_KEYS}
    out = {k: {"records": 0, "messages": 0, "undecodable": 0, "ids": set()} for k in TOPIC_KEYS}
    for msg in read_all_topics(cfg):
        key = key_of[msg.topic()]
        try:
            rec = DECODE(msg.value(), None) if msg.value() is not None else None
        except DecodeError:
            rec = None
        if type(rec) is RECORD[key]:
            ids = record_ids(rec, key)
            out[key]["messages"] += len(ids)
            out[key]["ids"].update(ids)
        else:
            out[key]["undecodable"] += 1
    for v in out.values():
        v["records"] = len(v["ids"])
    return out


def assert_counts_match(stored: dict, truth: dict) -> None:
    for key in TOPIC_KEYS:
        want = {k: truth[key][k] for k in ("records", "messages", "undecodable")}
        assert stored[key] == want, f"{key}: ClickHouse {stored[key]} != Kafka {want}"


GROUP_FIELDS = {"group_id", "task_id", "prompt_ids", "explorer_id", "created_at", "prompt_text", "survivors",
                "priority", "source"}


def experience(n: int = 1, **kw) -> ExperienceGroup:
    """A group of n samples; keyword arguments go to the group or (the others) to every sample."""
    sample = dict(response_ids=[4, 5], logprobs=[-0.5, -1.5], loss_mask=[True, False], reward=1.0, model_version=2)
    group = dict(group_id="g1", task_id="t1", prompt_ids=[1, 2, 3], explorer_id="e0", created_at=1_700_000_000_123)
    for k, v in kw.items():
        (group if k in GROUP_FIELDS else sample)[k] = v
    if "metadata" in kw:
        group["metadata"] = kw["metadata"]
    return ExperienceGroup(**group, samples=[Experience(**sample) for _ in range(n)])


def all_records() -> list[tuple[str, object]]:
    return [("tasks", Task(taskset="addition", prompt="1+1=", answer="2")),
            ("raw", experience()),
            ("rejected", Rejection(experience_id="x", reason="stale", stage="trainer", original=b"abc")),
            ("feedback", Feedback(experience_id="x", kind=FeedbackKind.thumbs, thumbs_up=True)),
            ("weights", WeightVersion(model="tiny", version=3, step=3, uri="file:///w", sha256="0" * 64, bytes=9)),
            ("metrics", TrainerMetric(model="tiny", kind="trained", step=4, version=3, values={"a": 0.0, "b": 1.0}))]


# ---- pure units -----------------------------------------------------------------------------------
def test_rows_for_every_record_type_and_for_bad_messages():
    for i, (key, rec) in enumerate(all_records()):
        pos = Position(key, f"t.{key}", 1, 10 + i, 1_700_000_000_005, b"k")
        rows = to_rows(DECODE, pos, CODEC.encode(rec, None))
        table, row = rows[0]
        assert table != "undecodable", row
        assert row["topic"] == key and row["offset"] == 10 + i and row["kafka_ts"] == "1700000000.005"
    exp_row = to_rows(DECODE, Position("raw", "r", 0, 0, 0), CODEC.encode(experience(), None))[0][1]
    assert (exp_row["prompt_tokens"], exp_row["response_tokens"], exp_row["trainable_tokens"]) == (3, 2, 1)
    assert exp_row["mean_logprob"] == -1.0 and exp_row["created_at"] == "1700000000.123"
    trained = to_rows(DECODE, Position("metrics", "m", 0, 7, 0), CODEC.encode(all_records()[-1][1], None))
    assert sorted((t, r.get("experience_id"), r.get("staleness")) for t, r in trained[1:]) == [
        ("trained", "a", 0), ("trained", "b", 1)]
    pos = Position("feedback", "f", 0, 1, 0, None)
    assert to_rows(DECODE, pos, b"\x00\x01")[0][1]["reason"] == "truncated"
    assert to_rows(DECODE, pos, b"garbage!")[0][1]["reason"] == "unknown_magic"
    assert to_rows(DECODE, pos, None)[0][1]["reason"] == "tombstone"
    wrong = to_rows(DECODE, pos, CODEC.encode(experience(), None))
    assert wrong[0][0] == "undecodable" and wrong[0][1]["reason"] == "wrong_record_type"


def test_batch_is_due_by_rows_or_by_age():
    now = [0.0]
    b = Batch(max_rows=3, max_seconds=1.0, clock=lambda: now[0])
    assert not b.due() and b.wait_s() == 0.2
    b.add("t", 0, 5, [("tasks", {})])
    b.add("t", 0, 4, [("tasks", {})])  # offsets never move back
    assert not b.due() and b.offsets == {("t", 0): 6}
    now[0] = 0.9
    assert not b.due() and abs(b.wait_s() - 0.1) < 1e-9
    now[0] = 1.0
    assert b.due()
    b2 = Batch(max_rows=3, max_seconds=100.0, clock=lambda: 0.0)
    b2.add("t", 1, 0, [("metrics", {}), ("trained", {}), ("trained", {})])
    assert b2.due() and b2.counts() == {"metrics": 1, "trained": 2}


# ---- both backends on chDB ------------------------------------------------------------------------
def _open(kind: str, folder: Path, writable: bool = True):
    if kind == "chdb":
        return ChdbBackend(folder, "rfa", writable=writable)
    # clickhouse-connect's own client (statement building, {name:Type} binding, settings) on chDB.
    return ClickHouseBackend.connect(f"chdb://{folder}", "rfa", "default", "", 5, writable=writable)


@pytest.mark.parametrize("kind", ["chdb", "clickhouse-connect"])
def test_backend_dedups_redelivery_and_refuses_writes_on_the_query_path(kind, tmp_path):
    msgs = []
    for i, (key, rec) in enumerate(all_records() * 3):  # the same records again at other offsets = real duplicates
        msgs.append((key, i, CODEC.encode(rec, None)))
    msgs.append(("raw", 99, b"not avro"))
    b = _open(kind, tmp_path / "db")
    try:
        for _ in range(2):  # the second pass is a re-delivery of the same messages: must not count
            tables: dict[str, list] = {}
            for key, off, value in msgs:
                for table, row in to_rows(DECODE, Position(key, f"t.{key}", 0, off, 1_700_000_000_000), value):
                    tables.setdefault(table, []).append(row)
            for table, rows in tables.items():
                b.insert(table, rows)
        c = table_counts(b)
        assert c["raw"] == {"records": 1, "messages": 3, "undecodable": 1}
        assert c["metrics"] == {"records": 1, "messages": 3, "undecodable": 0}
        assert c["curated"] == {"records": 0, "messages": 0, "undecodable": 0}
        assert b.query("SELECT count() FROM trained FINAL").scalar() == 6  # 2 ids x 3 messages
        res = b.query("SELECT topic, uniqExact(experience_id) AS n FROM experiences FINAL "
                      "WHERE model_version >= {v:Int64} AND source = {s:String} GROUP BY topic", {"v": "2", "s": "explorer"})
        assert res.dicts() == [{"topic": "raw", "n": 1}]
        assert b.query("SELECT {v:Int64} + 1 AS x", {"v": "41"}).scalar() == 42
        with pytest.raises(QueryError, match="READONLY|readonly"):
            b.query("INSERT INTO tasks (task_id) VALUES ('x')")
        with pytest.raises(QueryError, match="readonly"):
            b.query("SELECT 1 SETTINGS readonly = 0")
        with pytest.raises(QueryError, match="Syntax error"):
            b.query("SELEC 1")
        with pytest.raises(QueryError, match="not used"):
            b.query("SELECT 1", {"v": "1"})
        with pytest.raises(QueryError, match="no --param"):
            b.query("SELECT {v:Int64}")
    finally:
        b.close()
    r = _open(kind, tmp_path / "db", writable=False)  # a reader of the same folder sees the same
    try:
        assert table_counts(r)["raw"]["messages"] == 3
    finally:
        r.close()


def test_server_side_kafka_engine_views_write_what_the_sink_writes(tmp_path):
    """The Kafka-engine DDL (docs/ANALYTICS.md) on chDB, with `Null` stand-ins for the Kafka tables
    (chDB cannot run the Kafka engine): Avro data pushed through the same views must land as the very
    rows the Python sink writes for the same messages."""
    import fastavro

    cfg = make_config(tmp_path, 1, **{"analytics.database": "srv"})
    recs = all_records() + [
        ("raw", experience(reward=None, response_ids=[], logprobs=[], loss_mask=[], prompt_text="p")),
        ("curated_priority", experience(3, advantage=0.5, reward_components={"a": 0.25}, metadata={"k": "v"},
                                        survivors=[0, 2], priority=1.5)),
        ("rejected", Rejection(reason="schema", stage="verify", partition=3, offset=9)),
        ("rejected", Rejection(group_id="g", experience_ids=["a", "b"], reason="zero_variance", stage="filter")),
        ("metrics", TrainerMetric(model="tiny", kind="metric", step=1, version=1, values={"loss": 0.5}))]
    b = ChdbBackend(tmp_path / "db", "py", writable=True)
    try:
        for stmt in ddl_statements("srv") + kafka_engine_ddl(cfg, brokers="x:9092", registry_url="http://r:8081",
                                                             source_engine="Null"):
            b.execute(stmt)
        for i, (key, rec) in enumerate(recs):
            name, ts = getattr(cfg.topics, key).name, 1_700_000_000_000 + i
            for table, row in to_rows(DECODE, Position(key, name, 0, i, ts, b"k"), CODEC.encode(rec, None)):
                b.insert(table, [row])
            src = next(s for s, (_, keys) in SOURCES.items() if key in keys)
            avsc = json.loads((SCHEMA_DIR / f"{type(rec).__name__}.avsc").read_text())
            with open(tmp_path / f"{i}.avro", "wb") as f:
                fastavro.writer(f, fastavro.parse_schema(avsc), [rec.to_avro()])
            structure = ", ".join(f"`{n}` {t}" for n, t in avro_columns(type(rec).__name__)).replace("'", "\\'")
            b.execute(f"INSERT INTO srv.{src} SELECT *, '{name}', 'k', 0, {i}, fromUnixTimestamp64Milli({ts}), '', '' "
                      f"FROM file('{tmp_path / f'{i}.avro'}', 'Avro', '{structure}')")
        for table in ["tasks", "experiences", "rejections", "feedback", "weights", "metrics", "trained"]:
            cols = ", ".join(f"`{c}`" for c in TABLES[table].insert_columns)
            q = "SELECT " + cols + " FROM {db}." + table + " FINAL ORDER BY topic, offset, " + TABLES[table].id_column
            server, python = b.query(q.format(db="srv")).rows, b.query(q.format(db="py")).rows
            assert server == python and python, (table, server, python)
        b.execute("INSERT INTO srv.kafka_feedback (_topic, _key, _partition, _offset, _raw_message, _error) "
                  f"VALUES ('{cfg.topics.feedback.name}', 'k', 2, 7, 'junk', 'Cannot parse Avro')")
        assert b.query("SELECT topic, `offset`, reason, detail, size FROM srv.undecodable").rows == [
            ["feedback", 7, "avro_error", "Cannot parse Avro", 4]]
        assert b.query("SELECT count() FROM srv.feedback").scalar() == 1  # the bad message made no feedback row
    finally:
        b.close()


def test_shipped_kafka_engine_ddl_is_what_the_generator_writes():
    from rftbus.ground.config import Config

    shipped = (Path(__file__).resolve().parents[2] / "docs" / "analytics-kafka-engine.sql").read_text()
    stmts = ddl_statements("rftbus") + kafka_engine_ddl(Config(), brokers="kafka:9092",
                                                         registry_url="http://schema-registry:8081")
    body = shipped[shipped.index("CREATE DATABASE"):]
    assert body == "".join(f"{s};\n\n" for s in stmts), "regenerate docs/analytics-kafka-engine.sql (see its header)"


def test_reader_of_a_missing_folder_says_what_to_do(tmp_path):
    cfg = make_config(tmp_path, 1, **{"analytics.path": str(tmp_path / "nothing")})
    with pytest.raises(QueryError, match="run `rftbus analytics sink`"):
        open_backend(cfg, writable=False)


# ---- the sink process on the session broker -------------------------------------------------------
def _sink_cfg(broker, tmp_path, tag):
    cfg = make_config(tmp_path / "state", broker.broker.port,
                      **{f"topics.{k}.name": f"an{tag}.{k}" for k in TOPIC_KEYS},
                      **{"kafka.bootstrap_servers": broker.bootstrap_servers, "analytics.group_id": f"an{tag}",
                         "analytics.batch_seconds": 0.3, "analytics.batch_rows": 50})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    return cfg, path


def _produce(cfg, producer, n: int, wave: int) -> None:
    p = cfg.topics
    for i in range(n):
        t = Task(taskset="addition", prompt=f"{wave}+{i}=", answer=str(wave + i))
        producer.produce(p.tasks.name, key=t.task_id.encode(), value=CODEC.encode(t, None))
        for lane in ("raw", "raw", "curated", "expert"):
            e = experience(2, task_id=t.task_id, group_id=f"g{wave}-{i}", reward=float(i % 2), model_version=wave,
                           survivors=[1] if lane == "curated" else [])
            producer.produce(getattr(p, lane).name, key=e.group_id.encode(), value=CODEC.encode(e, None))
        if i % 5 == 0:
            r = Rejection(experience_id="x", reason="stale", stage="trainer")
            producer.produce(p.rejected.name, key=b"g", value=CODEC.encode(r, None))
            f = Feedback(experience_id="x", kind=FeedbackKind.reward, reward=1.0)
            producer.produce(p.feedback.name, key=b"x", value=CODEC.encode(f, None))
    dup = experience(experience_id=f"dup{wave}")  # written twice upstream: two messages, one record
    for _ in range(2):
        producer.produce(p.raw.name, key=b"g", value=CODEC.encode(dup, None))
    producer.produce(p.raw.name, key=b"g", value=b"garbage")
    producer.produce(p.feedback.name, key=b"x", value=CODEC.encode(Task(taskset="x", prompt="wrong topic"), None))
    w = WeightVersion(model="tiny", version=wave, step=wave, uri="file:///w", sha256="0" * 64, bytes=1)
    producer.produce(p.weights.name, key=b"tiny", value=CODEC.encode(w, None))
    producer.produce(p.weights.name, key=b"gone", value=None)  # a tombstone
    m = TrainerMetric(model="tiny", kind="trained", step=wave, version=wave, values={f"e{wave}": 1.0})
    producer.produce(p.metrics.name, key=b"tiny", value=CODEC.encode(m, None))
    producer.flush(30)


def _sink(path: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    cmd = [str(Path(sys.executable).parent / "rftbus"), "--config", str(path), "analytics", "sink", *args]
    log = open(path.parent / f"sink-{time.time_ns()}.log", "w")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})


def _status(cfg) -> dict:
    try:
        return json.loads((cfg.state_dir / "status" / "analytics-0.json").read_text())
    except (OSError, ValueError):
        return {}


def _wait(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def test_sink_counts_match_kafka_after_a_drain_and_a_full_redelivery(broker, tmp_path):
    from rftbus.consumers.analytics import counts, ids

    tag = uuid.uuid4().hex[:6]
    cfg, path = _sink_cfg(broker, tmp_path, tag)
    create_topics(cfg, make_admin(cfg))
    producer = make_producer(cfg)
    _produce(cfg, producer, 40, wave=1)
    sink = _sink(path)
    try:
        _wait(lambda: _status(cfg).get("messages", 0) > 0, 90, "a first batch")
        # While the sink holds the chDB folder, readers open it read-only in the sandboxed reader.
        assert counts(cfg)["tasks"] > 0
        res = run_query(cfg, "SELECT count() AS n FROM tasks FINAL WHERE topic = {t:String}", {"t": "tasks"})
        assert res.scalar() > 0 and as_csv(res).splitlines()[0] == "n"
        _produce(cfg, producer, 40, wave=2)
        sink.send_signal(signal.SIGTERM)  # at once: the drain on stop must still take wave 2 in
        assert sink.wait(60) == 0
        # SIGKILL mid-stream, then a restart in the same group: whatever was inserted but not yet
        # committed is delivered again and must fold into the rows already there.
        _produce(cfg, producer, 40, wave=3)
        sink = _sink(path)
        _wait(lambda: _status(cfg).get("pid") == sink.pid and _status(cfg).get("messages", 0) > 0, 90,
              "the restarted sink's first batch")
        sink.send_signal(signal.SIGKILL)
        sink.wait(30)
        sink = _sink(path, "--until-end")
        assert sink.wait(120) == 0
    finally:
        if sink.poll() is None:
            sink.kill()
    truth = kafka_truth(cfg)
    out = rftbus_cli(cfg, "--config", str(path), "analytics", "counts", "--json")
    assert out.returncode == 0, out.stderr
    stored = json.loads(out.stdout)
    assert_counts_match(stored, truth)
    assert stored["raw"]["messages"] > stored["raw"]["records"]  # the upstream duplicates stay visible
    assert counts(cfg) == {k: truth[k]["records"] for k in TOPIC_KEYS}
    assert ids(cfg, "raw") == truth["raw"]["ids"]
    # Full re-delivery (a new consumer group reads everything again): nothing changes.
    full = _sink(path, "--until-end", env={"RFTBUS_ANALYTICS__GROUP_ID": f"an{tag}-again"})
    assert full.wait(120) == 0
    with open_reader(cfg) as r:
        assert table_counts(r) == stored
        assert r.query("SELECT count() FROM experiences").scalar() > stored["raw"]["messages"]  # stored twice ...
    reasons = run_query(cfg, "SELECT topic, reason, count() AS n FROM undecodable FINAL "
                             "GROUP BY topic, reason ORDER BY topic, reason")
    assert json.loads(as_json(reasons)) == [
        {"topic": "feedback", "reason": "wrong_record_type", "n": 3}, {"topic": "raw", "reason": "unknown_magic", "n": 3},
        {"topic": "weights", "reason": "tombstone", "n": 3}]  # one of each per wave


def test_query_errors_are_clear(tmp_path):
    cfg = make_config(tmp_path, 1)
    with pytest.raises(QueryError, match="run `rftbus analytics sink`"):
        run_query(cfg, "SELECT 1")
    with ChdbBackend(cfg.state_dir / "analytics" / "chdb", "rftbus", writable=True):
        pass  # creates the tables
    for sql, params, want in [("SELECT (1", [], "Syntax error"), ("SELEC 1", [], "SELEC statements are refused"),
                              ("DROP TABLE tasks", [], "DROP statements are refused"),
                              ("SELECT * FROM file('/etc/hostname', 'LineAsString')", [], "function file"),
                              ("SELECT {v:Int64}", ["v=notanumber"], "notanumber"), ("  ", [], "empty query")]:
        with pytest.raises(QueryError, match=want):
            run_query(cfg, sql, parse_params(params))
    with pytest.raises(QueryError, match="expected name=value"):
        parse_params(["oops"])
    # Through the real CLI: one red line, exit 1, no traceback.
    out = rftbus_cli(cfg, "analytics", "query", "SELECT (1")
    assert out.returncode == 1 and out.stderr.startswith("error:") and "Syntax error" in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) <= 2, out.stderr


def test_a_store_an_older_rftbus_made_gains_the_new_columns_and_keeps_its_rows(tmp_path):
    """decisions gained `lineage` and `serving_lineage` (GateDecision v2): the table a v1 sink made is altered at
    start, its rows kept with the defaults, and v2 rows insert."""
    from rftbus.ground.schemas import GateDecision

    t = TABLES["decisions"]
    old = [(n, ty) for n, ty in t.all_columns if n not in ("lineage", "serving_lineage")]
    b = ChdbBackend(tmp_path / "db", "old", writable=True)
    try:
        b.execute("CREATE DATABASE IF NOT EXISTS old")
        b.execute(t.ddl("old").replace(",\n  ".join(f"`{n}` {ty}" for n, ty in t.all_columns),
                                       ",\n  ".join(f"`{n}` {ty}" for n, ty in old)))
        b.execute("INSERT INTO old.decisions (topic, partition, offset, decision_id, model, decision, version, serving, "
                  "gate, reason, created_at) VALUES ('rft.decisions', 0, 0, 'm:v1:canary', 'm', 'canary', 1, 0, 'g', "
                  "'r', now64(3))")
        b.ensure_schema()
        d = GateDecision(decision_id="m:hot:v2:canary", model="m", decision="canary", version=2, serving=1, gate="g",
                         reason="r", lineage="hot")
        for table, row in to_rows(DECODE, Position("decisions", "rft.decisions", 0, 1, 1_700_000_000_000, b"m"),
                                  CODEC.encode(d, None)):
            b.insert(table, [row])
        rows = b.query("SELECT decision_id, lineage, serving_lineage FROM old.decisions ORDER BY offset").rows
        assert [list(r) for r in rows] == [["m:v1:canary", "", ""], ["m:hot:v2:canary", "hot", ""]]
    finally:
        b.close()


def test_feedback_delay_per_graded_answer_in_seconds_and_versions(tmp_path):
    """The report's feedback delay: a live answer of v2 graded 5 s later, when v5 was the newest, is 3 versions
    late; one graded 29 s later (v9 newest) is 7; an explorer's sample with a feedback record is not a graded
    answer; an answer graded twice counts its first grade."""
    from rftbus.consumers.analytics import report_sql as Q

    t0 = 1_700_000_000_000
    live = ExperienceGroup(group_id="gl", task_id="t", explorer_id="serve", prompt_ids=[1], source=Source.live,
                           created_at=t0 + 1000, samples=[
                               Experience(experience_id=f"a{i}", response_ids=[4], logprobs=[-0.5], loss_mask=[True],
                                          model_version=2) for i in range(2)])
    rollout = experience(1, experience_id="r0", model_version=2)
    recs = [("raw", live), ("raw", rollout)]
    recs += [("weights", WeightVersion(model="tiny", version=v, step=v, uri="file:///w", sha256="0" * 64, bytes=9,
                                       created_at=t0 + ms)) for v, ms in ((3, 2000), (5, 5000), (9, 20000))]
    recs += [("feedback", Feedback(experience_id=eid, kind=FeedbackKind.reward, reward=1.0, created_at=t0 + ms))
             for eid, ms in (("a0", 6000), ("a0", 40000), ("a1", 30000), ("r0", 6000))]
    b = _open("chdb", tmp_path / "db")
    try:
        tables: dict[str, list] = {}
        for off, (key, rec) in enumerate(recs):
            for table, row in to_rows(DECODE, Position(key, f"t.{key}", 0, off, t0), CODEC.encode(rec, None)):
                tables.setdefault(table, []).append(row)
        for table, rows in tables.items():
            b.insert(table, rows)
        rows = b.query(Q.sql(Q.FEEDBACK_DELAY, "rfa"), {"since": "0"}).dicts()
        per = b.query(Q.sql(Q.FEEDBACK_DELAY_BY_VERSIONS, "rfa"), {"since": "0"}).dicts()
    finally:
        b.close()
    assert [(r["experience_id"], r["delay_s"], r["delay_versions"]) for r in rows] == [("a0", 5.0, 3), ("a1", 29.0, 7)]
    assert [(r["delay_versions"], r["n"], r["max_s"]) for r in per] == [(3, 1, 5.0), (7, 1, 29.0)]
