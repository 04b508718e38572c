"""Making a cached folder once per machine, however many processes ask for it at once (test workers, a cluster's
nodes): the folder is complete when its marker file is there; one process holds a file lock and makes it, the
others wait on the lock and then find it made. The maker writes the marker last (into a folder it renames into
place), so a folder cut short by a crash is never taken for a complete one. Used for the Kafka jars, the
OpenTelemetry Collector and a GGUF's converted folder."""

from __future__ import annotations

import fcntl
from collections.abc import Callable
from pathlib import Path


def once(folder: Path, marker: str, make: Callable[[], object], lock: Path | None = None) -> None:
    """`folder` complete (`folder/marker` a file), calling `make` under an exclusive lock (default `<folder>.lock`
    beside it) if it is not."""
    if (folder / marker).is_file():
        return
    lock = lock or folder.with_name(folder.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        if not (folder / marker).is_file():
            make()
