"""One event loop, in its own thread, for every async reward of a process.

An async client (the OpenAI SDK's, httpx's) belongs to the loop it first ran on, and the explorer scoring a
group is plain synchronous code: each coroutine is handed to this loop and waited for, so a judge's client is
made once and its concurrent calls overlap, whichever thread scores.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any

_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="rftbus-rewards-aio", daemon=True).start()
        return _loop


def resolve(value: Any) -> Any:
    """`value` itself, or what it resolves to when it is awaitable (run on the shared loop)."""
    if not inspect.isawaitable(value):
        return value

    async def wrap() -> Any:
        return await value

    return asyncio.run_coroutine_threadsafe(wrap(), loop()).result()
