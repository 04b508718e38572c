"""The live status file every long-running process writes (`<state_dir>/status/<role>-<id>.json`).

A daemon thread writes a snapshot about every second, atomically (tmp + os.replace), so readers
never see a torn file; the main loop only updates a dict.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any


class StatusFile:
    def __init__(self, state_dir: Path, role: str, ident: str, interval_s: float = 1.0):
        self.path = Path(state_dir) / "status" / f"{role}-{ident}.json"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.interval = interval_s
        self.fields: dict[str, Any] = {"role": role, "id": ident, "pid": os.getpid(), "started_at": time.time()}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"status-{role}", daemon=True)

    def update(self, **fields: Any) -> None:
        with self._lock:
            self.fields.update(fields)

    def write(self) -> None:
        with self._lock:
            data = dict(self.fields, updated_at=time.time())
        tmp = self.path.with_suffix(f".tmp-{os.getpid()}")
        tmp.write_text(json.dumps(data, default=str))
        os.replace(tmp, self.path)

    def start(self) -> StatusFile:
        self.write()
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.write()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.write()
