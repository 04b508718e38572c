"""Live status files: each long-running process writes `<state_dir>/status/<role>-<id>.json`.

Files rather than a topic, because the main job's display wants the latest figures of each process
instantly and a crashed process's last words stay readable. Writes are atomic (tmp + rename), so a
reader never sees a torn file. `StatusFile` rewrites a snapshot from a daemon thread about every
second, so a main loop only updates a dict; an event loop (Faust) calls `write_status` itself.
"""

from __future__ import annotations

from collections.abc import Callable

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from rftbus.ground import profile


def status_dir(state_dir: Path) -> Path:
    return Path(state_dir) / "status"


def write_status(state_dir: Path, role: str, ident: str, data: dict[str, Any]) -> Path:
    folder = status_dir(state_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{role}-{ident}.json"
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    body = {"role": role, "id": ident, "pid": os.getpid(), "updated_at": time.time(), "profile": profile.snapshot(),
            **data}
    tmp.write_text(json.dumps(body, default=str))
    os.replace(tmp, path)
    return path


def read_statuses(state_dir: Path, role: str | None = None) -> list[dict[str, Any]]:
    """Every readable status file (of one role if given); a half-written or foreign file is skipped."""
    out: list[dict[str, Any]] = []
    folder = status_dir(state_dir)
    if not folder.exists():
        return out
    for path in sorted(folder.glob(f"{role or '*'}-*.json")):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return out


def trainer_step(statuses: list[dict[str, Any]]) -> int:
    """The trainer's latest step from the status files (0 before its first)."""
    return max((int(s.get("step") or 0) for s in statuses if s.get("role") == "trainer"), default=0)


class StatusFile:
    """A status file rewritten by a daemon thread every `interval_s` from fields the owner updates (and, when given,
    the fields `refresh` returns at each write: figures that change without the owner's doing, such as what a
    follower thread read)."""

    def __init__(self, state_dir: Path, role: str, ident: str, interval_s: float = 1.0,
                 refresh: Callable[[], dict[str, Any]] | None = None):
        self.state_dir, self.role, self.ident = Path(state_dir), role, ident
        self.refresh = refresh
        self.path = status_dir(self.state_dir) / f"{role}-{ident}.json"
        self.interval = interval_s
        self.fields: dict[str, Any] = {"started_at": time.time(), "state": "starting"}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"status-{role}", daemon=True)

    def update(self, **fields: Any) -> None:
        with self._lock:
            self.fields.update(fields)

    def write(self) -> None:
        fresh = self.refresh() if self.refresh is not None else {}
        with self._lock:
            self.fields.update(fresh)
            data = dict(self.fields)
        write_status(self.state_dir, self.role, self.ident, data)

    def start(self) -> StatusFile:
        self.write()
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.write()

    def stop(self, **final: Any) -> None:
        """Stop the thread and write the last snapshot (e.g. `state="stopped"`)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.update(**final)
        self.write()


def mark_run(state_dir: Path, started: float) -> None:
    """`rftbus run` notes when it started, so readers of a reused state folder (the studio's dashboard) can
    show this run's data apart from earlier runs' (analytics keeps every run's records)."""
    path = Path(state_dir) / "run" / "started.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"started_at": started, "pid": os.getpid()}))


def run_started(state_dir: Path) -> float | None:
    """When the last `rftbus run` on this state folder started (None: never, or unreadable)."""
    try:
        return float(json.loads((Path(state_dir) / "run" / "started.json").read_text())["started_at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
