"""Waiting in a test for what another thread or process will do: poll a condition until it holds or time is up."""

from __future__ import annotations

import time
from collections.abc import Callable


def until(cond: Callable[[], object], what: str = "", timeout: float = 30.0) -> None:
    """Return once `cond()` is true; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)
