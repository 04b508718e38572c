"""The chaos plan for a three-node cluster (#37): node faults spread over the run, and the freeze-vs-kill check."""

from __future__ import annotations

from rftbus.chaos.failover import freeze_vs_kill, interleave
from rftbus.chaos.faults import Fault
from rftbus.chaos.plan import get_plan, run_overrides


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
