"""The live status file `<state_dir>/status/trainer-<id>.json`, rewritten atomically every ~1 s."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any


class StatusFile:
    def __init__(self, state_dir: Path, ident: str, interval_s: float):
        self.path = Path(state_dir) / "status" / f"trainer-{ident}.json"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.interval = interval_s
        self.fields: dict[str, Any] = {"role": "trainer", "id": ident, "pid": os.getpid(), "state": "starting"}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trainer-status", daemon=True)

    def update(self, **fields: Any) -> None:
        self.fields.update(fields)

    def write(self) -> None:
        data = {**self.fields, "updated_at": time.time()}
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.path)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.write()

    def start(self) -> StatusFile:
        self.write()
        self._thread.start()
        return self

    def stop(self, state: str = "stopped") -> None:
        self._stop.set()
        self.update(state=state)
        self.write()
