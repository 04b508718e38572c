"""An `rftbus` command as a subprocess with its output in a log file: what tests and benchmarks start.

The child gets the whole resolved config as a file and none of the caller's RFTBUS_* variables
(they would override that file), so it sees exactly the Config the caller built.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


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
