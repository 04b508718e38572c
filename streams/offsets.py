"""The commit-offset rule for the ingest partitions: never commit past an offset that was not acked.

faust-streaming 0.15.3 (`Consumer._new_offset`) treats its last committed offset as the last
*processed* offset, so when exactly one record right after it is unacked and later ones are acked, it
commits past that record (faust-streaming issue #606; the fix proposed in PR #707 is not released).
The ingest agent acks in offset order, so a record is unacked there only when Faust never delivered
it: around a rebalance it drops fetched records on several paths (redelivery.py). The delivery guard
fetches such a hole again; this rule keeps the committed offset from passing it meanwhile, so a crash
before the re-read loses nothing. It commits only a run of acked offsets that starts at the next
offset to read: the last commit, or (before any commit) the first offset this worker saw in the
partition since it was assigned. tests/integration/test_offsets.py fails on Faust's own rule.

`_ReadOffsets` below switches off Faust's drop of re-read records for the same topics (see its doc).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from faust.transport.consumer import Consumer
from faust.utils.functional import consecutive_numbers

FIRST_SEEN: dict[Any, int] = {}  # TP -> first offset delivered since assignment (ingest topics only)
GUARDED: set[str] = set()  # topics whose TPs follow this rule
_original = Consumer._new_offset


def _new_offset(self: Consumer, tp: Any) -> int | None:
    if tp.topic not in GUARDED:
        return _original(self, tp)
    base = FIRST_SEEN.get(tp)
    acked = self._acked[tp]
    if base is None or not acked:
        return None
    gap_for_tp = self._gap[tp]
    if gap_for_tp:  # offsets Faust knows are absent (transaction markers, compaction) count as acked
        max_offset = max(acked)
        spans = sorted(gap_for_tp.overlap(0, max_offset), key=lambda x: x.begin)
        if spans:
            extra = [o for s in spans for o in range(s.begin, s.end)]
            acked.extend(extra)
            gap_for_tp.chop(0, max(extra[-1], max_offset + 1))
    acked.sort()
    committed = self._committed_offset[tp]
    # After a (re)assignment Faust sets the committed offset from the broker; records fetched before a
    # rebalance may still be queued, so the first offset *seen* is only trusted when nothing was committed.
    head = committed if committed is not None else base
    if acked[0] > head:
        return None  # the record at `head` is still held
    batch = next(consecutive_numbers(acked))
    acked[: len(batch)] = []
    self._acked_index[tp].difference_update(batch)
    return batch[-1] + 1


class _ReadOffsets(defaultdict):
    """Faust drops a fetched record whose offset is below the last one it delivered (its read mark).
    After a rebalance a partition is re-read from the commit, but records still buffered from before the
    seek raise that mark first, and the re-read records are then dropped; the delivery guard would seek
    back, and the same race could drop them again. For the ingest topics nothing is dropped this way:
    a record delivered twice is skipped downstream (recovery.py, `Landed.done`). Measured without it: the
    two-worker kill test lost 84 of 2,000 (with held groups, before the group record). The guard resets
    the mark when it seeks back, but records fetched before a rebalance can raise it again before the
    re-read arrives, so the drop stays off rather than raced."""

    def __getitem__(self, tp: Any) -> Any:
        if tp.topic in GUARDED:
            return None
        return super().__getitem__(tp)


_original_init = Consumer.__init__


def _init(self: Consumer, *args: Any, **kwargs: Any) -> None:
    _original_init(self, *args, **kwargs)
    self._read_offset = _ReadOffsets(lambda: None, self._read_offset)


def install(topics: set[str]) -> None:
    GUARDED.update(topics)
    Consumer._new_offset = _new_offset  # type: ignore[method-assign]  # the patch, by design
    Consumer.__init__ = _init  # type: ignore[method-assign]


def seen_before(tp: Any) -> bool:
    return tp in FIRST_SEEN


def seen(tp: Any, offset: int) -> None:
    """The first offset of tp since its assignment: where the commit rule counts from while nothing was
    committed (the ingest agent passes the partition's log start when it is earlier: see redelivery.py)."""
    if tp not in FIRST_SEEN:
        FIRST_SEEN[tp] = offset


def forget(tps: set[Any]) -> None:
    for tp in tps:
        FIRST_SEEN.pop(tp, None)
