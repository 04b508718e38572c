"""Live status files: each long-running process writes `<state_dir>/status/<role>-<id>.json`.

Files rather than a topic, because the main job's display wants the latest figures of each process
instantly and a crashed process's last words stay readable. Writes are atomic (tmp + rename).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


def status_dir(state_dir: Path) -> Path:
    return Path(state_dir) / "status"


def write_status(state_dir: Path, role: str, ident: str, data: dict[str, Any]) -> Path:
    folder = status_dir(state_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{role}-{ident}.json"
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"role": role, "id": ident, "pid": os.getpid(), "updated_at": time.time(), **data}))
    os.replace(tmp, path)
    return path


def read_statuses(state_dir: Path, role: str | None = None) -> list[dict[str, Any]]:
    """Every readable status file (of one role if given); a half-written or foreign file is skipped."""
    out = []
    folder = status_dir(state_dir)
    if not folder.exists():
        return out
    for path in sorted(folder.glob(f"{role or '*'}-*.json")):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return out
