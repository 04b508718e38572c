"""Follows `topics.weights` so every worker knows the latest published version of its model.

Every worker needs the whole (one-partition, compacted) topic, so this is a plain assigned consumer in
a thread, not a Faust agent (an agent would get the partition on one worker only). Before anything is
published the latest version is 0: v0 is built from the seed in every process.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from rftbus.config import Config
from rftbus.kafka.clients import make_consumer
from rftbus.schemas import DecodeError, WeightVersion, make_codec

log = logging.getLogger("rftbus.streams.versions")


class VersionFollower:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.model = cfg.model.name
        self.latest = 0
        self.caught_up = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="weights-follower", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        topic = self.cfg.topics.weights.name
        consumer = make_consumer(self.cfg, f"{self.cfg.streams.app_id}-weights", **{"enable.partition.eof": True})
        decode = make_codec(self.cfg.schema_registry.url, self.cfg.schema_registry.client).deserializer(WeightVersion)
        try:
            md = consumer.list_topics(topic, timeout=10).topics.get(topic)
            parts = sorted(md.partitions) if md and md.partitions else [0]
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
            at_eof: set[int] = set()
            while not self._stop.is_set():
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        at_eof.add(msg.partition())
                        if at_eof >= set(parts):
                            self.caught_up.set()
                    else:
                        log.warning("weights topic: %s", msg.error().str())
                    continue
                at_eof.discard(msg.partition())
                if msg.value() is None:
                    continue
                try:
                    wv = decode(msg.value(), None)
                except DecodeError as e:
                    log.warning("undecodable WeightVersion at offset %s: %s", msg.offset(), e)
                    continue
                if wv.model == self.model and wv.version > self.latest:
                    self.latest = int(wv.version)
        finally:
            consumer.close()

    async def wait_for(self, version: int, timeout_s: float) -> int:
        """The latest version once it reaches `version` or `timeout_s` passed (a newer experience than
        the follower has seen is usually a race with the trainer's publish, not an unknown version)."""
        deadline = time.monotonic() + timeout_s
        while self.latest < version and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return self.latest
