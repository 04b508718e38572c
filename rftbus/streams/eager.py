"""Running a coroutine eagerly, and a zero sleep that yields only every n-th time: the asyncio pieces the
streams worker's inline delivery uses (transport.py). Plain asyncio, no Faust.

`run_eager` runs a coroutine up to its first suspension point (what Python 3.12's eager tasks do): when it
finishes without suspending, no task was made; when it suspends, the rest of the *same* coroutine is an
awaitable the caller hands to whatever would have awaited the coroutine.
"""

from __future__ import annotations

import asyncio
from typing import Any, Coroutine, Generator


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
