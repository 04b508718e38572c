"""`BatchConsumer.lane_drained` when a partition's end cannot be had (#46): its leader frozen (the question times
out) or just moved (NOT_LEADER_FOR_PARTITION). Raised, it killed the trainer in a three-node chaos run through a
leader freeze and a rolling restart; now that partition counts as read for a while and is asked again after it.

The consumer here answers from a script: what is tested is the trainer's side of those answers. The real
broker's answers are in the three-node chaos run (`rftbus chaos --nodes 3`, docs/RELIABILITY.md)."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from rftbus.trainer import batch_source
from rftbus.trainer.batch_source import BatchConsumer


class ScriptedConsumer:
    def __init__(self, answers):
        self.answers, self.asked = answers, []

    def assign(self, tps) -> None:
        pass

    def get_watermark_offsets(self, tp, timeout=None, cached=False):
        if cached:
            return (-1001, -1001)  # librdkafka: no fetch response from the partition's leader yet
        self.asked.append(tp.partition)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_an_end_that_cannot_be_had_counts_as_read_for_a_while(monkeypatch):
    moved = KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
    consumer = ScriptedConsumer([moved, (0, 10)])
    bc = BatchConsumer(consumer, {"priority": "p"}, None, {("p", 0): 3})  # type: ignore[arg-type]
    t = [100.0]
    monkeypatch.setattr(batch_source.time, "monotonic", lambda: t[0])
    assert bc.lane_drained("priority") and consumer.asked == [0]  # not raised: taken as read
    assert bc.lane_drained("priority") and consumer.asked == [0]  # and not asked again (5 s each on a frozen one)
    t[0] += batch_source.UNKNOWN_END_S + 1
    assert not bc.lane_drained("priority") and consumer.asked == [0, 0]  # asked again: 3 < 10, records to read
