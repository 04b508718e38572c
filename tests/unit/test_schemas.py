"""Schemas: files, records and history stay in step, and evolution stays backward-compatible."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer

from rftbus.ground.schemas import (
    RECORD_TYPES, SCHEMA_DIR, AvroDeserializer, Experience, ExperienceGroup, FeedbackKind, SchemaStore, Source,
    fingerprint64, get_store, record_class,
)
from rftbus.ground.schemas.store import strip_logical_types

STORE = get_store()
NAMES = ["Task", "Experience", "ExperienceGroup", "Image", "Feedback", "WeightVersion", "TrainerMetric", "Rejection", "GateDecision"]

# What docs/DESIGN.md ("Records") promises each record carries, as schema field names. The fields every
# sample of a group shares (task, prompt, source, producer, time) are on the group, once.
DESIGN_FIELDS = {
    "Experience": ["experience_id", "response_ids", "logprobs", "loss_mask", "reward", "reward_components",
                   "advantage", "model_version"],
    "ExperienceGroup": ["group_id", "task_id", "prompt_ids", "source", "explorer_id", "samples", "survivors",
                        "priority", "created_at"],
    "Task": ["task_id", "prompt", "created_at"],
    "Image": ["media_type", "sha256", "size", "data", "uri"],
    "Feedback": ["feedback_id", "experience_id", "created_at"],
    "WeightVersion": ["model", "version", "uri", "created_at"],
    "TrainerMetric": ["metric_id", "model", "step", "version", "values", "created_at"],
    "Rejection": ["rejection_id", "reason", "created_at"],
    "GateDecision": ["decision_id", "model", "decision", "version", "serving", "evidence", "created_at"],
}
# "Every record carries a stable id" (WeightVersion's identity is its key plus version).
ID_FIELDS = {"Task": "task_id", "Experience": "experience_id", "ExperienceGroup": "group_id", "Feedback": "feedback_id",
             "WeightVersion": ("model", "version"), "TrainerMetric": "metric_id",
             "Rejection": "rejection_id", "GateDecision": "decision_id", "Image": "sha256"}


def field_names(raw: dict) -> list[str]:
    return [f["name"] for f in raw["fields"]]


def test_store_loads_every_record():
    assert STORE.names() == sorted(f"rftbus.{n}" for n in NAMES)
    assert set(RECORD_TYPES) == set(STORE.names())
    for name in NAMES:
        entry = STORE.current(name)
        assert entry.raw["namespace"] == "rftbus" and entry.raw["doc"]
        assert all(f.get("doc") for f in entry.raw["fields"]), name
        assert (SCHEMA_DIR / f"{name}.avsc").read_text() == entry.schema_str


@pytest.mark.parametrize("name", NAMES)
def test_dataclass_fields_match_avsc(name):
    cls = record_class(name)
    raw = STORE.current(name).raw
    assert list(cls.AVRO_FIELDS) == field_names(raw)
    assert cls.SCHEMA_NAME == f"rftbus.{name}"
    # defaults in the schema are defaults in Python too (so a reader and a constructor agree)
    import dataclasses
    pyfields = {f.name: f for f in dataclasses.fields(cls)}
    for f in raw["fields"]:
        if "default" in f:
            pf = pyfields[f["name"]]
            default = pf.default if pf.default is not dataclasses.MISSING else pf.default_factory()
            assert default == f["default"], (name, f["name"])


@pytest.mark.parametrize("name", NAMES)
def test_design_fields_present(name):
    names = field_names(STORE.current(name).raw)
    missing = [f for f in DESIGN_FIELDS[name] if f not in names]
    assert not missing, f"{name} lacks docs/DESIGN.md fields {missing}"
    ids = ID_FIELDS[name]
    assert all(i in names for i in ((ids,) if isinstance(ids, str) else ids))


def test_the_group_carries_the_experience_schema_itself():
    """Experience.avsc is the element of ExperienceGroup.samples, word for word (one definition, two files)."""
    samples = next(f for f in STORE.current("ExperienceGroup").raw["fields"] if f["name"] == "samples")
    assert samples["type"]["items"] == STORE.current("Experience").raw


def test_the_task_and_the_group_carry_the_image_schema_itself():
    """Image.avsc is the element of Task.images and ExperienceGroup.images, word for word (#62)."""
    for name in ("Task", "ExperienceGroup"):
        [images] = [f for f in STORE.current(name).raw["fields"] if f["name"] == "images"]
        assert images["type"]["items"] == STORE.current("Image").raw and images["default"] == []


def test_a_v1_experience_reads_as_a_sample_of_today():
    """v1 was a whole experience with its group fields; today's Experience is the part that varies per
    sample, so old bytes still decode (the group fields are dropped)."""
    v1 = STORE.history("Experience")[0]
    datum = sample(v1.raw, {}, True)
    fo = io.BytesIO()
    fo.write(b"\xc3\x01" + v1.fingerprint)
    schemaless_writer(fo, v1.fast, datum)
    rec = AvroDeserializer(Experience)(fo.getvalue())
    assert rec.experience_id == datum["experience_id"] and rec.response_ids == datum["response_ids"]


def test_enums_and_nullable_unions():
    src = next(f for f in STORE.current("ExperienceGroup").raw["fields"] if f["name"] == "source")["type"]
    assert src["symbols"] == [s.value for s in Source] == ["explorer", "live", "human", "expert", "trace"]
    kind = next(f for f in STORE.current("Feedback").raw["fields"] if f["name"] == "kind")["type"]
    assert kind["symbols"] == [k.value for k in FeedbackKind]
    for name in NAMES:
        for f in STORE.current(name).raw["fields"]:
            if isinstance(f["type"], list):
                assert f["type"][0] == "null" and f.get("default", "absent") is None, (name, f["name"])
    ts = next(f for f in STORE.current("Task").raw["fields"] if f["name"] == "created_at")["type"]
    assert ts == {"type": "long", "logicalType": "timestamp-millis"}


def _crc64_avro(data: bytes) -> int:
    """The Avro spec's reference CRC-64-AVRO (Rabin), written out independently of fastavro."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)
    fp = empty
    for b in data:
        fp = (fp >> 8) ^ table[(fp ^ b) & 0xFF]
    return fp


def test_fingerprints_are_little_endian_crc64():
    # Known vector from Avro's schema-tests: fingerprint of "null" is 7195948357588979594.
    assert fingerprint64("null") == (7195948357588979594).to_bytes(8, "little")
    for entry in STORE:
        value = _crc64_avro(entry.canonical.encode())
        assert entry.fingerprint == value.to_bytes(8, "little"), entry.name
    # logicalType is not part of the canonical form: the fast (stripped) copy has the same fingerprint
    for name in NAMES:
        e = STORE.current(name)
        assert fingerprint64(strip_logical_types(e.raw)) == e.fingerprint
        assert STORE.by_fingerprint(e.fingerprint) is e


# ---------------------------------------------------------------- evolution

def sample(schema, named: dict, full: bool):
    """A datum for a raw schema: ``full`` picks non-null union branches and non-empty containers."""
    if isinstance(schema, list):
        branch = next((b for b in schema if b != "null"), "null") if full else schema[0]
        return sample(branch, named, full)
    if isinstance(schema, str):
        prim = {"null": None, "boolean": True, "int": 7, "long": 1_700_000_000_000, "float": 0.5,
                "double": 2.25, "bytes": b"\x00\xc3", "string": "s\u00e9"}
        return prim[schema] if schema in prim else sample(named[schema], named, full)
    t = schema["type"]
    if t == "record":
        named[schema["name"]] = named[f"{schema.get('namespace', 'rftbus')}.{schema['name']}"] = schema
        return {f["name"]: sample(f["type"], named, full) for f in schema["fields"]}
    if t == "enum":
        named[schema["name"]] = named[f"{schema.get('namespace', 'rftbus')}.{schema['name']}"] = schema
        return schema["symbols"][-1 if full else 0]
    if t == "array":
        return [sample(schema["items"], named, full)] * (3 if full else 0)
    if t == "map":
        return {"k": sample(schema["values"], named, full)} if full else {}
    if t == "fixed":
        return b"\x01" * schema["size"]
    return sample(t, named, full)  # {"type": "long", "logicalType": ...}


def assert_backward_compatible(old_raw: dict, new_raw: dict) -> None:
    """``new_raw`` (reader) reads everything ``old_raw`` (writer) wrote; raises AssertionError if not."""
    old_fields = {f["name"]: f for f in old_raw["fields"]}
    for f in new_raw["fields"]:
        assert f["name"] in old_fields or "default" in f, f"new field {f['name']} needs a default"
    writer, reader = parse_schema(old_raw), parse_schema(new_raw)
    for full in (True, False):
        datum = sample(old_raw, {}, full)
        fo = io.BytesIO()
        schemaless_writer(fo, writer, datum)
        fo.seek(0)
        try:
            out = schemaless_reader(fo, writer, reader)
        except Exception as e:  # any resolution failure is an incompatibility
            raise AssertionError(f"{new_raw['name']} cannot read its old version: {e!r}") from e
        for f in new_raw["fields"]:
            name = f["name"]
            if name in old_fields and old_fields[name]["type"] == f["type"]:
                assert out[name] == datum[name] or _is_ts(f["type"]), name
            elif name not in old_fields:
                assert out[name] == f["default"], name


def _is_ts(t) -> bool:
    return isinstance(t, dict) and t.get("logicalType", "").startswith("timestamp")


@pytest.mark.parametrize("name", NAMES)
def test_history_is_published_and_compatible(name):
    history = STORE.history(name)
    assert [e.version for e in history] == list(range(1, len(history) + 1)), "history must be v1..vN"
    assert history[-1].raw == STORE.current(name).raw, (
        f"rftbus/ground/schemas/{name}.avsc changed but was not published: copy it to "
        f"rftbus/ground/schemas/history/{name}/v{len(history) + 1}.avsc (after checking it is backward-compatible)")
    current = STORE.current(name)
    for old in history:
        assert_backward_compatible(old.raw, current.raw)
        assert STORE.by_fingerprint(old.fingerprint) is not None


def test_compatibility_check_rejects_breaking_changes():
    old = STORE.current("Task").raw
    no_default = json.loads(json.dumps(old))
    no_default["fields"].append({"name": "tenant", "type": "string"})
    with pytest.raises(AssertionError, match="needs a default"):
        assert_backward_compatible(old, no_default)
    retyped = json.loads(json.dumps(old))
    next(f for f in retyped["fields"] if f["name"] == "prompt")["type"] = "int"
    with pytest.raises(AssertionError, match="cannot read"):
        assert_backward_compatible(old, retyped)


def test_old_version_decodes_to_current_record(tmp_path: Path):
    """Bytes written with an older published schema resolve to today's typed record."""
    shutil.copytree(SCHEMA_DIR, tmp_path / "s", ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    root = tmp_path / "s"
    current = STORE.current("ExperienceGroup").raw
    old = json.loads(json.dumps(current))
    old["fields"] = [f for f in old["fields"] if f["name"] not in ("metadata", "priority", "prompt_text")]
    hist = root / "history" / "ExperienceGroup"
    (hist / "v1.avsc").write_text(json.dumps(old))
    for stale in hist.glob("v*.avsc"):
        if stale.name != "v1.avsc":
            stale.unlink()
    (hist / "v2.avsc").write_text(json.dumps(current))
    store = SchemaStore(root)
    assert [e.version for e in store.history("ExperienceGroup")] == [1, 2]
    v1 = store.history("ExperienceGroup")[0]
    datum = sample(old, {}, True)
    fo = io.BytesIO()
    fo.write(b"\xc3\x01" + v1.fingerprint)
    schemaless_writer(fo, v1.fast, datum)
    for de in (AvroDeserializer(ExperienceGroup, store=store), AvroDeserializer(None, store=store)):
        rec = de(fo.getvalue())
        assert isinstance(rec, ExperienceGroup) and all(isinstance(s, Experience) for s in rec.samples)
        assert rec.metadata == {} and rec.prompt_text is None and rec.priority == 0.0
        assert rec.prompt_ids == datum["prompt_ids"] and rec.source is Source(datum["source"])
        assert rec.created_at == datum["created_at"] and isinstance(rec.created_at, int)
