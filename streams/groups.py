"""Open GRPO groups of one input partition, held in memory until all n samples have arrived.

Why memory and not a Faust table: the samples' Kafka events stay unacked while their group is open,
so the committed offset never passes an open group; after a crash or rebalance the group is rebuilt
by replaying the input. That avoids writing every ~10 KB experience to a changelog a second time.
`done` remembers which input records already produced output (replay dedupe, bounded by time).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from rftbus.streams.verify import ExperienceView


@dataclass(slots=True)
class Sample:
    exp: ExperienceView  # scalar fields + array lengths; the arrays stay in `data`
    data: bytes  # the bytes as read (the original, for rejections)
    key: bytes | None
    src: str  # identity of the input record: "topic/partition/offset" of the raw record
    event: Any = None  # the Faust event, acked when the group is closed
    dropped: tuple[str, str] | None = None  # (reason, detail) of a per-experience filter


@dataclass(slots=True)
class OpenGroup:
    group_id: str
    group_size: int
    first_s: float = field(default_factory=time.monotonic)
    samples: dict[int, Sample] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return len(self.samples) >= self.group_size


class AddResult:
    WAITING = "waiting"
    COMPLETE = "complete"
    REPLAY = "replay"  # this very record is already in the group (re-delivered)
    DUPLICATE = "duplicate"  # another record with the same sample index / experience id
    CLOSED = "closed"  # the group was already emitted or timed out


class GroupBook:
    """Open groups plus recently closed ones (for late and duplicate samples) of one partition."""

    def __init__(self, dedupe_window_s: float):
        self.window = dedupe_window_s
        self.open: dict[str, OpenGroup] = {}
        self.done: OrderedDict[str, float] = OrderedDict()  # input src -> when its output went out
        self.closed: OrderedDict[str, tuple[str, float]] = OrderedDict()  # group_id -> (why, when)

    def add(self, s: Sample) -> tuple[str, OpenGroup | None]:
        gid = s.exp.group_id
        if gid in self.closed:
            return AddResult.CLOSED, None
        g = self.open.get(gid)
        if g is None:
            g = self.open[gid] = OpenGroup(gid, s.exp.group_size)
        if s.exp.group_size != g.group_size:
            return AddResult.DUPLICATE, g  # conflicting group_size: not a member of this group
        held = g.samples.get(s.exp.sample_index)
        if held is not None:
            return (AddResult.REPLAY if held.src == s.src else AddResult.DUPLICATE), g
        if any(h.exp.experience_id == s.exp.experience_id for h in g.samples.values()):
            return AddResult.DUPLICATE, g
        g.samples[s.exp.sample_index] = s
        return (AddResult.COMPLETE if g.complete else AddResult.WAITING), g

    def close(self, g: OpenGroup, why: str) -> None:
        self.open.pop(g.group_id, None)
        now = time.monotonic()
        self.closed[g.group_id] = (why, now)
        for s in g.samples.values():
            self.done[s.src] = now

    def mark_done(self, src: str) -> None:
        self.done[src] = time.monotonic()

    def expired(self, timeout_s: float) -> list[OpenGroup]:
        cutoff = time.monotonic() - timeout_s
        return [g for g in self.open.values() if g.first_s < cutoff]

    def prune(self) -> None:
        cutoff = time.monotonic() - self.window
        for memo in (self.done, self.closed):
            while memo:
                k, v = next(iter(memo.items()))
                when = v if isinstance(v, float) else v[1]
                if when >= cutoff:
                    break
                memo.popitem(last=False)
