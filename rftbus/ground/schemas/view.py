"""A group as the streams see it: scalar fields and array lengths, written back by splicing.

The stages never need a group's token arrays, only their lengths and that the logprobs are finite, so
a record written with the current schema is skimmed (rftbus/ground/schemas/skim.py) instead of decoded into lists,
and its outputs are the bytes as read with the changed fields spliced in (byte-identical to a full
re-encode, tests/unit/test_skim.py). Older writer schemas and other writers' block layouts are decoded and
encoded in full; bad bytes always are, so rejection reasons never depend on the skim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from rftbus.ground.schemas import AvroRecord, Codec, Experience, ExperienceGroup, Image, Source
from rftbus.ground.schemas.fastpath import zigzag_varint
from rftbus.ground.schemas.skim import Encoded, Skim, Skimmer


@dataclass(slots=True)
class SampleView:
    experience_id: str
    reward: float | None
    model_version: int
    metadata: dict[str, str]
    response_len: int
    logprobs_len: int
    mask_len: int
    logprobs_finite: bool


@dataclass(slots=True, eq=False)
class GroupView:
    group_id: str
    task_id: str
    source: Source
    explorer_id: str
    prompt_len: int
    samples: list[SampleView]
    metadata: dict[str, str]
    data: bytes  # the bytes as read
    skim: Skim | None = None  # set when the bytes were skimmed
    record: ExperienceGroup | None = None  # set when they were decoded in full
    created_at: int = 0  # ms, as the producer dated the group
    images: list[Image] = field(default_factory=list)  # the prompt's images (records; inline bytes included)

    @property
    def size(self) -> int:
        return len(self.samples)

    def ids(self, indices: list[int] | None = None) -> list[str]:
        return [self.samples[i].experience_id for i in (range(self.size) if indices is None else indices)]


class GroupReader:
    """bytes -> GroupView (skimmed when it can be, decoded in full otherwise) or the other record the
    bytes hold; DecodeError for bad bytes, from the full decode. Writes views back as bytes."""

    def __init__(self, codec: Codec):
        self.skimmer = Skimmer(codec, ExperienceGroup)
        self.decode_any = codec.deserializer()
        self.encode = codec.serializer(ExperienceGroup)

    def __call__(self, data: bytes) -> GroupView | AvroRecord | None:
        skim = self.skimmer.skim(data)
        if skim is not None:
            v = skim.values
            samples = [SampleView(s.values["experience_id"], s.values["reward"], s.values["model_version"],
                                  s.values["metadata"], s.lengths["response_ids"], s.lengths["logprobs"],
                                  s.lengths["loss_mask"], "logprobs" not in s.nonfinite)
                       for s in skim.items["samples"]]
            return GroupView(v["group_id"], v["task_id"], Source(v["source"]), v["explorer_id"],
                             skim.lengths["prompt_ids"], samples, v["metadata"], data, skim=skim,
                             created_at=int(v.get("created_at") or 0),
                             images=[Image(**i.values) for i in skim.items.get("images", [])])
        rec = self.decode_any(data, None)
        return self.view(rec, data) if isinstance(rec, ExperienceGroup) else rec

    @staticmethod
    def view(g: ExperienceGroup, data: bytes) -> GroupView:
        """The view of a decoded group (kept whole: its outputs are encoded, not spliced)."""
        samples = [SampleView(s.experience_id, s.reward, s.model_version, dict(s.metadata), len(s.response_ids),
                              len(s.logprobs), len(s.loss_mask), math.isfinite(sum(s.logprobs)))  # finite iff every term is
                   for s in g.samples]
        return GroupView(g.group_id, g.task_id, g.source, g.explorer_id, len(g.prompt_ids), samples,
                         dict(g.metadata), data, record=g, created_at=g.created_at, images=list(g.images))

    def full(self, view: GroupView) -> ExperienceGroup:
        """The whole record (decoded now if it was only skimmed)."""
        if view.record is not None:
            return view.record
        rec = self.decode_any(view.data, None)
        assert isinstance(rec, ExperienceGroup)
        return rec

    def write(self, view: GroupView, changes: dict[str, Any], sample_changes: dict[int, dict[str, Any]],
              ctx: Any = None) -> bytes:
        """The group with these field changes (and per sample index, sample field changes), encoded."""
        if view.skim is not None:
            out = self.skimmer.splice(view.skim, changes, {"samples": sample_changes}, ctx)
            if out is not None:
                return out
        g = self.full(view)
        samples = [replace(s, **sample_changes[i]) if i in sample_changes else s for i, s in enumerate(g.samples)]
        return _encoded(self.encode(replace(g, **changes, samples=samples), ctx))

    def single(self, view: GroupView, i: int, changes: dict[str, Any], sample_changes: dict[str, Any],
               ctx: Any = None) -> bytes:
        """A group of one: sample ``i`` of ``view`` with its changes, under the group's changed fields."""
        if view.skim is not None and self.skimmer.plan is not None:
            item = self.skimmer.plan.item_bytes(view.skim, "samples", i, sample_changes)
            samples = Encoded(zigzag_varint(1) + item + b"\x00")
            out = self.skimmer.splice(view.skim, {**changes, "samples": samples}, None, ctx)
            if out is not None:
                return out
        g = self.full(view)
        one: Experience = replace(g.samples[i], **sample_changes)
        return _encoded(self.encode(replace(g, **changes, samples=[one]), ctx))


def _encoded(data: bytes | None) -> bytes:
    assert data is not None  # (a record always encodes; only None is a tombstone)
    return data
