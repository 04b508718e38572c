"""The one agent loop every stream uses: a record's error costs that record an outcome, a broker's error is waited out.

An error in one record is logged, counted and handed to the stage's `on_error` (a `processing_error` rejection,
never an acknowledgement alone); the stream goes on. A Kafka error is the broker, not the record (a recovery scan
while it restarts): the same record again once it answers. Rejecting it instead lost it: the rejection could not
be written either, and the offset was acknowledged (found by tests/system/test_run.py's broker kill -9).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka.errors import KafkaError
from confluent_kafka import KafkaException

from rftbus.streams.telemetry import Counters

log = logging.getLogger("rftbus.streams")

Handle = Callable[[Any], Awaitable[None]]
OnError = Callable[[Any, BaseException], Awaitable[None]]


def reporting_agent(name: str, handle: Handle, on_error: OnError, counters: Counters,
                    prepare: Callable[[Any], Any] | None = None) -> Callable[[Any], Awaitable[None]]:
    """A Faust agent over `handle`; `prepare` may wrap the stream first (ingest acknowledges by hand: `noack`)."""
    async def agent(stream: Any) -> None:
        if prepare is not None:
            stream = prepare(stream)
        async for event in stream.events():
            for attempt in itertools.count(1):
                try:
                    await handle(event)
                except (KafkaException, KafkaError) as exc:
                    m = event.message
                    log.warning("%s: broker error at %s[%s]@%s (attempt %d): %s; retrying", name, m.topic,
                                m.partition, m.offset, attempt, exc)
                    counters.inc("broker_retries")
                    await asyncio.sleep(min(5.0, 0.5 * attempt))
                    continue
                except Exception as exc:
                    m = event.message
                    log.exception("%s: %s at %s[%s]@%s", name, type(exc).__name__, m.topic, m.partition, m.offset,
                                  exc_info=exc)
                    counters.inc("errors")
                    await on_error(event, exc)
                break
    return agent
