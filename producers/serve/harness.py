"""Running `rftbus serve` as a subprocess (tests, benchmarks): the real command, the real process."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx

from rftbus.child import RftbusChild
from rftbus.config import Config


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
