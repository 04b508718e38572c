"""The commit rule for the ingest partitions: never commit past an offset that was not acked.

faust-streaming 0.15.3 (`Consumer._new_offset`) treats its last committed offset as the last *processed*
offset, so when exactly one record right after it is unacked and later ones are acked, it commits past that
record (faust-streaming/faust#606). The ingest agent acks in offset order, so a record is unacked there only
when Faust never delivered it (holes.py fetches it again); this rule keeps the committed offset from passing
it meanwhile, so a crash before the re-read loses nothing. It commits only a run of acked offsets that starts
at the next offset to read: the last commit, or (before any commit) where this assignment began reading.
The override that routes Faust's commits here is transport.py's `commit_rule`.
"""

from __future__ import annotations

from typing import Any


def next_commit(consumer: Any, tp: Any, base: int | None) -> int | None:
    """The offset to commit for tp from Faust's bookkeeping (`_acked`, `_gap`, `_committed_offset`), or None.
    `base`: the first offset this assignment read (None: nothing seen yet, nothing to commit)."""
    from faust.utils.functional import consecutive_numbers  # (a worker's import: the package loads without Faust)

    acked = consumer._acked[tp]
    if base is None or not acked:
        return None
    gap_for_tp = consumer._gap[tp]
    if gap_for_tp:  # offsets Faust knows are absent (transaction markers, compaction) count as acked
        max_offset = max(acked)
        spans = sorted(gap_for_tp.overlap(0, max_offset), key=lambda x: x.begin)
        if spans:
            extra = [o for s in spans for o in range(s.begin, s.end)]
            acked.extend(extra)
            gap_for_tp.chop(0, max(extra[-1], max_offset + 1))
    acked.sort()
    committed = consumer._committed_offset[tp]
    # After a (re)assignment Faust sets the committed offset from the broker; records fetched before a
    # rebalance may still be queued, so the first offset *seen* is only trusted when nothing was committed.
    head = committed if committed is not None else base
    if acked[0] > head:
        return None  # the record at `head` is still held
    batch = next(consecutive_numbers(acked))
    acked[: len(batch)] = []
    consumer._acked_index[tp].difference_update(batch)
    return batch[-1] + 1
