"""Rejections bounded by construction (rftbus/ground/schemas/bounds.py): whatever the input carried, the rejection encodes
under the rejected topic's limit, names the input the same way every time, and keeps small inputs as they are."""

from __future__ import annotations

from rftbus.ground.schemas import bound_id, bound_key, fitted_rejection, make_codec, topic_context
from rftbus.ground.schemas.records import Rejection

ENCODE = make_codec(None).serializer(Rejection)
LIMIT = 1_000_000


def _size(rec: Rejection) -> int:
    return len(ENCODE(rec, topic_context("rft.experiences.rejected")))


def test_huge_ids_keys_and_originals_still_fit():
    huge = "e" * 16_000_000
    rec = fitted_rejection(max_bytes=LIMIT, reason="non_finite_advantage", stage="trainer", experience_id=huge,
                           experience_ids=[huge, huge + "2"], group_id="g" * 5_000_000, original=b"x" * 2_000_000,
                           detail="d" * 100_000, source_topic="t", partition=0, offset=7)
    assert _size(rec) < LIMIT and rec.original is None and "not copied" in rec.detail
    assert rec.experience_id == rec.experience_ids[0] == bound_id(huge) and len(rec.experience_id) < 200
    assert rec.experience_ids[1] != rec.experience_ids[0]  # distinct inputs stay distinct
    again = fitted_rejection(max_bytes=LIMIT, reason="r", stage="s", experience_id=huge)
    assert again.experience_id == rec.experience_id  # the same input, the same name (a rejection redone after a crash)
    key = bound_key(b"k" * 16_000_000)
    assert key is not None and len(key) < 200 and bound_key(b"k" * 16_000_000) == key


def test_small_inputs_are_kept_whole_and_evidence_copied_when_it_fits():
    rec = fitted_rejection(max_bytes=LIMIT, reason="malformed", stage="verify", experience_id="abc",
                           experience_ids=["abc"], original=b"\x00" * 500_000, rejection_id="r1")
    assert rec.experience_id == "abc" and rec.original == b"\x00" * 500_000 and rec.rejection_id == "r1"
    assert _size(rec) < LIMIT
    assert bound_key(b"group-1") == b"group-1" and bound_id(None) is None
    many = fitted_rejection(max_bytes=LIMIT, reason="r", stage="s", experience_ids=[f"e{i}" for i in range(10_000)])
    assert len(many.experience_ids) == 4096 and "10000 experiences" in many.detail
