"""Which task offsets may be committed: those whose every produced record Kafka has acknowledged.

Per partition, offsets are handled in order; an offset is committable once it is sealed (no more
records will be produced for it) and all its deliveries succeeded, and so is everything before it.
"""

from __future__ import annotations

from collections import OrderedDict


class DeliveryFailed(RuntimeError):
    """The idempotent producer gave up on a record: the explorer must stop, not commit past it."""


class AckTracker:
    def __init__(self):
        self._parts: dict[int, OrderedDict[int, list]] = {}  # partition -> offset -> [outstanding, sealed]

    def begin(self, partition: int, offset: int) -> None:
        self._parts.setdefault(partition, OrderedDict())[offset] = [0, False]

    def expect(self, partition: int, offset: int):
        """Count one record produced for this task offset; returns its delivery callback."""
        entry = self._parts[partition][offset]
        entry[0] += 1

        def on_delivery(err, msg):
            if err is not None:
                raise DeliveryFailed(f"delivery to {msg.topic()} failed: {err.str()}")
            entry[0] -= 1
        return on_delivery

    def seal(self, partition: int, offset: int) -> None:
        self._parts[partition][offset][1] = True

    def committable(self) -> dict[int, int]:
        """partition -> next offset to commit, for the acknowledged prefix (removed from tracking)."""
        out = {}
        for p, entries in self._parts.items():
            while entries:
                off, (outstanding, sealed) = next(iter(entries.items()))
                if outstanding or not sealed:
                    break
                entries.popitem(last=False)
                out[p] = off + 1
        return out

    def unacked_groups(self) -> int:
        """Groups with records Kafka has not acknowledged yet (not visible in end offsets)."""
        return sum(1 for e in self._parts.values() for outstanding, _ in e.values() if outstanding)

    def outstanding_groups(self) -> int:
        return sum(len(e) for e in self._parts.values())

    def drop(self, partitions: list[int]) -> None:
        for p in partitions:
            self._parts.pop(p, None)
