"""The trainer's own exactly-once: an experience id it has decided is never trained again.

The streams dedupe their input, but a record can still reach a lane twice (written again by a producer retry,
by hand on the other lane, keyed differently) and a group can name one experience twice; the run summary would
only find it after the model had trained on it (#36). So the trainer remembers the ids it decided (trained or
rejected), the newest `trainer.dedupe_window` of them, seeded at start from the lineage the checkpoint kept
(what the restored weights have seen), and rejects a repeat as `duplicate` before any tensor is built.
Pure logic, unit-tested; the trainer test sends the same record on both lanes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

Key = tuple[str, int, int]  # (topic, partition, offset) of the record that claimed an id


class TrainedIds:
    def __init__(self, window: int):
        self.window = window
        self._done: OrderedDict[str, None] = OrderedDict()  # decided ids, oldest first
        self._claims: dict[str, Key] = {}  # ids of records read but not finished yet
        self._by_record: dict[Key, list[str]] = {}

    def seed(self, lineage: Iterable[dict]) -> int:
        n = 0
        for line in lineage:
            for i in line.get("experience_ids", []):
                self._remember(i)
                n += 1
        return n

    def claim(self, key: Key, ids: list[str]) -> tuple[list[int], list[tuple[int, str]]]:
        """(positions in `ids` that may train, [(position, why)] of repeats). A record claims its ids until
        it is finished; a second record (or a second sample) with a claimed or decided id is a repeat."""
        ok: list[int] = []
        dup: list[tuple[int, str]] = []
        mine = self._by_record.setdefault(key, [])
        for k, i in enumerate(ids):
            if i in self._done:
                dup.append((k, f"experience {i[:80]} was already trained or rejected"))
            elif i in self._claims:
                where = self._claims[i]
                what = "this record" if where == key else f"{where[0]}[{where[1]}]@{where[2]}"
                dup.append((k, f"experience {i[:80]} is already pending in {what}"))
            else:
                self._claims[i] = key
                mine.append(i)
                ok.append(k)
        return ok, dup

    def finish(self, key: Key) -> None:
        """The record is done (trained, rejected or both): its ids are decided."""
        for i in self._by_record.pop(key, []):
            self._claims.pop(i, None)
            self._remember(i)

    def _remember(self, i: str) -> None:
        self._done[i] = None
        self._done.move_to_end(i)
        while len(self._done) > self.window:
            self._done.popitem(last=False)

    def __len__(self) -> int:
        return len(self._done)
