"""Skim + splice (rftbus/ground/schemas/skim.py, rftbus/ground/schemas/view.py): the curated bytes are exactly a full re-encode, and
bad or unusual bytes get exactly the verdict a full decode gives."""

from __future__ import annotations

import io
import itertools
import json
import random
import shutil
import struct
from dataclasses import replace
from pathlib import Path

import pytest
from fastavro import schemaless_writer

from rftbus.ground.schemas import Codec, Experience, ExperienceGroup, SchemaStore, Source, Task, get_store, make_codec
from rftbus.ground.schemas.skim import Skimmer
from rftbus.ground.schemas.store import SCHEMA_DIR
from rftbus.ground.config.streams import StreamsConfig
from rftbus.ground.schemas.verify import read_group, sample_drops
from rftbus.ground.schemas.view import GroupReader, GroupView

_MOCK = itertools.count()
TEXT = ["", "a", "héllo wörld", "🙂 emoji", "日本語のテキスト", "e\u0301", "x" * 300, "\u2028 \x00 nul"]
IDS = [0, 1, 48, 63, 64, 127, 128, 150_000, 2**20, 2**31 - 1, -1, -64, -65, -(2**31), 2**40, -(2**62)]
SAMPLE_FIELDS = ("experience_id", "reward", "model_version", "metadata")


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _ids(rng: random.Random, n: int) -> list[int]:
    if rng.random() < 0.5:
        return [rng.randrange(50) for _ in range(n)]
    return [rng.choice(IDS) if rng.random() < 0.3 else rng.randrange(200_000) for _ in range(n)]


def random_sample(rng: random.Random) -> Experience:
    n = rng.choice([0, 1, 2, 7, 64, 300])
    text = lambda: rng.choice(TEXT) if rng.random() < 0.8 else None  # noqa: E731
    return Experience(
        experience_id=rng.choice(TEXT) + str(rng.random()), response_ids=_ids(rng, n),
        logprobs=[f32(-rng.random() * 9) for _ in range(n + rng.choice([0, 0, 0, -1, 1]) if n else 0)],
        loss_mask=[rng.random() < 0.7 for _ in range(n)],
        reward=rng.choice([None, 0.0, 1.0, -0.0, rng.random(), 1e300]),
        reward_components=rng.choice([{}, {"acc": 1.0}, {t: rng.random() for t in TEXT[:5]}]),
        advantage=rng.choice([None, 0.5, -2.0]), model_version=rng.choice([0, 5, -1, 2**63 - 1, -(2**63)]),
        response_text=text(), finish_reason=text(), generation_ms=rng.random() * 100,
        reward_ms=rng.choice([0.0, 1e-310, float("inf")]), metadata=rng.choice([{}, {"k": "v"}, {t: t for t in TEXT}]))


def random_group(rng: random.Random) -> ExperienceGroup:
    return ExperienceGroup(
        group_id=rng.choice(TEXT), task_id=rng.choice(TEXT), source=rng.choice(list(Source)),
        explorer_id=rng.choice(TEXT), prompt_ids=_ids(rng, rng.choice([0, 3, 64])),
        prompt_text=rng.choice(TEXT + [None]), samples=[random_sample(rng) for _ in range(rng.choice([0, 1, 2, 8]))],
        survivors=rng.choice([[], [0], [1, 3]]), priority=rng.choice([0.0, rng.random()]),
        created_at=rng.choice([0, 1_700_000_000_000, -1, 2**62]),
        metadata=rng.choice([{}, {"k": "v"}, {t: t for t in TEXT}]))


def random_changes(rng: random.Random, g: ExperienceGroup) -> tuple[dict, dict]:
    pool = {"survivors": rng.sample(range(8), rng.randrange(4)), "priority": rng.random(),
            "metadata": {**g.metadata, "lane": "normal", "ü": "🙂"}, "group_id": "pair-" + rng.choice(TEXT),
            "source": rng.choice(list(Source))}
    changes = {k: pool[k] for k in rng.sample(sorted(pool), rng.randrange(len(pool) + 1))}
    per_sample = {i: {"advantage": rng.choice([None, 0.0, 1.25, -3.5e-7])} for i in range(len(g.samples))
                  if rng.random() < 0.7}
    for ch in per_sample.values():
        if rng.random() < 0.3:
            ch["metadata"] = {"x": "y"}
    return changes, per_sample


def updated(g: ExperienceGroup, changes: dict, per_sample: dict) -> ExperienceGroup:
    samples = [replace(s, **per_sample.get(i, {})) for i, s in enumerate(g.samples)]
    return replace(g, **changes, samples=samples)


def codecs():
    return [make_codec(None), make_codec(f"mock://skim-{next(_MOCK)}")]


def _same_view(view: GroupView, rec: ExperienceGroup) -> None:
    assert (view.group_id, view.task_id, view.source, view.explorer_id, view.metadata) == (
        rec.group_id, rec.task_id, rec.source, rec.explorer_id, rec.metadata)
    assert view.prompt_len == len(rec.prompt_ids) and view.size == len(rec.samples)
    for sv, s in zip(view.samples, rec.samples):
        assert [getattr(sv, k) for k in SAMPLE_FIELDS] == [getattr(s, k) for k in SAMPLE_FIELDS]
        assert (sv.response_len, sv.logprobs_len, sv.mask_len) == (
            len(s.response_ids), len(s.logprobs), len(s.loss_mask))


@pytest.mark.parametrize("codec", codecs(), ids=["single-object", "confluent"])
def test_splice_is_byte_identical_to_a_full_encode(codec):
    rng = random.Random(11)
    read = GroupReader(codec)
    full = codec.deserializer()
    for i in range(300):
        g = random_group(rng)
        data = codec.encode(g, None)
        rec = full(data)
        view = read(data)
        assert isinstance(view, GroupView) and view.skim is not None, i  # canonical bytes always skim
        _same_view(view, rec)
        changes, per_sample = random_changes(rng, rec)
        assert read.write(view, changes, per_sample) == codec.encode(updated(rec, changes, per_sample), None), (i, changes)


def test_confluent_output_framing_before_and_after_the_subject_is_known():
    """Input single-object, output through a registry: the first splice falls back to a full encode
    (the schema id is not known yet), later ones splice; both equal codec.encode."""
    plain, cf = make_codec(None), make_codec(f"mock://skim-{next(_MOCK)}")
    rng = random.Random(3)
    read = GroupReader(cf)
    for _ in range(3):
        g = random_group(rng)
        change, per_sample = {"metadata": {"lane": "priority"}}, {i: {"advantage": 1.0} for i in range(len(g.samples))}
        out = read.write(read(plain.encode(g, None)), change, per_sample)
        assert out[0] == 0 and out == cf.encode(updated(g, change, per_sample), None)


def test_promoted_copy_is_a_group_of_one_spliced_from_the_bytes():
    codec = make_codec(None)
    rng = random.Random(5)
    g = random_group(rng)
    g.samples = [random_sample(rng) for _ in range(3)]
    read = GroupReader(codec)
    view = read(codec.encode(g, None))
    s = g.samples[1]
    changes = {"group_id": f"{g.group_id}:expert", "survivors": [], "metadata": {**g.metadata, "promoted": "1"}}
    out = read.single(view, 1, changes, {"experience_id": f"{s.experience_id}:expert", "advantage": None})
    want = replace(g, **changes, samples=[replace(s, experience_id=f"{s.experience_id}:expert", advantage=None)])
    assert out == codec.encode(want, None)
    assert read.write(view, {}, {}) == codec.encode(g, None)  # the view itself is untouched


def _varint(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def _other_writers(e: Experience) -> dict[str, tuple[str, bytes]]:
    """sample field -> (case, encoding): valid Avro that fastavro would not write (so a splice would not be exact)."""
    lp = b"".join(struct.pack("<f", v) for v in e.logprobs)
    mask = bytes(e.loss_mask)
    r = e.response_ids
    return {
        "multi_block_floats": ("logprobs", _varint(-3) + _varint(12) + lp[:12] + _varint(5) + lp[12:] + b"\x00"),
        "multi_block_bools": ("loss_mask", _varint(2) + mask[:2] + _varint(6) + mask[2:] + b"\x00"),
        "sized_block_ints": ("response_ids", _varint(-8) + _varint(len(b"".join(map(_varint, r))))
                             + b"".join(map(_varint, r)) + b"\x00"),
        "non_minimal_varint": ("response_ids", _varint(8) + b"\x82\x00" + b"".join(map(_varint, r[1:])) + b"\x00"),
        "boolean_two": ("loss_mask", _varint(8) + b"\x02" + mask[1:] + b"\x00"),
        "two_map_blocks": ("metadata", _varint(1) + _varint(1) + b"a" + _varint(1) + b"1"
                           + _varint(1) + _varint(1) + b"b" + _varint(1) + b"2" + b"\x00"),
        "duplicate_map_key": ("metadata", _varint(2) + (_varint(1) + b"a" + _varint(1) + b"1") * 2 + b"\x00"),
        "union_index_non_minimal": ("reward", b"\x82\x00" + struct.pack("<d", 1.0)),
        "union_index_negative": ("advantage", b"\x01" + struct.pack("<d", 0.5)),
        "non_minimal_model_version": ("model_version", b"\x8a\x00"),
    }


def _odd_group() -> ExperienceGroup:
    e = Experience(response_ids=[5, 150_000, 7, 8, 9, 10, 11, 12], logprobs=[-0.5] * 8, loss_mask=[True, False] * 4,
                   reward=1.0, model_version=5, metadata={"k": "v"})
    return ExperienceGroup(group_id="g", task_id="t", explorer_id="x", prompt_ids=[3, 4],
                           samples=[e, replace(e, experience_id="other", reward=0.0)])


@pytest.mark.parametrize("case", [*_other_writers(_odd_group().samples[0]), "samples_in_blocks"])
def test_other_writers_layouts_fall_back_to_a_full_decode(case):
    codec = make_codec(None)
    g = _odd_group()
    data = codec.encode(g, None)
    skimmer = Skimmer(codec, ExperienceGroup)
    sk = skimmer.skim(data)
    if case == "samples_in_blocks":
        items = sk.items["samples"]
        first, second = (data[it.offsets[0]:it.offsets[-1]] for it in items)
        i = skimmer.plan.index["samples"]
        enc = _varint(-1) + _varint(len(first)) + first + _varint(1) + second + b"\x00"
        odd = data[:sk.offsets[i]] + enc + data[sk.offsets[i + 1]:]
    else:
        name, enc = _other_writers(g.samples[0])[case]
        item = sk.items["samples"][0]
        j = skimmer.plan.nested["samples"].index[name]
        odd = data[:item.offsets[j]] + enc + data[item.offsets[j + 1]:]
    rec = codec.decode(odd)  # valid Avro: fastavro reads it
    assert skimmer.skim(odd) is None
    read = GroupReader(codec)
    view = read(odd)
    assert view.record is not None and view.skim is None
    _same_view(view, rec)
    changes, per_sample = {"priority": 2.0, "metadata": {**rec.metadata, "lane": "normal"}}, {0: {"advantage": -1.0}}
    assert read.write(view, changes, per_sample) == codec.encode(updated(rec, changes, per_sample), None)


def test_older_writer_schema_is_decoded_not_skimmed(tmp_path: Path):
    shutil.copytree(SCHEMA_DIR, tmp_path / "s", ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    current = get_store().current("ExperienceGroup").raw
    old = json.loads(json.dumps(current))
    old["fields"] = [f for f in old["fields"] if f["name"] not in ("metadata", "priority")]
    hist = tmp_path / "s" / "history" / "ExperienceGroup"
    (hist / "v1.avsc").write_text(json.dumps(old))
    (hist / "v2.avsc").write_text(json.dumps(current))
    store = SchemaStore(tmp_path / "s")
    v1 = store.history("ExperienceGroup")[0]
    g = random_group(random.Random(1))
    datum = {k: v for k, v in g.to_avro().items() if k not in ("metadata", "priority")}
    fo = io.BytesIO(b"\xc3\x01" + v1.fingerprint)
    fo.seek(10)
    schemaless_writer(fo, v1.fast, datum)
    codec = Codec(store=store)
    read = GroupReader(codec)
    view = read(fo.getvalue())
    assert view.skim is None and view.record is not None
    want = replace(g, metadata={"lane": "normal"}, priority=3.0)
    assert read.write(view, {"metadata": {"lane": "normal"}, "priority": 3.0}, {}) == codec.encode(want, None)


def _no_skim(codec) -> GroupReader:
    read = GroupReader(codec)
    read.skimmer.plan = None  # the reference: every record decoded in full, as before the skim existed
    return read


SC = StreamsConfig(max_tokens=1 << 20, reward_min=-1e9, reward_max=1e9)


def _verdict(read: GroupReader, data: bytes):
    v = read_group(data, read, 1 << 20)
    drops = {i: (d.reason, d.detail) for i, d in sample_drops(v.group, 10, SC).items()} if v.ok else None
    return v, drops


def _same_verdicts(read, ref, data: bytes) -> None:
    (got, got_drops), (want, want_drops) = _verdict(read, data), _verdict(ref, data)
    assert (got.reason, got.detail, got_drops) == (want.reason, want.detail, want_drops), data
    if got.group is not None:
        a, b = got.group, want.group
        assert [repr(getattr(s, k)) for s in a.samples for k in SAMPLE_FIELDS] == [
            repr(getattr(s, k)) for s in b.samples for k in SAMPLE_FIELDS]  # (NaN != NaN)
        per = {i: {"advantage": 0.5} for i in range(a.size)}
        if got.ok or a.skim is not None:  # (a float32 NaN is not skimmed: it may not survive decode+encode)
            assert read.write(a, {"priority": 1.0}, per) == ref.write(b, {"priority": 1.0}, per)


@pytest.mark.parametrize("codec", codecs(), ids=["single-object", "confluent"])
def test_poison_gets_the_verdict_of_a_full_decode(codec):
    rng = random.Random(9)
    read, ref = GroupReader(codec), _no_skim(codec)
    codec.encode(Task(taskset="s", prompt="p"), None)

    def good(**kw):
        g = random_group(rng)
        g.group_id, g.prompt_ids = "g" + str(rng.random()), [1, 2, 3]
        samples = []
        for i in range(rng.choice([1, 2, 4])):
            n = rng.choice([1, 8, 300])
            samples.append(Experience(experience_id=f"e{i}", response_ids=[rng.randrange(70_000) for _ in range(n)],
                                      logprobs=[-1.0] * n, loss_mask=[True] * n, reward=0.5, model_version=3))
        samples[0] = replace(samples[0], **kw)
        g.samples = samples
        return codec.encode(g, None)

    valid = [good() for _ in range(12)]
    cases = [b"", b"hello", b"\xc3\x01" + b"\x11" * 8 + b"body", b"\x00\x00\x00\x00\x07garbage",
             codec.encode(Task(taskset="s", prompt="p"), None), good(reward=float("-inf")), good(logprobs=[0.5]),
             good(response_ids=[1, 2], logprobs=[float("nan"), -1.0], loss_mask=[True, True]),
             good(response_ids=[1, 2], logprobs=[float("inf"), -1.0], loss_mask=[True, True]),
             good(model_version=99)]
    for data in valid[:3]:
        cases += [data[:cut] for cut in range(len(data))] + [data + b"\x00"]
    for _ in range(3000):
        m = bytearray(rng.choice(valid))
        for _ in range(rng.randrange(1, 4)):
            m[rng.randrange(5, len(m))] = rng.choice([0, 1, 2, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        cases.append(bytes(m))
    reasons, skimmed = set(), 0
    for data in cases:
        _same_verdicts(read, ref, data)
        v, drops = _verdict(read, data)
        reasons |= {v.reason} | {r for r, _ in (drops or {}).values()}
        skimmed += v.group is not None and v.group.skim is not None
    assert {None, "malformed", "schema", "length_mismatch", "non_finite_reward", "unknown_version"} <= reasons
    assert skimmed > 500  # many mutations stay valid Avro (flipped text, floats, ids): those take the skim path


def test_ten_byte_token_varints_are_left_to_the_full_decode():
    """Canonical but rare (|id| >= 2^62): the vectorised scan declines them rather than special-casing."""
    codec = make_codec(None)
    g = ExperienceGroup(group_id="g", task_id="t", explorer_id="x", prompt_ids=[1], samples=[
        Experience(response_ids=[3, -(2**63), 2**63 - 1], logprobs=[-1.0] * 3, loss_mask=[True] * 3, reward=0.0,
                   model_version=0)])
    data = codec.encode(g, None)
    assert Skimmer(codec, ExperienceGroup).skim(data) is None
    read = GroupReader(codec)
    view = read(data)
    assert view.record is not None
    assert read.write(view, {}, {0: {"advantage": 1.0}}) == codec.encode(updated(g, {}, {0: {"advantage": 1.0}}), None)
