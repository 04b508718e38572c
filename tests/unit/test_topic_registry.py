"""The topic registry (rftbus/ground/kafka/registry.py) is the one description of every topic, and the tables that used to
keep their own view (ACLs, the streams' outputs, the analytics sink, the books) read it."""

from __future__ import annotations

import ast
import re

from rftbus.ground.config import Config, TopicsConfig
from rftbus.ground.kafka import registry
from rftbus.ground.schemas import SCHEMA_DIR
from tests.conftest import REPO

RUNTIME = ("rftbus",)  # the package: ground, components and apps


def test_every_configured_topic_is_in_the_registry_and_nothing_else():
    assert set(registry.BY_KEY) == set(TopicsConfig.model_fields)
    assert len(registry.TOPICS) == len(registry.BY_KEY)


def test_each_topic_has_its_schema_on_disk_its_writers_and_spec():
    cfg = Config()
    for t in registry.TOPICS:
        assert t.value is not None or t.encoding == "otlp_proto", t.key  # (spans: OTLP's own protobuf)
        assert t.value is None or (SCHEMA_DIR / f"{t.value.__name__}.avsc").is_file(), t.key
        assert t.writers and t.holds and t.record_key, t.key
        assert t.spec(cfg).name == getattr(cfg.topics, t.key).name
        assert not t.curated or t.lane, f"{t.key}: a curated topic is a lane"


def test_the_tables_read_the_registry():
    from rftbus.consumers.analytics.kafka_engine import SOURCES
    from rftbus.consumers.analytics.rows import CURATED, TOPIC_RECORDS
    from rftbus.consumers.analytics.schema import TOPIC_TABLES
    from rftbus.ground.kafka.acls import WRITERS
    from rftbus.apps.run.ledger import LANES
    from rftbus.streams.topology import OUTPUT_ROLES

    assert WRITERS == {t.key: t.writers for t in registry.TOPICS}
    avro = {t.key for t in registry.avro_topics()}
    assert TOPIC_RECORDS == {t.key: t.value for t in registry.avro_topics()}
    assert set(TOPIC_TABLES) == avro
    read = sorted(k for _, keys in SOURCES.values() for k in keys)
    assert read == sorted(avro), "every Avro topic is read by exactly one Kafka-engine table"
    assert all(registry.record_of(k).__name__ == rec for rec, keys in SOURCES.values() for k in keys)
    assert OUTPUT_ROLES == ("curated", "curated_priority", "expert", "rejected")
    assert LANES == ("curated", "curated_priority", "expert") and CURATED == ("curated", "curated_priority")


def test_internal_topics_are_named_from_the_app_id():
    cfg = Config.model_validate({"streams": {"app_id": "app7"}})
    assert [t.name(cfg) for t in registry.INTERNAL] == ["app7-join", "app7-joined", "app7-pending-changelog",
                                                        "app7-live-changelog", "app7-rates-changelog",
                                                        "app7-traces-changelog"]


def _sources():
    for top in RUNTIME:
        yield from (p for p in (REPO / top).rglob("*.py") if "__pycache__" not in p.parts)


def test_a_topic_table_is_defined_once_and_names_are_spelt_in_the_config_only():
    """No second `OUTPUT_ROLES`-like tuple (one that spells out what the registry says: the lanes, the curated
    lanes, the streams' outputs, every topic), and no topic name as a string outside the config. A tuple of keys
    that is a stage's own choice (the topics a tally reads) is not the registry's business."""
    keys = set(registry.BY_KEY)
    facts = {frozenset(registry.keys(**{flag: True})) for flag in ("lane", "curated", "streams_output")}
    facts.add(frozenset(keys))
    tables, names = [], []
    for path in _sources():
        rel = path.relative_to(REPO).as_posix()
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                consts = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                if len(consts) >= 2 and len(consts) == len(node.elts) and frozenset(consts) in facts:
                    tables.append(f"{rel}:{node.lineno} {consts}")
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and rel != "rftbus/ground/config/bus.py"
                    and re.fullmatch(r"rft\.[a-z.]+", node.value)):
                names.append(f"{rel}:{node.lineno} {node.value!r}")
    assert not names, names
    assert not tables, "tuples of topic keys outside the registry (use registry.keys(...)):\n" + "\n".join(tables)


def test_topics_list_prints_the_registry_with_this_configs_names(tmp_path):
    from typer.testing import CliRunner

    from rftbus.apps.cli.main import app

    out = CliRunner().invoke(app, ["--state-dir", str(tmp_path), "topics", "list"], terminal_width=250,
                             env={"RFTBUS_TOPICS__RAW__NAME": "team.raw", "RFTBUS_STREAMS__APP_ID": "team-streams",
                                  "COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    assert "team.raw" in out.output and "team-streams-live-changelog" in out.output
    assert all((t.value.__name__ if t.value is not None else t.encoding) in out.output for t in registry.TOPICS)
