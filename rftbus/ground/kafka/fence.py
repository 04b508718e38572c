"""A fence: the offset in each partition below which everything already appended is readable.

A consumer reads a partition only up to its high watermark. On one broker that is the end of the log at
once; on a replicated cluster a record sits above it until the in-sync replicas have it, so a reader that
asks "what is in the log" right after a writer died can miss that writer's last records and see them
appear later. A recovery scan that misses them does the work again (a duplicate).

`fence` appends one record to each partition with `acks=all` inside a transaction and aborts it. Its
delivery proves the high watermark passed it, and so passed everything the leader appended before it; a
record of the dead writer that no in-sync replica had is truncated when leadership moves, and is then
rightly not found. The fence record is aborted and its marker is a control record, so every
`read_committed` reader (all of rftbus's: `kafka.clients.consumer_conf`, the analytics sink) never sees
either. The transactional id is the caller's, one per fenced unit of work: a second fence with it fences
off the first.
"""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException, Message

from rftbus.ground.config import Config
from rftbus.ground.kafka.clients import make_producer

H_FENCE = "rftbus.fence"


def fence(cfg: Config, partitions: list[tuple[str, int]], transactional_id: str,
          timeout_s: float = 30.0) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the fence record's offset: reading up to it (exclusive) sees every record
    appended to the partition before the call. Raises KafkaException when the cluster does not answer."""
    producer = make_producer(cfg, **{"transactional.id": transactional_id,
                                     "transaction.timeout.ms": int(max(timeout_s, 10) * 1000)})
    found: dict[tuple[str, int], int] = {}
    errors: list[str] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")
        else:
            found[(msg.topic() or "", msg.partition() or 0)] = msg.offset() or 0

    producer.init_transactions(timeout_s)
    producer.begin_transaction()
    for topic, part in partitions:
        producer.produce(topic, b"", partition=part, headers=[(H_FENCE, b"1")], on_delivery=delivered)
    left = producer.flush(timeout_s)
    if left or errors:
        producer.abort_transaction(timeout_s)
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT if left else KafkaError._FAIL,
                                        f"fence {transactional_id}: " + ("; ".join(errors) or
                                                                       f"{left} not delivered in {timeout_s:g}s")))
    producer.abort_transaction(timeout_s)  # the markers: readers see neither the fence nor the abort
    return found
