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

from rftbus.broker import embedded
from rftbus.config import Config

RETRY_S = 1.0


class BrokerWatch:
    def __init__(self, cfg: Config, max_restarts: int, pid: int | None):
        self.cfg, self.max_restarts, self.pid = cfg, max_restarts, pid
        self.pids = {n: p for n, p in embedded.running_pids(cfg).items() if p is not None}  # ours: reaped when dead
        self.restarts = 0
        self.gave_up = False
        self.causes: list[str] = []
        self._thread: threading.Thread | None = None
        self._events: list[str] = []
        self._lock = threading.Lock()

    @property
    def cause(self) -> str:
        return self.causes[-1] if self.causes else ""

    @property
    def state(self) -> str:
        if self.gave_up:
            return f"gave up: {self.cause}"
        return "restarting" if self._thread is not None and self._thread.is_alive() else "running"

    def poll(self) -> list[str]:
        """Events since the last poll; starts a restart when the broker is gone."""
        with self._lock:
            events, self._events = self._events, []
        if self.gave_up or (self._thread is not None and self._thread.is_alive()):
            return events
        down = [n for n, p in embedded.running_pids(self.cfg).items() if p is None]
        if not down:
            return events
        self._reap(down)
        last = embedded.log_tail(self.cfg, 1, node=down[0]).strip()
        who = "the embedded broker" if self.cfg.broker.nodes == 1 else f"Kafka node {down[0]}"
        cause = f"{who} (pid {self.pids.get(down[0], self.pid)}) is gone" + (f"; its log ends: {last[-200:]}" if last else "")
        self.causes.append(cause)
        events.append(f"broker: crashed: {cause}")
        if self.restarts >= self.max_restarts:
            self.gave_up = True
            events.append(f"broker: gave_up after {self.restarts} restarts")
            return events
        self.restarts += 1
        self._thread = threading.Thread(target=self._restart, name="broker-restart", daemon=True)
        self._thread.start()
        return events

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

    def _restart(self) -> None:
        t0 = time.monotonic()
        deadline = t0 + max(60.0, 2 * self.cfg.broker.start_timeout_s)
        while True:
            try:
                self.pid = embedded.start(self.cfg).pid
                self.pids = {n: p for n, p in embedded.running_pids(self.cfg).items() if p is not None}
                msg = f"broker: restarted on the same data in {time.monotonic() - t0:.1f}s (restart {self.restarts}; " \
                      f"pids {sorted(self.pids.values())})"
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
