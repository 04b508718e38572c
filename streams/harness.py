"""Running `rftbus streams` as a subprocess and reading topics back: shared by the tests and the benchmark."""

from __future__ import annotations

import json
import time
from pathlib import Path

from rftbus.child import RftbusChild
from rftbus.config import Config, write_config
from rftbus.kafka.read import read_to_end

# Environment for a child worker: the whole Config, so it sees exactly what the caller built.
CONFIG_ENV = "RFTBUS_CONFIG"


class WorkerProcess(RftbusChild):
    def __init__(self, cfg: Config, worker_id: str, log_path: Path, extra_env: dict | None = None):
        self.cfg = cfg
        self.worker_id = worker_id
        self.status_path = Path(cfg.state_dir) / "status" / f"streams-{worker_id}.json"
        cfg_path = write_config(cfg, Path(cfg.state_dir) / f"streams-{worker_id}.yaml")
        super().__init__(cfg_path, ["streams", "--worker-id", worker_id], log_path, extra_env)

    def status(self) -> dict | None:
        try:
            return json.loads(self.status_path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def wait_ready(self, timeout: float = 60.0) -> dict:
        """Until the worker has partitions of raw assigned (Faust has joined the group)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker {self.worker_id} exited {self.proc.returncode}: {self.tail()}")
            st = self.status()
            if st and st.get("pid") == self.proc.pid and any(a.startswith(self.cfg.topics.raw.name + "/")
                                                                 for a in st["assigned"]):
                return st
            time.sleep(0.2)
        raise TimeoutError(f"worker {self.worker_id} not ready after {timeout}s: {self.tail()}")


def read_all(cfg: Config, topic: str, *, decode=None, idle_s: float = 1.0, timeout_s: float = 30.0) -> list:
    """Every committed message of a topic (from the beginning to its end now), decoded if asked."""
    return [decode(m.value(), None) if decode else m
            for m in read_to_end(cfg, topic, timeout_s=timeout_s, poll_s=idle_s, strict=False)]
