"""The streams worker's Faust transport: Faust's aiokafka transport with subclasses of its consumer, consumer thread
and producer, which Faust builds from the transport's class attributes (`Transport.Consumer`, `.Producer`); the app
subclass below hands Faust this transport. Nothing here changes a Faust class: a worker's app gets these behaviours,
any other Faust app in the process keeps Faust's own.

What each override is for, its upstream issue and the test that fails without it: `faust_patches.PATCHES` (the
aiokafka network-client patches that no subclass can reach stay there). The settings come from `Adaptation`, set on
the app before its consumer starts (rftbus/streams/app.py).
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import faust
from faust.transport.drivers import aiokafka as driver

from rftbus.streams.eager import run_eager

CommitRule = Callable[[Any, Any], "int | None"]  # (Faust consumer, tp) -> offset to commit, or None


@dataclass
class Adaptation:
    """What the worker changes in Faust's clients. commit_rules: topic -> the rule that decides its commits (the
    streams checkpoint's); client_timeout_s: how long the clients wait for any answer (None: Faust's settings)."""

    commit_rules: dict[str, CommitRule] = field(default_factory=dict)
    fetch_min_bytes: int = 1
    fetch_max_wait_ms: int = 1500
    client_timeout_s: float | None = None


def adaptation_of(app: Any) -> Adaptation:
    """The app's adaptation (a plain Faust app, or one not configured yet: none)."""
    return getattr(app, "adaptation", None) or Adaptation()


def bound_network_wait(client: Any, a: Adaptation) -> None:
    """`client_timeout`: every connection the aiokafka client opens takes its `_request_timeout_ms` (read in
    `_get_conn`, after start); the producer's batch lifetime keeps Faust's request timeout."""
    if a.client_timeout_s is not None:
        client._request_timeout_ms = int(a.client_timeout_s * 1000)


class ReadOffsets(defaultdict):
    """`read_offsets`: Faust drops a fetched record whose offset is below the last one it delivered (its read mark).
    After a rebalance a partition is re-read from the commit, but records still buffered from before the seek raise
    that mark first, and the re-read records are then dropped. For topics with a commit rule nothing is dropped this
    way: a record delivered twice is skipped downstream (the checkpoint's `Landed.done`). Measured without it: the
    two-worker kill test lost 84 of 2,000."""

    def __init__(self, app: Any, marks: Any):
        super().__init__(lambda: None, marks)
        self.app = app

    def __getitem__(self, tp: Any) -> Any:
        if tp.topic in adaptation_of(self.app).commit_rules:
            return None
        return super().__getitem__(tp)


class ConsumerThread(driver.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        """`fetch_settings` and `client_timeout`: Faust passes fetch_max_wait_ms=1500 and leaves fetch_min_bytes
        at 1 (not settable); aiokafka reads both when the consumer starts its fetcher."""
        consumer = super()._create_worker_consumer(transport)
        a = adaptation_of(self.app)
        consumer._fetch_min_bytes, consumer._fetch_max_wait_ms = a.fetch_min_bytes, a.fetch_max_wait_ms
        bound_network_wait(consumer._client, a)
        return consumer


class Consumer(driver.Consumer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_offset = ReadOffsets(self.app, self._read_offset)

    def _new_consumer_thread(self) -> Any:
        return ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    def _new_offset(self, tp: Any) -> int | None:
        """`commit_rule` (faust-streaming/faust#606): the checkpoint decides what its topics may commit."""
        rule = adaptation_of(self.app).commit_rules.get(tp.topic)
        return super()._new_offset(tp) if rule is None else rule(self, tp)

    async def wait_first(self, *coros: Any, timeout: Any = None) -> Any:
        """`inline_delivery`: Faust's fetch loop hands each record over as
        ``wait_first(callback(message), suspend_flow.wait())``: four tasks and three cancellations per record.
        The callback runs inline up to its first suspension (eager.run_eager); only one that would block goes
        under Faust's own wait, so the flow-suspension escape and the errors are what they were."""
        if len(coros) == 2 and inspect.iscoroutine(coros[0]) and inspect.iscoroutine(coros[1]):
            rest = run_eager(coros[0])
            if rest is None:
                coros[1].close()  # (the suspension's wait, never needed)
                return None
            coros = (rest, coros[1])
        return await super().wait_first(*coros, timeout=timeout)


class Producer(driver.Producer):
    def _settings_extra(self) -> Any:
        """`idempotent_producer`: Faust enables aiokafka's idempotence only under exactly_once."""
        return {**super()._settings_extra(), "acks": "all", "enable_idempotence": True}

    def _new_producer(self, transactional_id: str | None = None) -> Any:
        producer = super()._new_producer(transactional_id)
        bound_network_wait(producer.client, adaptation_of(self.app))
        return producer


class Transport(driver.Transport):
    Consumer = Consumer
    Producer = Producer


class WorkerApp(faust.App):
    """A Faust app on this transport; `adaptation` is read when its clients are made and on every commit."""

    adaptation: Adaptation | None = None

    def _new_transport(self) -> Any:
        return Transport(self.conf.broker_consumer, self)

    def _new_producer_transport(self) -> Any:
        return Transport(self.conf.broker_producer, self)
