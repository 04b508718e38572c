"""Swapping a prefetched weight version into a rollout engine (explorers, serve); the follower that prefetches
it is weights/follower.py."""

from __future__ import annotations

import time
from collections.abc import Callable

from rftbus.ground.errors import RftbusError, SwapDeferred
from rftbus.ground.weights.follower import WeightFollower


def swap_in_ready(follower: WeightFollower, engine, report: Callable[[str], None], wait_s: float = 0.0) -> bool:
    """Load the follower's prefetched newer version into `engine`; True if it swapped.

    Call it only between generations (explorer: between groups; serve: between batches). Waits up to
    `wait_s` while a newer, not refused version is still being fetched. A state dict that does not
    fit the model is refused (remembered by the follower) and the engine keeps its weights.
    """
    deadline = time.monotonic() + wait_s
    while True:
        ready = follower.take_ready(engine.version)
        if ready:
            rec, state = ready
            try:
                engine.load_weights(state, rec.version)
            except SwapDeferred as e:
                follower.defer(rec, state)
                report(f"weights: v{rec.version} not swapped in yet: {e}")
                return False
            except (RuntimeError, ValueError, KeyError, RftbusError) as e:  # RftbusError: an adapter of another base
                follower.refuse(rec, f"does not fit the model: {e}")
                return False
            report(f"weights: now serving v{rec.version}")
            return True
        latest = follower.latest_version()
        behind = latest is not None and latest > engine.version and latest not in follower.refused
        if not behind or time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
