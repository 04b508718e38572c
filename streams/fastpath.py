"""Faust's fetch loop without two-plus tasks per record: a record is handed to its stream inline when that
cannot block, and under Faust's own `wait_first` only when it does.

faust-streaming 0.15.3 (`Consumer._drain_messages`) delivers every fetched record with
``await self.wait_first(callback(message), self.suspend_flow.wait())``: four tasks (the callback, the
suspend-flow wait, and mode's stopped/crashed waits), an ``asyncio.wait`` and three cancellations per
record, so that a delivery blocked on a full stream buffer (or suspended flow) can be abandoned when a
rebalance suspends the flow. The callback (conductor -> ConductorHandler: flow-control acquire, producer
ebb, decode, ``queue.put_nowait``) almost never blocks. Measured on the `rftbus bench streams` drain
(py-spy, 6.3 KB records): the fetch/deliver path plus the event loop's share were ~0.1 ms of the
worker's ~0.34 ms CPU per experience. With this module (both patches below), Faust's
cython_optimizations and the fetch settings, the worker's CPU per experience fell from 0.26-0.35 to
0.15-0.19 ms (4 back-to-back pairs, 24,000-record drains).

Here the callback coroutine is first run inline up to its first suspension point (what Python 3.12's
eager tasks do). When it finishes without suspending, the record is delivered exactly as before, with
no task. When it suspends (buffer full, flow suspended, producer backlog), the rest of the *same*
coroutine runs under Faust's unchanged ``wait_first(..., suspend_flow.wait())``, so the rebalance escape
and the exception propagation are what they were. Everything else in the loop (offset bookkeeping,
gap tracking, commit_every) is Faust's code as it stands in 0.15.3; the loop yields every YIELD_EVERY
records (Faust: 100, but with a turn of the loop per record anyway).
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Coroutine, Generator, cast

from faust.transport.consumer import CONSUMER_FETCHING, Consumer
from mode import Service

# The faust-streaming release whose Consumer._drain_messages is copied below (and whose _new_offset
# offsets.py replaces). pyproject.toml pins it; `require_faust` refuses any other at worker start.
FAUST_VERSION = "0.15.3"
_original_drain = Consumer._drain_messages
# The stream gets a turn at least this often (Faust yields every 100 records; with inline delivery the
# agent would otherwise only run between fetched batches).
YIELD_EVERY = 10


class _Continue:
    """Awaitable: the rest of a coroutine that already ran up to its first suspension (`yielded`)."""

    __slots__ = ("_coro", "_yielded")

    def __init__(self, coro: Coroutine, yielded: Any):
        self._coro: Coroutine | None = coro
        self._yielded: Any = yielded

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, yielded = self._coro, self._yielded
        assert coro is not None, "a _Continue is awaited once"
        self._coro = self._yielded = None
        while True:
            try:
                sent = yield yielded  # the future the coroutine waits on, to the task driving us
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # cancellation or a thrown-in error: the coroutine handles it
                try:
                    yielded = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    yielded = coro.send(sent)
                except StopIteration as stop:
                    return stop.value


def run_eager(coro: Coroutine) -> _Continue | None:
    """Run `coro` until it first suspends: None when it completed, else an awaitable for the rest.
    An exception raised before the first suspension propagates, as from ``await coro``."""
    try:
        yielded = coro.send(None)
    except StopIteration:
        return None
    return _Continue(coro, yielded)


async def _drain_messages(self: Consumer, fetcher: Service) -> None:  # pragma: no cover (a worker's loop)
    # faust-streaming 0.15.3 Consumer._drain_messages; only the delivery line differs (see module doc).
    callback = self.callback
    getmany = self.getmany
    consumer_should_stop = cast(Service, self)._stopped.is_set
    fetcher_should_stop = cast(Service, fetcher)._stopped.is_set

    get_read_offset = self._read_offset.__getitem__
    set_read_offset = self._read_offset.__setitem__
    flag_consumer_fetching = CONSUMER_FETCHING
    set_flag = self.diag.set_flag
    unset_flag = self.diag.unset_flag
    commit_every = self._commit_every
    acks_enabled_for = self.app.topics.acks_enabled_for

    yield_every = YIELD_EVERY
    num_since_yield = 0
    sleep = asyncio.sleep

    try:
        while not (consumer_should_stop() or fetcher_should_stop()):
            set_flag(flag_consumer_fetching)
            ait = cast(AsyncIterator, getmany(timeout=1.0))

            # Sleeping because sometimes getmany is called in a loop
            # never releasing to the event loop
            await self.sleep(0)
            if not self.should_stop:
                async for tp, message in ait:
                    num_since_yield += 1
                    if num_since_yield > yield_every:
                        await sleep(0)
                        num_since_yield = 0

                    offset = message.offset
                    r_offset = get_read_offset(tp)
                    if r_offset is None or offset >= r_offset:
                        gap = offset - (r_offset or 0)
                        # We have a gap in income messages
                        if gap > 1 and r_offset:
                            acks_enabled = acks_enabled_for(message.topic)
                            if acks_enabled:
                                await self._add_gap(tp, r_offset + 1, offset)
                        if commit_every is not None:
                            if self._n_acked >= commit_every:
                                self._n_acked = 0
                                await self.commit()
                        rest = run_eager(callback(message))  # type: ignore[arg-type]  # (it is a coroutine)
                        if rest is not None:  # it would block: Faust's own escape on a flow suspension
                            await self.wait_first(rest, self.suspend_flow.wait())
                        set_read_offset(tp, offset)
                    else:
                        self.log.dev(
                            "DROPPED MESSAGE ROFF %r: k=%r v=%r",
                            offset,
                            message.key,
                            message.value,
                        )
                unset_flag(flag_consumer_fetching)

    except self.consumer_stopped_errors:
        if self.transport.app.should_stop:
            # we're already stopping so ignore
            self.log.info("Broker stopped consumer, shutting down...")
            return
        raise
    except asyncio.CancelledError:
        if self.transport.app.should_stop:
            # we're already stopping so ignore
            self.log.info("Consumer shutting down for user cancel.")
            return
        raise
    except Exception as exc:
        self.log.exception("Drain messages raised: %r", exc)
        raise
    finally:
        unset_flag(flag_consumer_fetching)


class _Done:
    """An awaitable that completes at once, without a turn of the event loop."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, Any, None]:
        yield from ()


_DONE = _Done()


class YieldEvery:
    """``asyncio.sleep`` for Faust's Cython stream iterator, which awaits ``sleep(0)`` before *every*
    event: one event-loop turn (an epoll call and its handles) per record, ~0.03 ms of the worker's
    CPU per experience measured under py-spy. This one yields on every `n`-th zero sleep and returns
    at once otherwise; a stream whose buffer runs empty still waits on it (and yields) as before, and
    any other delay is asyncio.sleep's."""

    def __init__(self, n: int):
        self.n, self.i = n, 0

    def __call__(self, delay: float, result: Any = None) -> Any:
        if delay == 0 and result is None:
            self.i += 1
            if self.i < self.n:
                return _DONE
            self.i = 0
        return asyncio.sleep(delay, result)


STREAM_YIELD_EVERY = 32


_original_create = None


def tune_fetch(min_bytes: int, max_wait_ms: int) -> None:
    """aiokafka fetch size/wait for the worker's consumer, which Faust 0.15.3 does not expose (it passes
    fetch_max_wait_ms=1500 and leaves fetch_min_bytes at 1): the broker answers a fetch once `min_bytes`
    are there or after `max_wait_ms`. With 1 byte every produce request of a raw writer costs the worker a
    fetch round (broker request, response parse in the consumer thread, and a cross-thread getmany with
    its wake-ups). The max wait also bounds a stall of aiokafka's fetcher: 100 ms after a response whose
    records are not yet consumed it fetches the *other* partitions only, and that fetch waits on quiet
    partitions for up to the max wait while raw cannot be fetched (streams/README.md, "Fetch settings")."""
    global _original_create
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    if _original_create is None:
        _original_create = AIOKafkaConsumerThread._create_worker_consumer

    def _create_worker_consumer(self: Any, transport: Any) -> Any:
        consumer = _original_create(self, transport)
        consumer._fetch_min_bytes = min_bytes  # read when the consumer starts its fetcher
        consumer._fetch_max_wait_ms = max_wait_ms
        return consumer

    AIOKafkaConsumerThread._create_worker_consumer = _create_worker_consumer  # type: ignore[method-assign]  # the patch, by design


def require_faust(installed: str | None = None) -> None:
    """One-line refusal to run on a faust-streaming other than the one these patches copy."""
    from faust import __version__

    installed = installed or __version__
    if installed != FAUST_VERSION:
        from rftbus.errors import RftbusError

        raise RftbusError(f"the streams worker patches faust-streaming {FAUST_VERSION} internals (streams/fastpath.py, "
                          f"streams/idempotent.py, streams/offsets.py) but {installed} is installed: "
                          f"pip install faust-streaming=={FAUST_VERSION}")


def install() -> None:
    require_faust()
    Consumer._drain_messages = _drain_messages  # type: ignore[method-assign,assignment]  # the patch
    try:
        from faust._cython import streams as cstreams
    except ImportError:  # pure-Python Faust: its own iterator, left as it is
        return
    if not isinstance(cstreams.sleep, YieldEvery):
        cstreams.sleep = YieldEvery(STREAM_YIELD_EVERY)


def uninstall() -> None:
    Consumer._drain_messages = _original_drain  # type: ignore[method-assign]  # the patch, by design
    if _original_create is not None:
        from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

        AIOKafkaConsumerThread._create_worker_consumer = _original_create  # type: ignore[method-assign]  # the patch, by design
    try:
        from faust._cython import streams as cstreams
    except ImportError:
        return
    cstreams.sleep = asyncio.sleep
