"""Where a process's seconds go: wall and CPU seconds per named phase, and the process's own CPU and memory.

One accumulator per process (`phase`), written into the process's status file with every snapshot
(rftbus/ground/status.write_status), so `rftbus run` can print and keep a profile of every process and phase at the
end (run/profile_table.py) without a profiler attached. A phase's CPU is its thread's (time.thread_time):
what that phase computed, not what the process's other threads (librdkafka's, a status writer) did meanwhile.
Phases nest by name only: time spent in an inner phase also counts in the outer one.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_lock = threading.Lock()
_phases: dict[str, list[float]] = {}  # name -> [wall_s, cpu_s, count]


@contextmanager
def phase(name: str) -> Iterator[None]:
    w0, c0 = time.perf_counter(), time.thread_time()
    try:
        yield
    finally:
        add(name, time.perf_counter() - w0, time.thread_time() - c0)


def add(name: str, wall_s: float, cpu_s: float, count: int = 1) -> None:
    with _lock:
        acc = _phases.setdefault(name, [0.0, 0.0, 0])
        acc[0] += wall_s
        acc[1] += cpu_s
        acc[2] += count


def process_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def snapshot() -> dict[str, Any]:
    """This process's CPU seconds, peak resident memory and phases, for a status file."""
    with _lock:
        phases = {k: {"wall_s": round(v[0], 3), "cpu_s": round(v[1], 3), "count": int(v[2])} for k, v in _phases.items()}
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"cpu_s": round(process_cpu_s(), 2), "rss_peak_mb": round(peak_kb / 1024), "phases": phases}


def reset() -> None:
    with _lock:
        _phases.clear()
