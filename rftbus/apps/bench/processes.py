"""Running `rftbus streams` and `rftbus serve` as subprocesses (the real commands, the real processes) and
reading topics back: shared by the tests and the benchmarks, never by the runtime."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from rftbus.ground.config import Config, write_config
from rftbus.ground.kafka.read import read_to_end

# Environment for a child worker: the whole Config, so it sees exactly what the caller built.
CONFIG_ENV = "RFTBUS_CONFIG"


class RftbusChild:
    def __init__(self, config_path: Path, args: list[str], log_path: Path, env: dict[str, str] | None = None):
        self.log_path = log_path
        self._log = open(log_path, "ab")
        exe = Path(sys.executable).parent / "rftbus"
        full_env = {**{k: v for k, v in os.environ.items() if not k.startswith("RFTBUS_")}, **(env or {})}
        self.proc = subprocess.Popen([str(exe), "--config", str(config_path), *args],
                                     stdout=self._log, stderr=subprocess.STDOUT, env=full_env)

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_bytes().decode(errors="replace")

    def tail(self, n: int = 3000) -> str:
        return self.log()[-n:]

    def kill(self) -> None:
        """SIGKILL: no flush, no commit (what a crash looks like)."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then SIGKILL after `timeout`; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        return self.proc.returncode


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
                                                                 for a in st.get("assigned") or ()):
                return st
            time.sleep(0.2)
        raise TimeoutError(f"worker {self.worker_id} not ready after {timeout}s: {self.tail()}")


def read_all(cfg: Config, topic: str, *, decode=None, idle_s: float = 1.0, timeout_s: float = 30.0) -> list:
    """Every committed message of a topic (from the beginning to its end now), decoded if asked."""
    return [decode(m.value(), None) if decode else m
            for m in read_to_end(cfg, topic, timeout_s=timeout_s, poll_s=idle_s, strict=False)]


class ServeProcess(RftbusChild):
    """`rftbus --config <cfg> serve` with the whole Config written to a file, so it sees exactly what
    the caller built. Secrets in `env` (RFTBUS_SERVE__*_TOKENS) stay out of the written file."""

    def __init__(self, cfg: Config, log_path: Path, env: dict[str, str] | None = None, args: list[str] | None = None):
        self.cfg = cfg
        data = cfg.model_dump(mode="json")
        data["serve"].pop("inference_tokens"), data["serve"].pop("feedback_tokens")  # SecretStr dumps as '****'
        cfg_path = Path(cfg.state_dir) / f"serve-{cfg.serve.port}.yaml"
        cfg_path.write_text(json.dumps(data))  # JSON is YAML
        super().__init__(cfg_path, ["serve", *(args or [])], log_path, env)

    @property
    def url(self) -> str:
        return f"http://{self.cfg.serve.host}:{self.cfg.serve.port}"

    def wait_ready(self, timeout: float = 120.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rftbus serve exited {self.proc.returncode}: {self.tail()}")
            try:
                r = httpx.get(self.url + "/healthz", timeout=2)
                if r.status_code == 200:
                    return r.json()
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise TimeoutError(f"rftbus serve not ready after {timeout}s: {self.tail()}")

    def stop(self, timeout: float = 60.0) -> int:
        return super().stop(timeout)
