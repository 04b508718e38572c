"""The embedded broker `rftbus run` started is supervised like its children (#18).

If it dies (kill -9, the OOM killer), it is started again on the same data folder, so every record
survives and the stages, which retry their connections, resume by themselves. In a cluster
(`broker.nodes: 3`) each node is watched: a dead node is started again while the other two go on. The restart runs in a
thread because it can take a while (the JVM, and the port: a client reconnecting meanwhile can hold it
for a moment, see docs/RELIABILITY.md item 10), and the live view keeps going meanwhile.
"""

from __future__ import annotations

import os
import threading
import time

from rftbus.ground.broker import embedded
from rftbus.ground.config import Config
from rftbus.apps.run.restart_budget import RestartBudget

RETRY_S = 1.0


class BrokerWatch:
    """Each node has its own restart budget (`run.max_node_restarts` within `run.restart_window_minutes`, #37):
    a node that keeps dying waits out its window while the others serve; the run gives up on the broker only
    when the nodes up or being restarted are no longer a quorum of the controllers (every node is a voter)."""

    def __init__(self, cfg: Config, pid: int | None):
        self.cfg, self.pid = cfg, pid
        self.pids = {n: p for n, p in embedded.running_pids(cfg).items() if p is not None}  # ours: reaped when dead
        window = cfg.run.restart_window_minutes * 60
        self.budgets = {n: RestartBudget(cfg.run.max_node_restarts, window) for n in cfg.broker.node_ids}
        self.parked: dict[int, float] = {}  # node -> when its budget allows a restart again
        self.restarts = 0
        self.gave_up = False
        self.causes: list[str] = []
        self._thread: threading.Thread | None = None
        self._events: list[str] = []
        self._lock = threading.Lock()

    @property
    def quorum(self) -> int:
        return self.cfg.broker.nodes // 2 + 1

    @property
    def cause(self) -> str:
        return self.causes[-1] if self.causes else ""

    @property
    def state(self) -> str:
        if self.gave_up:
            return f"gave up: {self.cause}"
        if self._thread is not None and self._thread.is_alive():
            return "restarting"
        return f"running; waiting to restart node(s) {sorted(self.parked)}" if self.parked else "running"

    def poll(self) -> list[str]:
        """Events since the last poll; starts a restart of the nodes that are gone, within their budgets."""
        with self._lock:
            events, self._events = self._events, []
        if self.gave_up or (self._thread is not None and self._thread.is_alive()):
            return events
        down = [n for n, p in embedded.running_pids(self.cfg).items() if p is None]
        if not down:
            return events
        now = time.monotonic()
        for n in down:
            if n not in self.parked:
                events.append(self._crashed(n))
        start = [n for n in down if self.budgets[n].allows(now)]
        for n in down:
            if n in start:
                self.parked.pop(n, None)
                self.budgets[n].spend(now)
            elif n not in self.parked:
                self.parked[n] = self.budgets[n].refills_at(now)
                events.append(f"broker: node {n} spent its budget ({self.budgets[n].describe()}); started again "
                              f"in {self.parked[n] - now:.0f} s")
        up = self.cfg.broker.nodes - len(down)
        if up + len(start) < self.quorum:
            self.gave_up = True
            events.append(f"broker: gave_up after {self.restarts} restarts: {up + len(start)} of "
                          f"{self.cfg.broker.nodes} node(s) up or restarting, fewer than a quorum of {self.quorum}")
            return events
        if start:
            self.restarts += len(start)
            self._thread = threading.Thread(target=self._restart, args=(start,), name="broker-restart", daemon=True)
            self._thread.start()
        return events

    def _crashed(self, node: int) -> str:
        pid = self.pids.get(node)
        self._reap([node])
        last = embedded.log_tail(self.cfg, 1, node=node).strip()
        who = "the embedded broker" if self.cfg.broker.nodes == 1 else f"Kafka node {node}"
        cause = f"{who} (pid {pid if pid is not None else 'unknown'}) is gone" + (
            f"; its log ends: {last[-200:]}" if last else "")
        self.causes.append(cause)
        return f"broker: crashed: {cause}"

    def _reap(self, nodes: list[int]) -> None:
        """Collect the dead nodes' exit status (they are this process's children), so no zombie stays."""
        for n in nodes:
            pid = self.pids.pop(n, None)
            if pid is None:
                continue
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass

    def _restart(self, nodes: list[int]) -> None:
        t0 = time.monotonic()
        deadline = t0 + max(60.0, 2 * self.cfg.broker.start_timeout_s)
        while True:
            try:
                if self.cfg.broker.nodes == 1:
                    self.pid = embedded.start(self.cfg).pid
                else:
                    for n in nodes:
                        embedded.start_node(self.cfg, n)
                self.pids = {n: p for n, p in embedded.running_pids(self.cfg).items() if p is not None}
                what = "the broker" if self.cfg.broker.nodes == 1 else f"node(s) {nodes}"
                msg = f"broker: restarted {what} on the same data in {time.monotonic() - t0:.1f}s (restart " \
                      f"{self.restarts}; pids {sorted(self.pids.values())})"
                break
            except embedded.BrokerError as e:
                if time.monotonic() > deadline:
                    self.gave_up = True
                    self.causes.append(f"cannot restart the embedded broker: {str(e).splitlines()[0]}")
                    msg = f"broker: gave_up: {self.cause}"
                    break
                time.sleep(RETRY_S)
        with self._lock:
            self._events.append(msg)

    def wait(self, timeout: float = 120.0) -> None:
        """Let a restart in progress finish (before the run stops the broker for good)."""
        if self._thread is not None:
            self._thread.join(timeout)
