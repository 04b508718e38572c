"""#37: each Kafka node of `rftbus run`'s cluster has its own restart budget, and a quorum keeps the run going.
Through the real three-node cluster: four deaths spread over the nodes (the fourth stopped the run when the
budget was shared), then a node past its budget waits out its window while the other two serve."""

from __future__ import annotations

import time

from rftbus.ground.broker import embedded
from rftbus.apps.run.broker_watch import BrokerWatch


def _until(watch: BrokerWatch, cond, timeout: float = 120.0) -> list[str]:
    events: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events += watch.poll()
        if cond():
            return events
        time.sleep(0.2)
    raise AssertionError(f"timed out; events: {events}")


def _all_up(cfg) -> bool:
    return all(p is not None for p in embedded.running_pids(cfg).values())


def test_four_node_deaths_spread_over_the_run_are_all_restarted(cluster):
    watch = BrokerWatch(cluster, None)
    assert cluster.run.max_node_restarts == 3  # the default
    killed: list[int] = []
    events: list[str] = []
    for node in (cluster.broker.node_ids + cluster.broker.node_ids)[:4]:
        killed.append(embedded.kill_node(cluster, node))
        events += _until(watch, lambda: watch.restarts == len(killed) and not watch._thread.is_alive()
                         and _all_up(cluster))
    assert not watch.gave_up, events
    crashes = [e for e in events if "crashed" in e]
    assert len(crashes) == 4
    # each crash names the pid of the node that died (it named node 1's for every node)
    assert all(f"pid {pid})" in e for pid, e in zip(killed, crashes)), crashes


def test_a_node_past_its_budget_waits_while_the_quorum_serves(cluster):
    cfg = cluster.model_copy(update={"run": cluster.run.model_copy(
        update={"max_node_restarts": 1, "restart_window_minutes": 0.5})})
    watch = BrokerWatch(cfg, None)
    node = cfg.broker.node_ids[-1]
    embedded.kill_node(cfg, node)
    _until(watch, lambda: watch.restarts == 1 and not watch._thread.is_alive() and _all_up(cfg))
    embedded.kill_node(cfg, node)  # again, within the window: parked
    events = _until(watch, lambda: node in watch.parked, 10)
    assert not watch.gave_up and "spent its budget" in " ".join(events)
    assert "waiting to restart" in watch.state
    refill = watch.parked[node]
    while time.monotonic() < refill - 1:  # down until its window refills, and the run goes on meanwhile
        events += watch.poll()
        assert embedded.running_pid(cfg, node) is None and not watch.gave_up, events
        time.sleep(0.5)
    events += _until(watch, lambda: watch.restarts == 2 and not watch._thread.is_alive() and _all_up(cfg), 90)
    assert not watch.gave_up, events
