"""Restart budgets (#37): N restarts within a sliding window (the supervisor's use of it: test_supervisor.py)."""

from __future__ import annotations

from rftbus.apps.run.restart_budget import RestartBudget


def test_a_budget_refills_as_restarts_leave_the_window():
    b = RestartBudget(burst=2, window_s=10.0)
    assert b.allows(0.0)
    b.spend(0.0)
    b.spend(1.0)
    assert not b.allows(5.0) and b.refills_at(5.0) == 10.0
    assert b.allows(10.0) and b.recent(10.0) == 1  # the first left the window
    assert RestartBudget(0, 10.0).refills_at(0.0) == float("inf")
