"""A rocksdb table store that writes a change to disk only once the input that made it is committed.

Faust's rocksdb store writes a change at once, and its changelog position when the changelog record is acknowledged:
after a kill -9 the disk could hold a change whose input is read again (and, before rftbus/streams/state.py, one whose
changelog record never landed), so the worker wiped its tables after every unclean stop and Faust replayed every
changelog from the start; the cost of a crash grew with the tables. Here a change waits in memory (an overlay every
read sees) until the checkpoint commits its input; then it goes to rocksdb in one write batch with the changelog
offset it reflects. So rocksdb always holds the table as of committed inputs, and a restart, clean or not, reads
only the changelog past that offset (rftbus/streams/state.py skips the changes in it whose inputs are read again).

The overlay holds what changed in about one commit interval. Kafka Streams' stores, and quixstreams' (whose
`PartitionTransaction` writes a batch at the checkpoint with the processed offsets), have the same shape.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import rocksdict
from faust.stores import rocksdb
from faust.streams import current_event
from faust.types import TP


DELETED = object()  # an overlay entry for a key deleted since the last flush


@dataclass(slots=True)
class Change:
    seq: int
    key: bytes
    value: Any  # bytes, or DELETED
    input: tuple[str, int, int] | None  # the record that made it (None: made outside one: flushed with the next)
    changelog: int | None = None  # its changelog record's offset, once acknowledged


class CommittedStore(rocksdb.Store):
    """Faust's rocksdb store; writes wait for their inputs' commit (`committed`), reads see them at once."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.overlay: dict[int, dict[bytes, tuple[int, Any]]] = defaultdict(dict)  # partition -> key -> (seq, value)
        self.queue: dict[int, deque[Change]] = defaultdict(deque)  # partition -> changes in the order made
        self.unacked: dict[int, deque[Change]] = defaultdict(deque)  # partition -> changes awaiting their ack
        self.inputs_committed: dict[tuple[str, int], int] = {}
        self.seq = 0
        self.flushed = 0

    # -- writes ---------------------------------------------------------------------------------------------
    def _change(self, key: bytes, value: Any) -> None:
        event = current_event()  # (a table changes inside an agent: its record is the input)
        m = event.message if event is not None else None
        p = m.partition if m is not None else self._key_index[key]
        self.seq += 1
        ch = Change(self.seq, key, value, None if m is None else (m.topic, m.partition, m.offset))
        self.overlay[p][key] = (ch.seq, value)
        self.queue[p].append(ch)
        self.unacked[p].append(ch)
        self._key_index[key] = p

    def _set(self, key: bytes, value: bytes | None) -> None:
        self._change(key, value)

    def _del(self, key: bytes) -> None:
        self._change(key, DELETED)

    def changelog_acked(self, tp: TP, offset: int) -> None:
        """A changelog record of partition tp.partition landed at `offset` (acks come in send order per
        partition: the oldest change without one is its)."""
        waiting = self.unacked.get(tp.partition)
        if waiting:
            waiting.popleft().changelog = offset

    def committed(self, offsets: Mapping[Any, int]) -> int:
        """The checkpoint committed these inputs (tp -> next offset to read): write every change, in order, whose
        input is below its commit, with the changelog offset of the last one. Returns how many were written."""
        for tp, off in offsets.items():
            self.inputs_committed[(tp.topic, tp.partition)] = off
        written = 0
        for p, queue in self.queue.items():
            batch = rocksdict.WriteBatch(raw_mode=True)
            last: int | None = None
            while queue:
                ch = queue[0]
                if ch.changelog is None or (ch.input is not None and not self._done(ch.input)):
                    break
                queue.popleft()
                if ch.value is DELETED:
                    batch.delete(ch.key)
                else:
                    batch.put(ch.key, ch.value)
                last = ch.changelog
                if self.overlay[p].get(ch.key, (None,))[0] == ch.seq:  # no later change of the key waits
                    del self.overlay[p][ch.key]
                written += 1
            if last is not None:
                batch.put(self.offset_key, str(last).encode())
                self._db_for_partition(p).write(batch)
        self.flushed += written
        return written

    def _done(self, pos: tuple[str, int, int]) -> bool:
        at = self.inputs_committed.get((pos[0], pos[1]))
        return at is not None and pos[2] < at

    def revoke_partitions(self, table: Any, tps: set[TP]) -> None:
        """What waited for a commit is dropped with the partition: it is on the changelog, which the next owner
        (or this worker, given the partition again) recovers from."""
        for tp in tps:
            if tp.topic in table.changelog_topic.topics:
                for d in (self.overlay, self.queue, self.unacked):
                    d.pop(tp.partition, None)
        super().revoke_partitions(table, tps)

    # -- reads ----------------------------------------------------------------------------------------------
    def _pending(self, key: bytes) -> tuple[bool, Any]:
        """(found, value) in the overlay of the partition the key is read in (any partition outside an event)."""
        event = current_event()
        parts = [event.message.partition] if event is not None else list(self.overlay)
        for p in parts:
            found = self.overlay.get(p, {}).get(key)
            if found is not None:
                return True, found[1]
        return False, None

    def _get(self, key: bytes) -> bytes | None:
        found, value = self._pending(key)
        if found:
            return None if value is DELETED else value
        return super()._get(key)

    def _contains(self, key: bytes) -> bool:
        found, value = self._pending(key)
        if found:
            return value is not DELETED and value is not None
        return super()._contains(key)

    def _active_partitions(self) -> Iterator[tuple[int, Any]]:
        actives = self.app.assignor.assigned_actives()
        topic = self.table.changelog_topic_name  # type: ignore[attr-defined]
        for p, db in list(self._dbs.items()):
            if TP(topic=topic, partition=p) in actives or self.table.is_global:
                yield p, db

    def _iteritems(self) -> Iterator[tuple[bytes, bytes]]:
        for p, db in self._active_partitions():
            pending = dict(self.overlay.get(p, {}))
            for key, value in self._visible_items(db):
                if key not in pending:
                    yield key, value
            for key, (_, value) in pending.items():
                if value is not DELETED and value is not None:
                    yield key, value

    def _iterkeys(self) -> Iterator[bytes]:
        for key, _ in self._iteritems():
            yield key

    def _itervalues(self) -> Iterator[bytes]:
        for _, value in self._iteritems():
            yield value

    def _size(self) -> int:
        return sum(1 for _ in self._iteritems())
