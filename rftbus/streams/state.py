"""Tables whose changelog records know the input they were made for, and whose recovery skips the ones past the commit.

Faust writes a table change to its changelog at once, while the input record that made it is committed only later
(after the outputs land). A kill in between leaves a change in the changelog for an input that will be read again:
the replay then finds the table ahead of it. So it did (`rftbus chaos --every-event`): a live group released on
its last grade had its DONE marker on the changelog, the kill came before the grade's offset was committed, and the
replayed grade found the group released and was rejected as `feedback_expired`. Here every changelog record carries
the input's position (header `rftbus-input`, as quixstreams' `__processed_tp_offsets__`), and on recovery a change
whose input is at or past that input's committed offset (or its log start, where nothing was committed) is skipped:
the replay makes it again. The table recovered is the table as of the committed inputs.

Per key, a table's changes come from one input partition in offset order after its first (a live group: its raw
record, then only its joined partition's grades and ticks), so the changes kept are a prefix of each key's changes.
A change skipped must not have been compacted under a later one: the changelogs keep `min.compaction.lag.ms` well
above a commit interval (rftbus/ground/kafka/registry.py), and the records past a commit are seconds old at a restart.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import faust
from confluent_kafka import Consumer, TopicPartition
from faust.streams import current_event
from faust.tables import TableManager

from rftbus.ground.config import Config
from rftbus.ground.kafka.clients import make_consumer
from rftbus.streams.headers import H_INPUT, header
from rftbus.streams.store import CommittedStore

log = logging.getLogger("rftbus.streams")

# (topic, partition) -> the first offset a restarted worker reads again: committed, else the log start
ReadFrom = Callable[[str, int], int]


def input_position(event: Any) -> bytes | None:
    """`topic/partition/offset` of the record an agent is handling (None outside one)."""
    if event is None:
        return None
    m = event.message
    return f"{m.topic}/{m.partition}/{m.offset}".encode()


def replayed(position: bytes, read_from: ReadFrom) -> bool:
    """Whether the input at `position` will be read again (so the change it made must not be recovered)."""
    topic, part, off = position.decode().rsplit("/", 2)
    return int(off) >= read_from(topic, int(part))


def recoverable(batch: Iterable[Any], read_from: ReadFrom | None) -> tuple[list[Any], int]:
    """The changelog events to recover (those without an input header, or whose input is committed) and how many
    were skipped."""
    kept, skipped = [], 0
    for event in batch:
        pos = header(event.message.headers, H_INPUT)
        if pos is not None and read_from is not None and replayed(pos, read_from):
            skipped += 1
        else:
            kept.append(event)
    return kept, skipped


class CheckpointedTable(faust.Table):
    """A Faust table whose recovery stops at the committed inputs; `read_from` is set by the app. On rocksdb its
    store writes a change to disk only once its input is committed (rftbus/streams/store.py), so the disk needs no wipe
    after a kill and a restart reads only the changelog past what the disk holds."""

    read_from: ReadFrom | None = None
    skipped = 0  # changes not recovered (their inputs are read again)
    # value (None: deleted) -> the headers a change publishes for readers outside the worker (rftbus/streams/published.py)
    publish: Callable[[bytes | None], list[tuple[str, bytes]]] | None = None

    def _new_store_by_url(self, url: Any) -> Any:
        if str(url).split(":", 1)[0] != "rocksdb":
            return super()._new_store_by_url(url)
        return CommittedStore(url, self.app, self, table_name=self.name, key_type=self.key_type,
                              key_serializer=self.key_serializer, value_serializer=self.value_serializer,
                              value_type=self.value_type, loop=self.loop, options=self.options)

    def _on_changelog_sent(self, fut: Any) -> None:
        if isinstance(self.data, CommittedStore):  # its position goes to disk with the change, at the commit
            res = fut.result()
            self.data.changelog_acked(res.topic_partition, res.offset)
        else:
            super()._on_changelog_sent(fut)

    def send_changelog(self, partition: int | None, key: Any, value: Any, key_serializer: Any = None,
                       value_serializer: Any = None) -> Any:
        pos = input_position(current_event())
        headers = ([] if pos is None else [(H_INPUT, pos)]) + (self.publish(value) if self.publish else [])
        return self.changelog_topic.send_soon(
            key=key, value=value, partition=partition,
            key_serializer=self.key_serializer if key_serializer is None else key_serializer,
            value_serializer=self.value_serializer if value_serializer is None else value_serializer,
            headers=headers or None,
            callback=self._on_changelog_sent, eager_partitioning=True)

    def apply_changelog_batch(self, batch: Iterable[Any]) -> None:
        kept, skipped = recoverable(batch, self.read_from)
        if skipped:
            self.skipped += skipped
            log.info("table %s: %d changelog records skipped on recovery (their inputs are read again)",
                     self.name, skipped)
        self.data.apply_changelog_batch(kept, to_key=self._to_key, to_value=self._to_value)


class CommitTables(TableManager):
    """Faust's table manager; at every commit of the worker's inputs its committed stores write what now may."""

    def on_commit(self, offsets: Any) -> None:
        super().on_commit(offsets)
        for table in self.values():
            data = table.data
            if isinstance(data, CommittedStore):
                data.committed(offsets)


class ReadAgain:
    """The broker's answer: the group's committed offset of (topic, partition), else the partition's log start.
    (An idle consumer of the group, made at the first question: it asks the coordinator, it joins nothing.)"""

    def __init__(self, cfg: Config, group: str):
        self.cfg, self.group = cfg, group
        self.consumer: Consumer | None = None

    def __call__(self, topic: str, partition: int) -> int:
        self.consumer = self.consumer or make_consumer(self.cfg, self.group)
        tp = TopicPartition(topic, partition)
        off = self.consumer.committed([tp], timeout=10.0)[0].offset
        return off if off >= 0 else self.consumer.get_watermark_offsets(tp, timeout=10.0)[0]

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None


class ReadFromCache:
    """`ReadFrom` through the broker, each input partition asked once per recovery (`clear` at a rebalance)."""

    def __init__(self, lookup: Callable[[str, int], int]):
        self.lookup = lookup
        self.known: dict[tuple[str, int], int] = {}

    def __call__(self, topic: str, partition: int) -> int:
        key = (topic, partition)
        if key not in self.known:
            self.known[key] = self.lookup(topic, partition)
        return self.known[key]

    def clear(self) -> None:
        self.known.clear()

    def close(self) -> None:
        """The lookup's consumer closed (a later question opens another)."""
        close = getattr(self.lookup, "close", None)
        if close is not None:
            close()
