"""rftbus/streams/eager.py: eager delivery keeps a coroutine's semantics; the stream's sleep yields every n-th time."""

from __future__ import annotations

import asyncio

import pytest

from rftbus.streams.eager import YieldEvery, run_eager


def test_completes_inline_without_a_loop_turn():
    ran = []

    async def cb():
        ran.append(1)

    async def main():
        loop = asyncio.get_running_loop()
        turns = []
        loop.call_soon(turns.append, 1)
        assert run_eager(cb()) is None
        assert ran == [1] and turns == []  # done before the loop ran anything else

    asyncio.run(main())


def test_error_before_suspension_propagates():
    async def cb():
        raise ValueError("bad")

    with pytest.raises(ValueError):
        run_eager(cb())


def test_suspended_coroutine_continues_under_a_task_with_its_result_and_errors():
    async def main():
        gate = asyncio.Event()
        seen = []

        async def cb(fail: bool):
            seen.append("start")
            await gate.wait()
            await asyncio.sleep(0)
            seen.append("end")
            if fail:
                raise KeyError("late")
            return 42

        rest = run_eager(cb(False))
        assert rest is not None and seen == ["start"]
        task = asyncio.ensure_future(rest)
        await asyncio.sleep(0.01)
        assert not task.done()
        gate.set()
        assert await task == 42 and seen == ["start", "end"]

        rest = run_eager(cb(True))
        with pytest.raises(KeyError):
            await rest

    asyncio.run(main())


def test_cancellation_reaches_the_coroutine():
    async def main():
        cleaned = []

        async def cb():
            try:
                await asyncio.Event().wait()
            finally:
                cleaned.append(True)

        task = asyncio.ensure_future(run_eager(cb()))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert cleaned == [True]

    asyncio.run(main())


def test_wait_first_escape_still_works():
    """The slow path runs under mode's wait_first: a flow suspension abandons a blocked delivery."""
    from mode import Service

    async def main():
        svc = Service()
        suspend = asyncio.Event()
        blocked = asyncio.Event()
        cancelled = []

        async def cb():
            try:
                await blocked.wait()
            except asyncio.CancelledError:
                cancelled.append(True)
                raise

        rest = run_eager(cb())
        asyncio.get_running_loop().call_later(0.01, suspend.set)
        res = await svc.wait_first(rest, suspend)
        await asyncio.sleep(0)
        assert suspend in res.done and cancelled == [True]

    asyncio.run(main())


def test_real_delays_are_real():
    async def main():
        sleep = YieldEvery(4)
        loop = asyncio.get_running_loop()
        t = loop.time()
        await sleep(0.02)
        assert loop.time() - t >= 0.015
        assert await sleep(0, "x") == "x"

    asyncio.run(main())


def test_yield_every_counts_turns():
    async def main():
        sleep = YieldEvery(3)
        loop = asyncio.get_running_loop()
        seen = []
        for i in range(6):
            loop.call_soon(seen.append, i)
            await sleep(0)
            seen.append(f"after{i}")
        return seen

    seen = asyncio.run(main())
    # callbacks scheduled before sleeps 0,1,2 run only at sleep 2 (the third), those of 3,4,5 at sleep 5
    assert seen.index(0) > seen.index("after1") and seen.index(0) < seen.index("after2")
    assert seen.index(3) > seen.index("after4") and seen.index(3) < seen.index("after5")
