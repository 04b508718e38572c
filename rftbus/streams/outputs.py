"""Producing the stream outputs (curated lanes, expert, rejected, internal topics) with their headers.

Every output of an input record carries `rftbus-src` (that record), `rftbus-in` (its partition),
`rftbus-n` / `rftbus-k` (how many outputs it has, and which this is) and `rftbus-latest` (the weight
version its decision used). After a crash or rebalance the new owner of a partition reads these headers
back (checkpoint/landed.py) instead of trusting its memory: a record whose outputs all landed is skipped, one
partly written gets the missing outputs only, decided again with the same version.
Outputs of input partition p go to partition p mod N of each output topic, so that scan reads one
partition per topic. Keys stay group_id (the contract); only the partition is chosen explicitly.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rftbus.ground.schemas import bound_key, fitted_rejection, topic_context
from rftbus.streams.headers import (H_EXP, H_FBID, H_IN, H_K, H_KIND, H_LATEST, H_N, H_RESEND, H_SAMPLE, H_SRC,
                                   H_T0, header)
from rftbus.streams.checkpoint.deliveries import Write, split_src
from rftbus.streams.checkpoint.landed import done_key

log = logging.getLogger("rftbus.streams")

__all__ = ["H_EXP", "H_FBID", "H_IN", "H_K", "H_KIND", "H_LATEST", "H_N", "H_RESEND", "H_SAMPLE", "H_SRC", "H_T0",
           "Emitter", "Output", "header", "rejection_id", "value_limits"]

def unscheduled(exc: BaseException) -> bool:
    """Whether a producer's `send` refused a record without queueing it for a reason that passes (aiokafka's
    KafkaTimeoutError: no metadata or a full buffer, or a retriable error), as raised or as Faust's
    ProducerSendError around it."""
    from aiokafka.errors import KafkaError, KafkaTimeoutError

    cause = exc.__cause__ if not isinstance(exc, KafkaError) else exc
    return isinstance(cause, KafkaTimeoutError) or (isinstance(cause, KafkaError) and bool(cause.retriable))


def handled_tp() -> tuple[str, int] | None:
    """The (topic, partition) of the record the current agent is handling (Faust's current event), if any."""
    from faust.streams import current_event

    event = current_event()
    return None if event is None else (event.message.topic, event.message.partition)


def rejection_id(stage: str, src: str, reason: str) -> str:
    """Derived from where the record was read: a rejection written again after a crash is the same one."""
    return hashlib.sha1(f"{stage}\x00{src}\x00{reason}".encode()).hexdigest()[:32]


@dataclass(slots=True)
class Output:
    role: str  # curated | curated_priority | expert | rejected | raw | feedback
    key: bytes | None
    value: bytes
    partition: int | None = None  # where it goes when not the input's own (p mod N): a keyed record's home


RECORD_OVERHEAD = 16 * 1024  # key, rftbus headers and record-batch framing around a value
REJECTION_ROOM = 64 * 1024  # a rejection's fields besides the original (detail, ids, source)


def value_limits(topic_limits: dict[str, int], names: dict[str, str], producer_max: int) -> dict[str, int]:
    """role -> the largest value a record there may carry: the topic's max.message.bytes (or the
    producer's max request size, if smaller) less the record's own overhead."""
    return {role: min(topic_limits[name], producer_max) - RECORD_OVERHEAD
            for role, name in names.items() if name in topic_limits}


class Emitter:
    """Every record a stage writes (outputs, rejections, the join's internal records), straight to the producer with
    its partition chosen, each write watched by the checkpoint (never Faust's `topic.send`, whose records from an
    agent wait in memory for the commit of the offset they were made for, while the table change beside them is
    already on its changelog)."""

    def __init__(self, app: Any, encode, names: dict[str, str], partitions: dict[str, int],
                 original_max_bytes: int, max_bytes: dict[str, int] | None = None):
        self.app = app
        self.encode = encode
        self.names = names
        self.partitions = partitions
        self.max_bytes = dict(max_bytes or {})  # role -> largest value its topic takes (key, headers, batch aside)
        room = self.max_bytes.get("rejected")
        # a rejection's copy of the original must leave room for the rest of the rejection
        self.original_max_bytes = min(original_max_bytes, room - REJECTION_ROOM) if room else original_max_bytes
        self.checkpoint: Any = None  # set by the app: each write's delivery watched (retried, then quarantined)
        self.retry_max_s = 5.0  # the longest wait between tries of a write the producer could not schedule
        self._producer: Any = None

    def fits(self, role: str, value: bytes) -> bool:
        """Whether `value` can be written to `role`'s topic: a record over the topic's limit would fail at
        the broker and, replayed, fail again forever (#18)."""
        limit = self.max_bytes.get(role)
        return limit is None or len(value) <= limit

    def part(self, role: str, p: int) -> int:
        return p % self.partitions[role]

    def key_partition(self, role: str, key: bytes) -> int:
        """The partition a keyed record of `role` goes to: the Java client's (and aiokafka's) murmur2 rule, so the
        records of one experience meet in one partition of the join topic whoever writes them."""
        from aiokafka.partitioner import murmur2

        return (murmur2(key) & 0x7FFFFFFF) % self.partitions[role]

    async def write(self, role: str, key: bytes | None, value: bytes, p: int, headers: list) -> Any:
        """Straight to the producer Faust's ``topic.send`` would use: with the partition and bytes
        already known, its per-message wrapping (future message, serializers, sensors) is pure overhead.
        Returns the delivery future, not awaited (as topic.send); Faust flushes before it commits offsets."""
        producer = self._producer
        if producer is None:
            producer = await self.app.maybe_start_producer()
            if not self.app.in_transaction:  # under exactly_once it is looked up per send, as Faust does
                self._producer = producer
        attempt = 0
        while True:
            attempt += 1
            try:
                return await producer.send(self.names[role], key, value, self.part(role, p), None, headers)
            except Exception as exc:
                if not unscheduled(exc):
                    raise
                # Nothing was queued (the broker is away: no metadata, or the buffer is full): the same write
                # again once it answers. Raising instead cost the record an outcome after its state had moved
                # (a valid group rejected as `processing_error`, or as a `duplicate` on the record's retry).
                log.warning("write to %s[%s] not scheduled (attempt %d): %s; retrying", self.names[role],
                            self.part(role, p), attempt, exc)
                await asyncio.sleep(min(self.retry_max_s, 0.25 * attempt))

    async def send(self, role: str, key: bytes | None, value: bytes, p: int, headers: list, src: str) -> None:
        """One output of input `src`; the checkpoint watches its delivery: retried, else quarantined, and the
        partition of the record being handled commits nothing meanwhile."""
        fut = await self.write(role, key, value, p, headers)
        if self.checkpoint is not None:
            self.checkpoint.watch(fut, Write(role, self.names[role], key, value, p, headers, src, handled_tp()))

    def rejection(self, *, reason: str, detail: str, stage: str, src: str, original: bytes | None,
                  group_id: str | None = None, experience_ids: Sequence[str] = (), ident: str | None = None) -> bytes:
        """A Rejection's bytes. The original is copied only when it fits under `original_max_bytes`;
        otherwise the rejection points at it (source topic, partition, offset) and says so. `ident`: what
        makes it one (default its source; the join stage's: the source and the experience)."""
        topic, part, off = split_src(src)
        if original is not None and len(original) > self.original_max_bytes:
            detail = (f"{detail} (original of {len(original)} bytes not copied: over "
                      f"streams.rejection_original_max_bytes={self.original_max_bytes})")
            original = None
        ids = list(experience_ids)
        limit = self.max_bytes.get("rejected") or self.original_max_bytes + 1024 * 1024
        rec = fitted_rejection(max_bytes=limit, original=original, rejection_id=rejection_id(stage, ident or src, reason),
                               experience_id=ids[0] if len(ids) == 1 else None, group_id=group_id,
                               experience_ids=ids, reason=reason, detail=detail, stage=stage, source_topic=topic,
                               partition=part, offset=off)
        return self.encode(rec, topic_context(self.names["rejected"]))

    async def outputs(self, outs: list[Output], *, src: str, p: int, latest: int, t0: bytes | None = None,
                      landed: frozenset[int] = frozenset(), exp: str | None = None) -> int:
        """Write the outputs of input record `src` (partition p) except those already in the log; `exp`: the
        experience a join-stage outcome is about (its record is one input per experience)."""
        base = [(H_SRC, src.encode()), (H_IN, str(p).encode()), (H_N, str(len(outs)).encode()),
                (H_LATEST, str(latest).encode())]
        if t0 is not None:
            base.append((H_T0, t0))
        if exp is not None:
            base.append((H_EXP, exp.encode()))
        sent = 0
        for k, o in enumerate(outs):
            if k in landed:
                continue
            key = bound_key(o.key) if o.role == "rejected" else o.key  # an input's huge key must not sink it
            await self.send(o.role, key, o.value, p if o.partition is None else o.partition,
                            [*base, (H_K, str(k).encode())], src)
            sent += 1
        return sent

    async def reject(self, *, reason: str, detail: str, stage: str, src: str, original: bytes | None,
                     key: bytes | None, p: int, group_id: str | None = None,
                     experience_ids: Sequence[str] = (), exp: str | None = None) -> None:
        """A rejection that is its input's only output (feedback and join stages; `exp`: the join's experience)."""
        value = self.rejection(reason=reason, detail=detail, stage=stage, src=src, original=original,
                               group_id=group_id, experience_ids=experience_ids,
                               ident=None if exp is None else done_key(src, exp))
        await self.outputs([Output("rejected", key, value)], src=src, p=p, latest=-1, exp=exp)
