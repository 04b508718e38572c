"""Restart budgets (#37): N restarts within a sliding window, for children and for each Kafka node."""

from __future__ import annotations

import sys
import time

from rftbus.run.restart_budget import RestartBudget
from rftbus.run.supervisor import ChildSpec, Supervisor


def test_a_budget_refills_as_restarts_leave_the_window():
    b = RestartBudget(burst=2, window_s=10.0)
    assert b.allows(0.0)
    b.spend(0.0)
    b.spend(1.0)
    assert not b.allows(5.0) and b.refills_at(5.0) == 10.0
    assert b.allows(10.0) and b.recent(10.0) == 1  # the first left the window
    assert RestartBudget(0, 10.0).refills_at(0.0) == float("inf")


def test_deaths_further_apart_than_the_window_are_never_given_up_on():
    """A child dying every ~0.4 s with a budget of 1 restart per 0.2 s is restarted every time; the same child
    with a 60 s window (a crash loop) is given up on after its one restart."""
    code = "import time, sys; time.sleep(0.4); sys.exit(1)"
    spaced = ChildSpec("spaced", [sys.executable, "-c", code], max_restarts=1, restart_window_s=0.2)
    looping = ChildSpec("looping", [sys.executable, "-c", code], max_restarts=1, restart_window_s=60.0)
    sup = Supervisor([spaced, looping], backoff_s=0.01)
    sup.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and sup.children["spaced"].restarts < 4:
        sup.poll()
        time.sleep(0.02)
    sup.stop(timeout=5)
    assert sup.children["spaced"].restarts >= 4 and not sup.children["spaced"].gave_up
    assert sup.children["looping"].gave_up and sup.children["looping"].restarts == 1
