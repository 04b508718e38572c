"""The chaos plan for a three-node cluster (#37): node faults spread over the run, and the freeze-vs-kill check."""

from __future__ import annotations

from rftbus.apps.chaos.failover import freeze_vs_kill, interleave
from rftbus.apps.chaos.faults import Fault
from rftbus.apps.chaos.plan import get_plan, run_overrides


def test_the_cluster_plan_has_at_least_eight_node_faults_spread_over_the_run():
    plan = get_plan("ci", nodes=3)
    faults = [what for what, _ in interleave(plan)]
    node_deaths = faults.count("leader_kill") + faults.count("coordinator_freeze") + faults.count("leader_freeze")
    assert node_deaths >= 8 and faults[-1] == "rolling_restart"
    assert faults[:4] == ["leader_kill", "coordinator_freeze", "leader_kill", "coordinator_freeze"]
    # the nodes keep the run's default restart budget; only the children get a large one
    assert "run.max_node_restarts" not in run_overrides(plan, serve=False)
    # the loop must still be at steady state when the node faults begin: demonstrations for the whole fault phase
    assert run_overrides(plan, serve=False)["run.expert_epochs"] * plan.tasks >= 64 * 1000
    assert "run.expert_epochs" not in run_overrides(get_plan("ci"), serve=False)  # (the one-node plan as it was)


def test_a_freeze_stalling_longer_than_a_kill_is_measured_as_a_ratio():
    def f(kind: str, stall: float) -> Fault:
        return Fault(kind, "", 0.0, metrics={"stall_s": stall})

    faults = [f("leader_kill", 8.0), f("leader_kill", 12.0), f("coordinator_freeze", 14.0), f("leader_freeze", 9.0),
              f("rolling_restart", 30.0)]
    assert freeze_vs_kill(faults) == {"freeze_stall_s": 14.0, "kill_stall_s": 12.0, "ratio": 1.17}
    assert freeze_vs_kill(faults[:2])["ratio"] is None


def test_the_step_watch_takes_exact_step_times_from_the_status_not_the_second_it_is_written(tmp_path):
    """The trainer's status is rewritten once a second; the steps it lists carry their own times, so a 0.3 s
    gap reads 0.3 s and a restart's repeated steps (resumed from a checkpoint) still count as steps."""
    import time

    from rftbus.apps.chaos.failover import StepWatch
    from rftbus.ground.status import write_status

    now = time.time()
    steps = [(now - 5.0, 10), (now - 4.7, 11), (now - 2.2, 12), (now - 2.0, 13)]
    write_status(tmp_path, "trainer", "0", {"step": 13, "recent_steps": steps})
    watch = StepWatch(tmp_path).start()
    deadline = time.monotonic() + 5
    while len(watch.changes) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    write_status(tmp_path, "trainer", "0", {"step": 12, "recent_steps": steps + [(now - 1.0, 11), (now - 0.5, 12)]})
    while len(watch.changes) < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
    watch.stop()
    assert [s for _, s in watch.changes] == [10, 11, 12, 13, 11, 12]
    gaps = [round(b[0] - a[0], 2) for a, b in zip(watch.changes, watch.changes[1:])]
    assert gaps == [0.3, 2.5, 0.2, 1.0, 0.5]
    t11 = watch.changes[1][0]
    assert round(watch.stall(t11 + 0.1, t11 + 0.2), 2) == 2.5  # the gap around the fault, not a 1 s tick
