"""Codec: both framings round-trip every record; bad bytes only ever raise DecodeError."""

from __future__ import annotations

import io
import itertools
import json
import math
import random

import pytest
from confluent_kafka.schema_registry.avro import AvroSerializer as ConfluentAvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from fastavro import schemaless_writer

from rftbus.ground.schemas import (
    AvroDeserializer, AvroSerializer, DecodeError, EncodeError, Experience, ExperienceGroup, Feedback, FeedbackKind,
    Rejection, Source, Task, TrainerMetric, WeightVersion, get_store, make_codec, registry_client,
)

CTX = SerializationContext("rft.experiences.raw", MessageField.VALUE)


def experience(n: int = 8, **kw) -> Experience:
    """One sample of n tokens; keyword arguments override its fields."""
    args = dict(response_ids=[5, 150_000, 2**31 - 1, -3] * (n // 4), logprobs=[-0.5, -1.25, 0.0, -20.0] * (n // 4),
                loss_mask=[True, False] * (n // 2), reward=1.0, reward_components={"acc": 1.0}, advantage=-0.25,
                model_version=3, response_text="4", finish_reason="stop", generation_ms=12.5, metadata={"k": "v"})
    args.update(kw)
    return Experience(**args)


def group(n: int = 8, samples: int = 2, group_kw: dict | None = None, **kw) -> ExperienceGroup:
    """A group of `samples` samples of n tokens each (`kw` goes to every sample, `group_kw` to the group)."""
    args = dict(group_id="g1", task_id="t1", source=Source.live, explorer_id="ex-0",
                prompt_ids=list(range(100, 100 + n)), prompt_text="2+2?", survivors=[0], priority=0.5,
                metadata={"lane": "normal"}, samples=[experience(n, **kw) for _ in range(samples)])
    args.update(group_kw or {})
    return ExperienceGroup(**args)


def samples():
    return [
        Task(taskset="gsm8k", prompt="2+2?", answer="4", n_samples=8, metadata={"a": "b"}),
        Task(taskset="math", prompt="x"),
        group(),
        group(0, group_kw={"source": "expert", "survivors": []}, reward=None, advantage=None),
        group(4, samples=0),
        experience(),
        Rejection(experience_id="e9", group_id="g", experience_ids=["e9"], reason="zero_variance", stage="filter"),
        Feedback(experience_id="e1", kind=FeedbackKind.preference, preferred_id="a", rejected_id="b"),
        Feedback(experience_id="e1", kind="thumbs", thumbs_up=False, annotator="user-1"),
        WeightVersion(model="qwen", version=7, step=700, uri="file:///w/7", sha256="ab" * 32, bytes=10**10),
        TrainerMetric(model="qwen", kind="metric", step=3, version=1, values={"loss": 0.5}),
        Rejection(experience_id="e9", reason="stale", stage="filter", source_topic="t", partition=2,
                  offset=2**40, original=b"\xc3\x01junk"),
        Rejection(reason="undecodable", stage="trainer"),
    ]


@pytest.fixture
def mock_codec():
    """A codec on a fresh in-memory registry (mock:// URLs share a client per name)."""
    return make_codec(f"mock://test-{next(_MOCK_IDS)}")


_MOCK_IDS = itertools.count()


@pytest.mark.parametrize("rec", samples(), ids=lambda r: type(r).__name__)
def test_single_object_round_trip(rec):
    codec = make_codec(None)
    data = codec.serializer(type(rec))(rec, CTX)
    assert data[:2] == b"\xc3\x01" and data[2:10] == get_store().current(rec.SCHEMA_NAME).fingerprint
    for de in (codec.deserializer(type(rec)), codec.deserializer(None)):
        out = de(data, CTX)
        assert type(out) is type(rec) and out == rec
    assert codec.decode(codec.encode(rec, None)) == rec


@pytest.mark.parametrize("rec", samples(), ids=lambda r: type(r).__name__)
def test_confluent_round_trip(rec, mock_codec):
    data = mock_codec.serializer(type(rec))(rec, CTX)
    assert data[0] == 0
    schema_id = int.from_bytes(data[1:5], "big")
    registered = mock_codec.registry.get_schema(schema_id).schema_str
    assert json.loads(registered) == get_store().current(rec.SCHEMA_NAME).raw
    for de in (mock_codec.deserializer(type(rec)), mock_codec.deserializer(None)):
        assert de(data, CTX) == rec and type(de(data, None)) is type(rec)
    # ctx=None, given: subject "<record name>-value" (bytes no topic receives)
    assert mock_codec.deserializer(None)(mock_codec.serializer(type(rec))(rec, None)) == rec


def test_one_deserializer_accepts_both_framings(mock_codec):
    rec = group()
    single = make_codec(None).encode(rec, None)
    confluent = mock_codec.serializer(ExperienceGroup)(rec, CTX)
    de = mock_codec.deserializer(ExperienceGroup)
    assert de(single) == de(confluent) == rec
    with pytest.raises(DecodeError) as ei:
        make_codec(None).deserializer(ExperienceGroup)(confluent)
    assert ei.value.reason == "no_registry" and "no schema registry is configured" in ei.value.detail


def test_confluent_bytes_match_confluent_serializer(mock_codec):
    """Our cached-prefix fast path writes what confluent-kafka's own serializer writes."""
    rec = group(64)
    ours = mock_codec.serializer(ExperienceGroup)
    first, second = ours(rec, CTX), ours(rec, CTX)  # first delegates, second uses the cached id
    theirs = ConfluentAvroSerializer(mock_codec.registry, get_store().current("ExperienceGroup").schema_str,
                                     to_dict=lambda r, _c: r.to_avro())(rec, CTX)
    assert first == second == theirs
    other = ours(rec, SerializationContext("rft.experiences.curated", MessageField.VALUE))
    assert other[5:] == first[5:]  # other subject, same body
    sr = mock_codec.registry
    assert set(sr.get_subjects()) >= {"rft.experiences.raw-value", "rft.experiences.curated-value"}


def _fastavro_bytes(rec) -> bytes:
    entry = get_store().current(rec.SCHEMA_NAME)
    fo = io.BytesIO()
    fo.write(b"\xc3\x01" + entry.fingerprint)
    schemaless_writer(fo, entry.parsed, rec.to_avro())
    return fo.getvalue()


@pytest.mark.parametrize("variant", ["plain", "empty", "no_samples", "edge_floats", "truthy_mask", "tuples", "big"])
def test_fast_path_is_byte_identical_to_fastavro(variant):
    rng = random.Random(variant)
    rec = {
        "plain": group(),
        "empty": group(0),
        "no_samples": group(samples=0),
        "edge_floats": group(logprobs=[math.inf, -math.inf, -0.0, 1e40, 1e-50, 3.4e38, -1e-3, 7.0]),
        "truthy_mask": group(loss_mask=[2, 0, None, "x", 1, 0.0, True, False]),
        "tuples": group(logprobs=(-1.0,) * 8, loss_mask=(True,) * 8, response_ids=(1,) * 8),
        "big": group(2048, samples=8, logprobs=[-rng.random() * 9 for _ in range(2048)],
                     loss_mask=[rng.random() < 0.8 for _ in range(2048)]),
    }[variant]
    ours = make_codec(None).encode(rec, None)
    assert ours == _fastavro_bytes(rec)
    out = make_codec(None).decode(ours)
    assert len(out.samples) == len(rec.samples)
    for got, sent in zip(out.samples, rec.samples):
        assert isinstance(got, Experience)
        assert got.loss_mask == [bool(v) for v in sent.loss_mask]
        if variant != "edge_floats":
            assert got.logprobs == [float(v) for v in sent.logprobs] or variant == "big"
        assert got.response_ids == list(sent.response_ids)


def _varint(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def test_decodes_multi_block_arrays_from_other_writers():
    """Avro lets writers split arrays into blocks, with negative counts carrying a byte size."""
    rec = group(8, samples=1)
    data = make_codec(None).encode(rec, None)
    lp = b"".join(__import__("struct").pack("<f", v) for v in rec.samples[0].logprobs)
    mask = bytes(rec.samples[0].loss_mask)
    std = _varint(8) + lp + b"\x00" + _varint(8) + mask + b"\x00"
    assert std in data
    blocky = (_varint(-3) + _varint(12) + lp[:12] + _varint(5) + lp[12:] + b"\x00"
              + _varint(2) + mask[:2] + _varint(-6) + _varint(6) + mask[2:] + b"\x00")
    assert make_codec(None).decode(data.replace(std, blocky)) == rec
    # the samples array itself in blocks (a negative count with the block's byte size); a nested sample
    # is laid out as a top-level Experience record, so its bytes are that record's body
    two = group(8, samples=2, group_kw={"samples": [experience(8, reward=1.0), experience(8, reward=0.0)]})
    data = make_codec(None).encode(two, None)
    item0, item1 = (make_codec(None).encode(s, None)[10:] for s in two.samples)
    std = _varint(2) + item0 + item1 + b"\x00"
    assert std in data
    blocky = _varint(-1) + _varint(len(item0)) + item0 + _varint(1) + item1 + b"\x00"
    assert make_codec(None).decode(data.replace(std, blocky)) == two


BAD = {
    "empty": (b"", "empty"),
    "one_c3": (b"\xc3", "truncated"),
    "short_header": (b"\xc3\x01\x00\x01", "truncated"),
    "confluent_header_only": (b"\x00\x00\x00\x00\x01", "truncated"),
    "zero_byte": (b"\x00", "truncated"),
    "json": (b'{"task_id": "x"}', "unknown_magic"),
    "container_file": (b"Obj\x01" + b"\x00" * 20, "unknown_magic"),
    "wrong_second_magic": (b"\xc3\x02" + b"\x00" * 20, "unknown_magic"),
    "unknown_fingerprint": (b"\xc3\x01" + b"\x11" * 8 + b"\x02ab", "unknown_schema"),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_bytes_raise_decode_error(name):
    data, reason = BAD[name]
    for de in (make_codec(None).deserializer(ExperienceGroup), make_codec(None).deserializer(None)):
        with pytest.raises(DecodeError) as ei:
            de(data)
        assert ei.value.reason == reason, ei.value
        assert ei.value.detail and str(ei.value).startswith(reason)


def test_wrong_record_type_and_unknown_registry_id(mock_codec):
    task = Task(taskset="s", prompt="p")
    with pytest.raises(DecodeError) as ei:
        make_codec(None).deserializer(ExperienceGroup)(make_codec(None).encode(task, None))
    assert ei.value.reason == "wrong_record_type"
    with pytest.raises(DecodeError) as ei:
        mock_codec.deserializer(ExperienceGroup)(mock_codec.serializer(Task)(task, CTX))
    assert ei.value.reason == "wrong_record_type"
    with pytest.raises(DecodeError) as ei:
        mock_codec.deserializer(None)(b"\x00\x00\x00\x30\x39" + b"\x02ab")
    assert ei.value.reason == "unknown_schema" and "12345" in ei.value.detail


@pytest.mark.parametrize("framing", ["single", "confluent"])
def test_every_truncation_and_trailing_garbage(framing, mock_codec):
    rec = group(8)
    data = make_codec(None).encode(rec, None) if framing == "single" else mock_codec.serializer(ExperienceGroup)(rec, CTX)
    de = mock_codec.deserializer(None)
    header = 10 if framing == "single" else 5
    for cut in range(len(data)):
        with pytest.raises(DecodeError) as ei:
            de(data[:cut])
        assert ei.value.reason in ("empty", "truncated", "malformed_body"), (cut, ei.value)
        if cut > header:
            assert ei.value.reason in ("truncated", "malformed_body")
    with pytest.raises(DecodeError) as ei:
        de(data + b"\x00")
    assert ei.value.reason == "malformed_body" and "trailing" in ei.value.detail


def test_random_garbage_only_raises_decode_error(mock_codec):
    rng = random.Random(7)
    de = mock_codec.deserializer(None)
    mock_codec.encode(Task(taskset="s", prompt="p"), None)  # registry has schema id 1
    heads = [b"", b"\xc3\x01" + get_store().current("ExperienceGroup").fingerprint,
             b"\xc3\x01" + get_store().current("Task").fingerprint, b"\x00\x00\x00\x00\x01"]
    for i in range(3000):
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 60)))
        try:
            de(heads[i % len(heads)] + body)
        except DecodeError:
            pass
    valid = bytearray(make_codec(None).encode(group(16), None))
    for _ in range(2000):  # flip bytes of a valid record
        mutated = bytearray(valid)
        for _ in range(rng.randrange(1, 4)):
            mutated[rng.randrange(10, len(mutated))] = rng.randrange(256)
        try:
            de(bytes(mutated))
        except DecodeError:
            pass


def test_tombstones_and_buffers():
    codec = make_codec(None)
    assert codec.serializer(Task)(None, None) is None
    assert codec.deserializer(Task)(None, None) is None
    rec = Task(taskset="s", prompt="p")
    data = codec.encode(rec, None)
    assert codec.decode(memoryview(data)) == rec and codec.decode(bytearray(data)) == rec
    for wrong in ("text", 5):
        with pytest.raises(DecodeError) as ei:
            codec.decode(wrong)
        assert ei.value.reason == "not_bytes"


def test_encode_errors_are_encode_errors(mock_codec):
    for codec in (make_codec(None), mock_codec):
        with pytest.raises(EncodeError):
            codec.serializer(Task)(Task(taskset=None, prompt="p"), CTX)
        with pytest.raises(EncodeError):
            codec.serializer(Task)(group(), CTX)
        with pytest.raises(EncodeError):
            codec.serializer(ExperienceGroup)(group(loss_mask=None), CTX)
        with pytest.raises(EncodeError):
            codec.serializer(ExperienceGroup)(group(logprobs=[None] * 8), CTX)
    # a plain dict in the record's Avro shape is accepted
    rec = Task(taskset="s", prompt="p")
    assert make_codec(None).decode(make_codec(None).serializer(Task)(rec.to_avro(), None)) == rec


def test_make_codec_caches_and_shares_mock_registry():
    a, b = make_codec("mock://shared-x"), make_codec("mock://shared-x")
    assert a.registry is b.registry is registry_client({"url": "mock://shared-x"})
    assert a.serializer(Task) is a.serializer(Task) and a.deserializer() is a.deserializer(None)
    assert make_codec(None).registry is None
    data = a.encode(Task(taskset="s", prompt="p"), None)
    assert b.decode(data).prompt == "p"  # a producer and a consumer in one process see one registry
    ser = AvroSerializer(Task, registry_conf={"url": "mock://shared-x"})
    assert ser.framing == "confluent" and AvroSerializer(Task).framing == "single-object"
    assert AvroDeserializer(Task, a.registry)(ser(Task(taskset="s", prompt="q"), CTX)).prompt == "q"


def test_records_defaults_and_types():
    a, b = Task(taskset="s", prompt="p"), Task(taskset="s", prompt="p")
    assert a.task_id != b.task_id and len(a.task_id) == 32 and isinstance(a.created_at, int)
    assert group(group_kw={"source": "human"}).source is Source.human
    assert Feedback(experience_id="e", kind="rating").kind is FeedbackKind.rating
    with pytest.raises(ValueError):
        group(group_kw={"source": "martian"})
    g = group()
    d = g.to_avro()
    assert d["prompt_ids"] is g.prompt_ids  # shallow: no copies of token lists
    assert d["samples"][0]["response_ids"] is g.samples[0].response_ids
    assert g.kafka_key() == "g1" and WeightVersion(model="m", version=1, step=1, uri="u", sha256="s",
                                                    bytes=1).kafka_key() == "m"
    assert Experience.KEY_FIELD is None  # a sample travels inside its group, never alone
    assert not hasattr(g, "__dict__") and not hasattr(g.samples[0], "__dict__")  # slots
    assert g.experience_ids() == [s.experience_id for s in g.samples] and g.kept() == [g.samples[0]]


def test_the_context_is_always_passed_and_names_the_subject(mock_codec):
    """confluent-kafka's serializer rule: `(obj, ctx)`, the context always given. Without one a record went to the
    registry under its record name (`rftbus.Rejection-value`): the streams' rejections, metrics and the gate's
    decisions did, beside every other record's `<topic>-value`. Now a call without it fails, and the streams'
    rejections register under their topic's subject."""
    from rftbus.streams.outputs import Emitter

    with pytest.raises(TypeError):
        mock_codec.encode(Task(taskset="s", prompt="p"))  # type: ignore[call-arg]
    emit = Emitter(None, mock_codec.encode, {"rejected": "rft.experiences.rejected"}, {"rejected": 4}, 1 << 20)
    emit.rejection(reason="malformed", detail="d", stage="verify", src="rft.experiences.raw/0/1", original=None)
    subjects = mock_codec.registry.get_subjects()
    assert "rft.experiences.rejected-value" in subjects and "rftbus.Rejection-value" not in subjects, subjects
