"""`run.report_to` inside `rftbus run`: the metrics topic's follower (rftbus/consumers/trackers) in a thread of the run,
stopped after the final eval point so the trackers get it."""

from __future__ import annotations

import threading
from collections.abc import Callable

from rftbus.ground.config import Config


def start_tracking(cfg: Config, report: Callable[[str], None]) -> Callable[[], None] | None:
    """Start following; returns its stop (which waits for the drain), or None when no tracker is configured."""
    if not cfg.run.report_to:
        return None
    from rftbus.consumers.trackers.follow import MetricsFollower, make_trackers

    follower = MetricsFollower(cfg, make_trackers(cfg), report)
    stop = threading.Event()

    def run() -> None:
        try:
            follower.run(stop)
        except Exception as e:  # noqa: BLE001 - trackers are a view of the run: their end is reported, not the run's
            report(f"trackers stopped: {type(e).__name__}: {str(e)[:300]}")

    thread = threading.Thread(target=run, name="trackers", daemon=True)
    thread.start()

    def finish() -> None:
        stop.set()
        thread.join(60)
    return finish
