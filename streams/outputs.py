"""Producing the stream outputs (curated lanes, expert, rejected, internal topics) with their headers.

Every output carries `rftbus-src` (the raw record it derives from) and `rftbus-in` (the input
partition that produced it): after a crash or rebalance the new owner of a partition scans these
headers to see what already went out (recovery.py) instead of trusting its own memory.
Outputs of input partition p go to partition p mod N of each output topic, so that scan reads one
partition per topic. Keys stay group_id (the contract); only the partition is chosen explicitly.
"""

from __future__ import annotations

from typing import Any

from rftbus.schemas import Rejection
from rftbus.streams.verify import ExperienceView

H_KIND = "rftbus-kind"
H_SRC = "rftbus-src"
H_IN = "rftbus-in"
H_GROUP = "rftbus-group"
H_N = "rftbus-n"
H_T0 = "rftbus-t0"  # ms timestamp of the raw record (latency accounting)


def header(headers: Any, name: str) -> bytes | None:
    if not headers:
        return None
    items = headers.items() if isinstance(headers, dict) else headers
    for k, v in items:
        if k == name:
            return v
    return None


def split_src(src: str) -> tuple[str, int, int]:
    topic, part, off = src.rsplit("/", 2)
    return topic, int(part), int(off)


class Emitter:
    """Thin layer over Faust topics: one method per kind of output."""

    def __init__(self, app: Any, encode, names: dict[str, str], partitions: dict[str, int]):
        self.app = app
        self.encode = encode
        self.names = names
        self.partitions = partitions
        self.topics = {role: app.topic(name) for role, name in names.items()}
        self._producer: Any = None

    def _part(self, role: str, p: int) -> int:
        return p % self.partitions[role]

    async def send(self, role: str, key: bytes | None, value: bytes, p: int, headers: list) -> None:
        """Straight to the producer Faust's ``topic.send`` would use (the transaction manager under
        exactly_once): with the partition and bytes already known, its per-message wrapping (future
        message, serializers, sensors) is pure overhead. Not awaited for delivery, as topic.send; Faust
        flushes this producer before it commits offsets."""
        producer = self._producer
        if producer is None:
            producer = await self.app.maybe_start_producer()
            if not self.app.in_transaction:  # under exactly_once it is looked up per send, as Faust does
                self._producer = producer
        await producer.send(self.names[role], key, value, self._part(role, p), None, headers)

    async def reject(self, *, reason: str, detail: str, stage: str, src: str, original: bytes | None,
                     key: bytes | None, p: int, experience_id: str | None = None,
                     group: tuple[str, int] | None = None) -> None:
        topic, part, off = split_src(src)
        rec = Rejection(experience_id=experience_id, reason=reason, detail=detail, stage=stage,
                        source_topic=topic, partition=part, offset=off, original=original)
        headers = [(H_SRC, src.encode()), (H_IN, str(p).encode())]
        if group is not None:
            headers += [(H_GROUP, group[0].encode()), (H_N, str(group[1]).encode())]
        await self.send("rejected", key, self.encode(rec), p, headers)

    async def experience(self, role: str, e: ExperienceView, *, src: str, p: int, group: tuple[str, int] | None,
                         t0: bytes | None = None) -> None:
        headers = [(H_SRC, src.encode()), (H_IN, str(p).encode())]
        if group is not None:
            headers += [(H_GROUP, group[0].encode()), (H_N, str(group[1]).encode())]
        if t0 is not None:
            headers.append((H_T0, t0))
        await self.send(role, e.group_id.encode(), e.to_bytes(), p, headers)
