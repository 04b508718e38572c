"""Faults of a three-node cluster (`rftbus chaos --nodes 3`): kill -9 the node that leads the loop's
partitions, freeze (SIGSTOP) the node that coordinates the trainer's group or leads the weights partition,
and a rolling restart of every node (controlled shutdowns, one at a time). The cluster belongs to the
attacked `rftbus run`, whose supervisor restarts a dead node within its restart budget (#37); the driver only
kills and waits. The loop should keep training through each fault: measured as the stall (the longest gap
between trainer steps around the fault) and the time until every partition's ISR is whole again."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import KafkaException

from rftbus.ground.broker import embedded
from rftbus.apps.chaos import faults as F
from rftbus.ground.config import Config
from rftbus.ground.errors import RftbusError
from rftbus.ground.kafka.clients import BrokerUnreachable, check_reachable, make_admin
from rftbus.ground.kafka.inspect import partition_layout

T = TypeVar("T")
LOOP_TOPICS = ("weights", "raw", "curated")  # what the node to kill should lead: weights first (one partition)


class StepWatch:
    """When the trainer stepped, from its status file (read every 0.1 s, in a thread): the status, rewritten
    once a second, lists its last steps with their times, so gaps are exact rather than rounded to the
    status file's second."""

    def __init__(self, state_dir):
        self.state_dir = state_dir
        self.changes: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="step-watch", daemon=True)

    def start(self) -> StepWatch:
        self._thread.start()
        return self

    def _run(self) -> None:
        last_step, last_t = -1, 0.0
        to_monotonic = time.monotonic() - time.time()
        while not self._stop.wait(0.1):
            statuses = [s for s in F.read_statuses(self.state_dir, "trainer") if s.get("role") == "trainer"]
            recent = sorted((float(t), int(n)) for s in statuses for t, n in s.get("recent_steps") or ())
            if not recent:  # a trainer that does not list them: when the step was seen to change
                step = F.status_trainer_step(statuses)
                recent = [(time.time(), step)] if step != last_step else []
            for t, step in recent:  # by time: a restarted trainer repeats the steps after its checkpoint
                if t > last_t:
                    self.changes.append((t + to_monotonic, step))
                    last_step, last_t = step, t

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


AFTER_S = 10.0  # a fault's window runs until this long after the node is back (kill) or running again (freeze)


def ask(fn: Callable[[], T], what: str, timeout_s: float = 90.0) -> T:
    """A metadata question asked until the cluster answers (a failover in progress times out or errs)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return fn()
        except (KafkaException, TimeoutError, RuntimeError) as e:
            if time.monotonic() > deadline:
                raise RftbusError(f"{what}: no answer from the cluster within {timeout_s:g} s ({e!r})") from None
            time.sleep(1.0)


def loop_leaders(cfg: Config) -> list[int]:
    """Every node, the one leading the weights partition first, then by how many raw and curated partitions
    it leads."""
    layout = ask(lambda: partition_layout(make_admin(cfg)), "reading the partition leaders")
    names = [getattr(cfg.topics, k).name for k in LOOP_TOPICS]
    votes: Counter[int] = Counter({n: 0 for n in cfg.broker.node_ids})
    for i, name in enumerate(names):
        for leader, _, _ in layout.get(name, {}).values():
            if leader >= 0:
                votes[leader] += 100 if i == 0 else 1
    return [n for n, _ in votes.most_common()]


def trainer_coordinator(cfg: Config) -> int:
    """The node coordinating the trainer's consumer group (its offset commits go there)."""
    group = cfg.trainer.group_id

    def describe() -> int:
        # A new admin client's first describe_consumer_groups never answered on a three-node cluster
        # (librdkafka 2.14.2: 3 of 3 timed out after 15 s); once it has metadata, it answers in ~0.1 s.
        admin = make_admin(cfg)
        admin.list_topics(timeout=10)
        return admin.describe_consumer_groups([group])[group].result(15).coordinator.id

    return ask(describe, "finding the trainer group's coordinator")


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


def leaders_per_node(cfg: Config) -> tuple[dict[int, int], int]:
    """How many of the loop's partitions each node leads, and how many are led by a node other than their
    preferred (first) replica."""
    names = {s.name for s in cfg.topics.all().values()}
    layout = ask(lambda: partition_layout(make_admin(cfg)), "reading the partition leaders")
    led: Counter[int] = Counter({n: 0 for n in cfg.broker.node_ids})
    off = 0
    for name, parts in layout.items():
        if name not in names:
            continue
        for leader, replicas, _ in parts.values():
            led[leader] += 1
            off += bool(replicas) and leader != replicas[0]
    return dict(led), off


def wait_balanced(cfg: Config, timeout_s: float) -> float | None:
    """Seconds until every partition of the loop's topics is led by its preferred replica again (the cluster's
    own preferred-leader election, `leader.imbalance.check.interval.seconds`); None: not within timeout_s."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if leaders_per_node(cfg)[1] == 0:
            return time.monotonic() - t0
        time.sleep(1.0)
    return None


NODE_FAULTS = ("leader_kill", "coordinator_freeze", "leader_freeze", "rolling_restart")


def interleave(plan) -> list[tuple[str, str]]:
    """The plan's node faults spread over the run: kills and freezes alternate, the rolling restart last."""
    kills = [("leader_kill", "")] * plan.leader_kills
    freezes = [("coordinator_freeze", "")] * plan.coordinator_freezes + [("leader_freeze", "")] * plan.leader_freezes
    mixed: list[tuple[str, str]] = []
    while kills or freezes:
        mixed += kills[:1] + freezes[:1]
        kills, freezes = kills[1:], freezes[1:]
    return mixed + [("rolling_restart", "")] * plan.rolling_restarts


class NodeFaults:
    """The cluster faults of one chaos run. Node deaths are spread so that no node dies more often than the
    run's per-node restart budget allows within its window (the point is that deaths spread over the run
    never stop it, not to trip the crash-loop guard); one death per node is kept for the rolling restart."""

    def __init__(self, cfg: Config, watch: StepWatch, timeout_s: float, running: Callable[[], bool],
                 rolling_left: int):
        self.cfg, self.watch, self.timeout_s, self.running = cfg, watch, timeout_s, running
        self.deaths: dict[int, list[float]] = {n: [] for n in cfg.broker.node_ids}
        self.rolling_left = rolling_left
        self.budget = cfg.run.max_node_restarts
        self.window_s = cfg.run.restart_window_minutes * 60

    def run(self, what: str, freeze_s: float) -> tuple[F.Fault, bool]:
        if what.endswith("_freeze"):
            return self.freeze(what, freeze_s)
        return self.leader_kill() if what == "leader_kill" else self.rolling_restart()

    def _recent(self, node: int) -> int:
        now = time.monotonic()
        return sum(now - t < self.window_s for t in self.deaths[node])

    def _stall(self, t_from: float, t_back: float | None) -> float:
        """The longest step gap from the fault until AFTER_S after the node was back (waited for): the same
        window for a kill and a freeze, so a stall that comes after the first step is counted for both."""
        t_to = (t_back if t_back is not None else time.monotonic()) + AFTER_S
        time.sleep(max(0.0, t_to - time.monotonic()))
        return self.watch.stall(t_from, t_to)

    def _victim(self, preferred: list[int]) -> int | None:
        room = self.budget - (1 if self.rolling_left else 0)
        return next((n for n in preferred if self._recent(n) < room), None)

    def _back(self, node: int) -> int | None:
        """The node's new pid once the run's supervisor started it again and it answers on its own port
        (None: not within the timeout)."""
        here = f"{self.cfg.broker.host}:{self.cfg.broker.port_of(node)}"
        alone = self.cfg.model_copy(update={"kafka": self.cfg.kafka.model_copy(update={"bootstrap_servers": here})})
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline and self.running():
            pid = embedded.running_pid(self.cfg, node)
            if pid is not None:
                try:
                    check_reachable(alone, timeout=2.0, wait=False)
                    return pid
                except BrokerUnreachable:
                    pass
            time.sleep(0.5)
        return None

    def leader_kill(self) -> tuple[F.Fault, bool]:
        node = self._victim(loop_leaders(self.cfg))
        if node is None:
            return F.Fault("leader_kill", "skipped: every node spent its restart budget", 0.0), True
        step = F.trainer_step(self.cfg.state_dir)
        fault = F.Fault("leader_kill", f"kill -9 Kafka node {node} (leads the weights / raw / curated partitions) "
                        f"at trainer step {step}; the run restarts it", 0.0)
        t_kill = time.monotonic()
        pid = embedded.kill_node(self.cfg, node)
        self.deaths[node].append(t_kill)
        new = self._back(node)
        t_back = time.monotonic() if new is not None else None
        stepped = F.wait_trainer_step(self.cfg.state_dir, step, self.timeout_s, self.running)
        isr = wait_isr_whole(self.cfg, self.timeout_s) if new is not None else None
        fault.metrics = {"stall_s": round(self._stall(t_kill, t_back), 2),
                         "isr_recovery_s": None if isr is None else round(isr, 1),
                         "down_s": round(time.monotonic() - t_kill, 1)}
        fault.notes.append(f"node {node} pid {pid} -> {new}")
        return fault, stepped and isr is not None

    def freeze(self, what: str, freeze_s: float) -> tuple[F.Fault, bool]:
        """SIGSTOP the node coordinating the trainer's group (`coordinator_freeze`) or leading the weights
        partition (`leader_freeze`) for freeze_s, then SIGCONT: its connections stay open, so clients wait
        for answers that never come until their requests time out (kafka.request_timeout_s)."""
        node = trainer_coordinator(self.cfg) if what == "coordinator_freeze" else loop_leaders(self.cfg)[0]
        role = "coordinates the trainer's group" if what == "coordinator_freeze" else "leads the weights partition"
        pid = embedded.running_pid(self.cfg, node)
        if pid is None:
            return F.Fault(what, f"skipped: node {node} is not running", 0.0), True
        step = F.trainer_step(self.cfg.state_dir)
        fault = F.Fault(what, f"SIGSTOP Kafka node {node} ({role}) for {freeze_s:g} s at trainer step {step}", 0.0)
        t = time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        try:
            stepped = F.wait_trainer_step(self.cfg.state_dir, step, freeze_s, self.running)
            left = freeze_s - (time.monotonic() - t)
            if left > 0:
                time.sleep(left)
        finally:
            os.kill(pid, signal.SIGCONT)
        t_cont = time.monotonic()
        stepped = stepped or F.wait_trainer_step(self.cfg.state_dir, step, self.timeout_s, self.running)
        isr = wait_isr_whole(self.cfg, self.timeout_s)
        fault.metrics = {"stall_s": round(self._stall(t, t_cont), 2),
                         "isr_recovery_s": None if isr is None else round(isr, 1)}
        during = any(t < ts < t + freeze_s for ts, _ in self.watch.changes)
        fault.notes.append(f"trainer stepped while node {node} was frozen: {during}")
        return fault, stepped and isr is not None

    def rolling_restart(self) -> tuple[F.Fault, bool]:
        fault = F.Fault("rolling_restart", "controlled restart of every node, one at a time, each once the ISR is "
                        "whole (the run restarts each)", 0.0)
        self.rolling_left -= 1
        t0 = time.monotonic()
        ok = True
        isr_times = []
        for node in self.cfg.broker.node_ids:
            embedded.stop_node(self.cfg, node)
            self.deaths[node].append(time.monotonic())
            ok = ok and self._back(node) is not None
            isr = wait_isr_whole(self.cfg, self.timeout_s)
            ok = ok and isr is not None
            isr_times.append(isr)
        step = F.trainer_step(self.cfg.state_dir)
        ok = ok and F.wait_trainer_step(self.cfg.state_dir, step, self.timeout_s, self.running)
        t_back = time.monotonic()
        skewed = leaders_per_node(self.cfg)
        balanced = wait_balanced(self.cfg, self.timeout_s)  # the last node restarted leads nothing until then
        fault.metrics = {"stall_s": round(self.watch.stall(t0, t_back), 2),
                         "isr_recovery_s": round(max((t for t in isr_times if t is not None), default=0.0), 1),
                         "restart_s": round(t_back - t0, 1),
                         "leader_balance_s": None if balanced is None else round(balanced, 1)}
        fault.notes.append(f"partitions led per node after the restarts {skewed[0]} ({skewed[1]} off their preferred "
                           f"leader), then {leaders_per_node(self.cfg)[0]}")
        return fault, ok and balanced is not None


def freeze_vs_kill(faults: list[F.Fault]) -> dict[str, float | None]:
    """The longest trainer-step gap in the window of a freeze and of a kill (`NodeFaults._stall`), and their
    ratio (#37: at most 1.5)."""
    def longest(kinds: tuple[str, ...]) -> float | None:
        return max((float(f.metrics["stall_s"] or 0.0) for f in faults
                    if f.kind in kinds and "stall_s" in f.metrics), default=None)

    freeze, kill = longest(("coordinator_freeze", "leader_freeze")), longest(("leader_kill",))
    ratio = round(freeze / kill, 2) if freeze is not None and kill else None
    return {"freeze_stall_s": freeze, "kill_stall_s": kill, "ratio": ratio}
