"""Faults of a three-node cluster (`rftbus chaos --nodes 3`): kill -9 the node that leads the loop's
partitions and start it again later, and a rolling restart of every node (controlled shutdowns, one at a
time). The loop should keep training through each: measured as the stall (the longest gap between trainer
steps around the fault) and the time until every partition's ISR is whole again."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

from rftbus.broker import embedded
from rftbus.chaos import faults as F
from rftbus.config import Config
from rftbus.kafka.clients import make_admin
from rftbus.kafka.inspect import partition_layout

LOOP_TOPICS = ("weights", "raw", "curated")  # what the node to kill should lead: weights first (one partition)


class StepWatch:
    """The trainer's step changes over time (sampled every 0.1 s from its status file), in a thread."""

    def __init__(self, state_dir):
        self.state_dir = state_dir
        self.changes: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="step-watch", daemon=True)

    def start(self) -> StepWatch:
        self._thread.start()
        return self

    def _run(self) -> None:
        last = -1
        while not self._stop.wait(0.1):
            step = F.trainer_step(self.state_dir)
            if step != last:
                self.changes.append((time.monotonic(), step))
                last = step

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def stall(self, t_from: float, t_to: float) -> float:
        """The longest time without a new trainer step between the last step before `t_from` and the first
        step after `t_to` (a window that still has no step after it counts up to now)."""
        times = [t for t, _ in self.changes]
        before = max((t for t in times if t <= t_from), default=t_from)
        after = next((t for t in times if t > t_to), time.monotonic())
        inside = [before] + [t for t in times if before < t < after] + [after]
        return max(b - a for a, b in zip(inside, inside[1:]))


def loop_leader(cfg: Config) -> int:
    """The node leading the weights partition, or else the most raw and curated partitions."""
    layout = partition_layout(make_admin(cfg))
    names = [getattr(cfg.topics, k).name for k in LOOP_TOPICS]
    votes: Counter[int] = Counter()
    for i, name in enumerate(names):
        for leader, _, _ in layout.get(name, {}).values():
            if leader >= 0:
                votes[leader] += 100 if i == 0 else 1
    if not votes:
        raise RuntimeError("no partition of the loop's topics has a leader")
    return votes.most_common(1)[0][0]


def under_replicated(cfg: Config, admin) -> int:
    names = {s.name for s in cfg.topics.all().values()}
    layout = partition_layout(admin)
    return sum(len(isr) < len(replicas) for name, parts in layout.items() if name in names
               for _, replicas, isr in parts.values())


def wait_isr_whole(cfg: Config, timeout_s: float) -> float | None:
    """Seconds until no partition of the loop's topics is under-replicated (None: not within timeout_s)."""
    t0 = time.monotonic()
    admin = make_admin(cfg)  # one client for every poll
    while time.monotonic() - t0 < timeout_s:
        try:
            if under_replicated(cfg, admin) == 0:
                return time.monotonic() - t0
        except Exception:  # noqa: BLE001 - metadata unavailable for a moment during the failover: ask again
            pass
        time.sleep(0.5)
    return None


def leader_kill(cfg: Config, watch: StepWatch, down_s: float, timeout_s: float,
                running: Callable[[], bool]) -> tuple[F.Fault, bool]:
    node = loop_leader(cfg)
    step = F.trainer_step(cfg.state_dir)
    fault = F.Fault("leader_kill", f"kill -9 Kafka node {node} (leads the weights / raw / curated partitions) at "
                    f"trainer step {step}; start it again after {down_s:g} s", 0.0)
    t_kill = time.monotonic()
    pid = embedded.kill_node(cfg, node)
    # the loop must go on without the node: the trainer steps while it is down
    stepped_while_down = F.wait_trainer_step(cfg.state_dir, step, max(down_s, 1.0) + timeout_s, running)
    left = down_s - (time.monotonic() - t_kill)
    if left > 0:
        time.sleep(left)
    t_start = time.monotonic()
    new = embedded.start_node(cfg, node)
    isr = wait_isr_whole(cfg, timeout_s)
    after = F.trainer_step(cfg.state_dir)
    F.wait_trainer_step(cfg.state_dir, after, timeout_s, running)
    fault.metrics = {"stall_s": round(watch.stall(t_kill, t_kill), 2),
                     "isr_recovery_s": None if isr is None else round(isr, 1),
                     "restart_s": round(time.monotonic() - t_start, 1)}
    fault.notes.append(f"node {node} pid {pid} -> {new}; trainer stepped while it was down: {stepped_while_down}")
    return fault, stepped_while_down and isr is not None


def rolling_restart(cfg: Config, watch: StepWatch, timeout_s: float,
                    running: Callable[[], bool]) -> tuple[F.Fault, bool]:
    fault = F.Fault("rolling_restart", "controlled restart of every node, one at a time, each once the ISR is whole",
                    0.0)
    t0 = time.monotonic()
    ok = True
    isr_times = []
    for node in cfg.broker.node_ids:
        embedded.stop_node(cfg, node)
        embedded.start_node(cfg, node)
        isr = wait_isr_whole(cfg, timeout_s)
        ok = ok and isr is not None
        isr_times.append(isr)
    step = F.trainer_step(cfg.state_dir)
    ok = ok and F.wait_trainer_step(cfg.state_dir, step, timeout_s, running)
    fault.metrics = {"stall_s": round(watch.stall(t0, time.monotonic()), 2),
                     "isr_recovery_s": round(max((t for t in isr_times if t is not None), default=0.0), 1),
                     "restart_s": round(time.monotonic() - t0, 1)}
    return fault, ok
