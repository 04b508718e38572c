"""A write the producer could not schedule (the broker away) is tried again, not raised into the record's handler.

Raised, it cost the record its outcome after its state had moved: the broker kill -9 test saw a valid group
rejected (tests/system/test_broker_kill_duplicates.py). The real path is that test; here the rule alone.
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.errors import KafkaTimeoutError, MessageSizeTooLargeError, NotLeaderForPartitionError
from faust.exceptions import ProducerSendError

from rftbus.streams.outputs import Emitter, unscheduled


def _wrapped(exc: Exception) -> ProducerSendError:
    try:
        raise ProducerSendError(f"Error while sending: {exc!r}") from exc
    except ProducerSendError as e:
        return e


class _Producer:
    def __init__(self, failures: list[Exception]):
        self.failures, self.calls = list(failures), 0

    async def send(self, *args):
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "future"


class _App:
    in_transaction = False

    def __init__(self, producer):
        self.producer = producer

    async def maybe_start_producer(self):
        return self.producer


def _emitter(producer) -> Emitter:
    e = Emitter(_App(producer), lambda r: b"", {"curated": "c"}, {"curated": 1}, 1024)
    e.retry_max_s = 0.0
    return e


def test_which_errors_mean_nothing_was_queued():
    assert unscheduled(_wrapped(KafkaTimeoutError()))
    assert unscheduled(_wrapped(NotLeaderForPartitionError()))
    assert unscheduled(KafkaTimeoutError())
    assert not unscheduled(_wrapped(MessageSizeTooLargeError()))
    assert not unscheduled(ProducerSendError("No transaction producer found"))
    assert not unscheduled(ValueError("a bug"))


def test_an_unscheduled_write_is_tried_again_until_it_is_queued():
    producer = _Producer([_wrapped(KafkaTimeoutError()), _wrapped(KafkaTimeoutError())])
    assert asyncio.run(_emitter(producer).write("curated", b"k", b"v", 0, [])) == "future"
    assert producer.calls == 3


def test_a_write_that_can_never_go_is_raised_at_once():
    producer = _Producer([_wrapped(MessageSizeTooLargeError())])
    with pytest.raises(ProducerSendError):
        asyncio.run(_emitter(producer).write("curated", b"k", b"v", 0, []))
    assert producer.calls == 1
