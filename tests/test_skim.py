"""Skim + splice (schemas/skim.py, streams/verify.py): the curated bytes are exactly a full re-encode, and
bad or unusual bytes get exactly the verdict a full decode gives."""

from __future__ import annotations

import io
import itertools
import json
import random
import shutil
import struct
from pathlib import Path

import pytest
from fastavro import schemaless_writer

from rftbus.schemas import Codec, Experience, SchemaStore, Source, Task, get_store, make_codec
from rftbus.schemas.skim import Skimmer
from rftbus.schemas.store import SCHEMA_DIR
from rftbus.streams.verify import ARRAYS, FIELDS, ExperienceReader, ExperienceView, decode_experience

_MOCK = itertools.count()
TEXT = ["", "a", "héllo wörld", "🙂 emoji", "日本語のテキスト", "e\u0301", "x" * 300, "\u2028 \x00 nul"]
IDS = [0, 1, 48, 63, 64, 127, 128, 150_000, 2**20, 2**31 - 1, -1, -64, -65, -(2**31), 2**40, -(2**62)]


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def random_experience(rng: random.Random) -> Experience:
    def ids(n):
        if rng.random() < 0.5:
            return [rng.randrange(50) for _ in range(n)]
        return [rng.choice(IDS) if rng.random() < 0.3 else rng.randrange(200_000) for _ in range(n)]

    n = rng.choice([0, 1, 2, 7, 64, 300, 1000])
    text = lambda: rng.choice(TEXT) if rng.random() < 0.8 else None  # noqa: E731
    return Experience(
        experience_id=rng.choice(TEXT) + str(rng.random()), group_id=rng.choice(TEXT), task_id=rng.choice(TEXT),
        sample_index=rng.choice([0, 1, 7, -1, 2**31 - 1, 2**40]), group_size=rng.choice([1, 8, 0, -(2**31)]),
        prompt_ids=ids(rng.choice([0, 3, 64])), response_ids=ids(n),
        logprobs=[f32(-rng.random() * 9) for _ in range(n + rng.choice([0, 0, 0, -1, 1]) if n else 0)],
        loss_mask=[rng.random() < 0.7 for _ in range(n)],
        reward=rng.choice([None, 0.0, 1.0, -0.0, rng.random(), 1e300]),
        reward_components=rng.choice([{}, {"acc": 1.0}, {t: rng.random() for t in TEXT[:5]}]),
        advantage=rng.choice([None, 0.5, -2.0]), priority=rng.choice([0.0, rng.random()]),
        model_version=rng.choice([0, 5, -1, 2**63 - 1, -(2**63)]), source=rng.choice(list(Source)),
        explorer_id=rng.choice(TEXT), prompt_text=text(), response_text=text(), finish_reason=text(),
        generation_ms=rng.random() * 100, reward_ms=rng.choice([0.0, 1e-310, float("inf")]),
        created_at=rng.choice([0, 1_700_000_000_000, -1, 2**62]),
        metadata=rng.choice([{}, {"k": "v"}, {t: t for t in TEXT}]))


def random_changes(rng: random.Random, e: Experience) -> dict:
    pool = {"advantage": rng.choice([None, 0.0, 1.25, -3.5e-7]), "priority": rng.random(),
            "metadata": {**e.metadata, "group_survivors": str(rng.randrange(9)), "lane": "normal", "ü": "🙂"},
            "experience_id": e.experience_id + ":expert", "reward": rng.choice([None, 0.25]),
            "group_id": "pair-" + rng.choice(TEXT), "source": rng.choice(list(Source)), "model_version": 2**33}
    return {k: pool[k] for k in rng.sample(sorted(pool), rng.randrange(len(pool) + 1))}


def codecs():
    return [make_codec(None), make_codec(f"mock://skim-{next(_MOCK)}")]


def updated(e: Experience, changes: dict) -> Experience:
    return Experience(**{**e.to_avro(), **changes})


def apply(view: ExperienceView, changes: dict) -> ExperienceView:
    for k, v in changes.items():
        setattr(view, k, v)
    return view


@pytest.mark.parametrize("codec", codecs(), ids=["single-object", "confluent"])
def test_splice_is_byte_identical_to_a_full_encode(codec):
    rng = random.Random(11)
    read = ExperienceReader(codec)
    full = codec.deserializer()
    skimmed = 0
    for i in range(400):
        e = random_experience(rng)
        data = codec.encode(e)
        rec = full(data)
        view = read(data)
        assert isinstance(view, ExperienceView) and view._skim is not None, i  # canonical bytes always skim
        skimmed += 1
        assert {k: getattr(view, k) for k in FIELDS} == {k: getattr(rec, k) for k in FIELDS}
        assert view.lengths == {k: len(getattr(rec, k)) for k in ARRAYS}
        changes = random_changes(rng, rec)
        want = codec.encode(updated(rec, changes))
        assert apply(view, changes).to_bytes() == want, (i, changes)
        assert view.record() == updated(rec, changes)
    assert skimmed == 400


def test_confluent_output_framing_before_and_after_the_subject_is_known():
    """Input single-object, output through a registry: the first splice falls back to a full encode
    (the schema id is not known yet), later ones splice; both equal codec.encode."""
    plain, cf = make_codec(None), make_codec(f"mock://skim-{next(_MOCK)}")
    rng = random.Random(3)
    read = ExperienceReader(cf)
    for _ in range(3):
        e = random_experience(rng)
        view = apply(read(plain.encode(e)), {"advantage": 1.0, "metadata": {"lane": "priority"}})
        out = view.to_bytes()
        assert out[0] == 0 and out == cf.encode(updated(e, {"advantage": 1.0, "metadata": {"lane": "priority"}}))


def test_promoted_copy_splices_id_and_metadata():
    codec = make_codec(None)
    e = random_experience(random.Random(5))
    view = ExperienceReader(codec)(codec.encode(e))
    view.advantage, view.priority = 0.75, 1.5
    copy = view.copy(experience_id=f"{e.experience_id}:expert", metadata={**view.metadata, "promoted": "1"})
    assert copy.to_bytes() == codec.encode(updated(e, {
        "advantage": 0.75, "priority": 1.5, "experience_id": f"{e.experience_id}:expert",
        "metadata": {**e.metadata, "promoted": "1"}}))
    assert view.to_bytes() == codec.encode(updated(e, {"advantage": 0.75, "priority": 1.5}))  # original untouched


def _varint(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def _other_writers(e: Experience) -> dict[str, tuple[str, bytes]]:
    """field -> (case, encoding): valid Avro that fastavro would not write (so a splice would not be exact)."""
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


@pytest.mark.parametrize("case", list(_other_writers(Experience(
    group_id="g", task_id="t", sample_index=0, group_size=2, prompt_ids=[], response_ids=[1] * 8,
    logprobs=[0.0] * 8, loss_mask=[True] * 8, model_version=0, explorer_id="x"))))
def test_other_writers_layouts_fall_back_to_a_full_decode(case):
    codec = make_codec(None)
    e = Experience(group_id="g", task_id="t", sample_index=1, group_size=2, prompt_ids=[3, 4],
                   response_ids=[5, 150_000, 7, 8, 9, 10, 11, 12], logprobs=[-0.5] * 8,
                   loss_mask=[True, False] * 4, reward=1.0, model_version=5, explorer_id="x", metadata={"k": "v"})
    data = codec.encode(e)
    skimmer = Skimmer(codec, Experience)
    sk = skimmer.skim(data)
    name, enc = _other_writers(e)[case]
    i = skimmer.plan.index[name]
    odd = data[:sk.offsets[i]] + enc + data[sk.offsets[i + 1]:]
    rec = codec.decode(odd)  # valid Avro: fastavro reads it
    assert skimmer.skim(odd) is None
    view = ExperienceReader(codec)(odd)
    assert view._record is not None and view.lengths == {k: len(getattr(rec, k)) for k in ARRAYS}
    changes = {"advantage": -1.0, "priority": 2.0, "metadata": {**rec.metadata, "lane": "normal"}}
    assert apply(view, changes).to_bytes() == codec.encode(updated(rec, changes))


def test_older_writer_schema_is_decoded_not_skimmed(tmp_path: Path):
    shutil.copytree(SCHEMA_DIR, tmp_path / "s", ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    current = get_store().current("Experience").raw
    old = json.loads(json.dumps(current))
    old["fields"] = [f for f in old["fields"] if f["name"] not in ("metadata", "finish_reason")]
    hist = tmp_path / "s" / "history" / "Experience"
    (hist / "v1.avsc").write_text(json.dumps(old))
    (hist / "v2.avsc").write_text(json.dumps(current))
    store = SchemaStore(tmp_path / "s")
    v1 = store.history("Experience")[0]
    e = random_experience(random.Random(1))
    datum = {k: v for k, v in e.to_avro().items() if k not in ("metadata", "finish_reason")}
    fo = io.BytesIO(b"\xc3\x01" + v1.fingerprint)
    fo.seek(10)
    schemaless_writer(fo, v1.fast, datum)
    codec = Codec(store=store)
    view = ExperienceReader(codec)(fo.getvalue())
    assert view._skim is None and view._record is not None
    want = updated(e, {"metadata": {"lane": "normal"}, "finish_reason": None, "advantage": 3.0})
    assert apply(view, {"metadata": {"lane": "normal"}, "advantage": 3.0}).to_bytes() == codec.encode(want)


def _no_skim(codec) -> ExperienceReader:
    read = ExperienceReader(codec)
    read.skimmer.plan = None  # the reference: every record decoded in full, as before the skim existed
    return read


def _same_verdicts(read, ref, data: bytes) -> None:
    got, want = decode_experience(data, read, 1 << 20), decode_experience(data, ref, 1 << 20)
    assert (got.reason, got.detail) == (want.reason, want.detail), data
    if got.experience is not None:
        a, b = got.experience, want.experience
        assert [repr(getattr(a, k)) for k in FIELDS] == [repr(getattr(b, k)) for k in FIELDS]  # (NaN != NaN)
        assert (a.lengths, a.logprobs_finite) == (b.lengths, b.logprobs_finite)
        a.advantage = b.advantage = 0.5
        if got.ok or a._skim is not None:  # (a float32 NaN is not skimmed: it may not survive decode+encode)
            assert a.to_bytes() == b.to_bytes()


@pytest.mark.parametrize("codec", codecs(), ids=["single-object", "confluent"])
def test_poison_gets_the_verdict_of_a_full_decode(codec):
    rng = random.Random(9)
    read, ref = ExperienceReader(codec), _no_skim(codec)
    codec.encode(Task(taskset="s", prompt="p"))

    def good(**kw):
        e = random_experience(rng)
        n = rng.choice([1, 8, 300])
        e.sample_index, e.group_size, e.reward = 1, 8, 0.5
        e.response_ids, e.logprobs, e.loss_mask = [rng.randrange(70_000) for _ in range(n)], [-1.0] * n, [True] * n
        for k, v in kw.items():
            setattr(e, k, v)
        return codec.encode(e)

    valid = [good() for _ in range(12)]
    cases = [b"", b"hello", b"\xc3\x01" + b"\x11" * 8 + b"body", b"\x00\x00\x00\x00\x07garbage",
             codec.encode(Task(taskset="s", prompt="p")), good(reward=float("-inf")), good(logprobs=[0.5]),
             good(response_ids=[1, 2], logprobs=[float("nan"), -1.0], loss_mask=[True, True]),
             good(response_ids=[1, 2], logprobs=[float("inf"), -1.0], loss_mask=[True, True])]
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
        v = decode_experience(data, read, 1 << 20)
        reasons.add(v.reason)
        skimmed += v.experience is not None and v.experience._skim is not None
    assert {None, "malformed", "schema", "length_mismatch", "non_finite_reward"} <= reasons
    assert skimmed > 500  # many mutations stay valid Avro (flipped text, floats, ids): those take the skim path


def test_ten_byte_token_varints_are_left_to_the_full_decode():
    """Canonical but rare (|id| >= 2^62): the vectorised scan declines them rather than special-casing."""
    codec = make_codec(None)
    e = Experience(group_id="g", task_id="t", sample_index=0, group_size=2, prompt_ids=[1],
                   response_ids=[3, -(2**63), 2**63 - 1], logprobs=[-1.0] * 3, loss_mask=[True] * 3,
                   reward=0.0, model_version=0, explorer_id="x")
    data = codec.encode(e)
    assert Skimmer(codec, Experience).skim(data) is None
    view = apply(ExperienceReader(codec)(data), {"advantage": 1.0})
    assert view._record is not None and view.to_bytes() == codec.encode(updated(e, {"advantage": 1.0}))
