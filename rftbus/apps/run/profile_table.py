"""Where a run's CPU-seconds went: every process's CPU, peak memory and phases, at the end of `rftbus run`.

The children report themselves through their status files (rftbus/ground/profile.py rides along with every
snapshot); this process adds its own (the held-out eval runs here) and the embedded broker's, read from /proc.
The table is printed and kept in the summary (`profile`), so a run's cost can be compared with another's.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from rich.table import Table

from rftbus.ground import profile
from rftbus.ground.status import read_statuses


def proc_usage(pid: int) -> dict[str, float] | None:
    """CPU seconds and peak resident MB of a live process (Linux /proc), None when it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
        hwm = next((line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                    if line.startswith("VmHWM:")), "0")
        return {"cpu_s": round(cpu, 2), "rss_peak_mb": round(int(hwm) / 1024)}
    except (OSError, ValueError, IndexError):
        return None


def collect(state_dir: Path, started: float, broker_pids: dict[str, int] | None = None) -> dict[str, Any]:
    """{wall_s, cores, processes: {name: {cpu_s, rss_peak_mb, phases}}} of this run."""
    procs: dict[str, Any] = {}
    for s in read_statuses(state_dir):
        prof = s.get("profile")
        if not prof or float(s.get("updated_at") or 0) < started:
            continue  # an earlier run's file
        procs[f"{s.get('role')}-{s.get('id')}"] = prof
    procs["run (eval)"] = profile.snapshot()
    for node, pid in (broker_pids or {}).items():
        usage = proc_usage(pid)
        if usage is not None:
            procs["broker" if len(broker_pids or {}) == 1 else f"broker-{node}"] = {**usage, "phases": {}}
    return {"wall_s": round(time.time() - started, 1), "cores": len(os.sched_getaffinity(0)), "processes": procs}


def table(prof: dict[str, Any]) -> Table:
    """Processes by CPU, each with its share of the machine's CPU-seconds and its phases (wall / CPU s)."""
    machine = max(prof["wall_s"] * prof["cores"], 1e-9)
    t = Table(title=f"where the CPU went ({prof['wall_s']:.0f} s x {prof['cores']} cores)")
    for col in ("process", "CPU s", "% of machine", "peak MB", "phases: wall s / CPU s"):
        t.add_column(col, justify="right" if col not in ("process", "phases: wall s / CPU s") else "left")
    rows = sorted(prof["processes"].items(), key=lambda kv: -float(kv[1].get("cpu_s") or 0))
    for name, p in rows:
        phases = sorted((p.get("phases") or {}).items(), key=lambda kv: -kv[1]["wall_s"])
        text = ", ".join(f"{k} {v['wall_s']:.0f}/{v['cpu_s']:.0f}" for k, v in phases)
        cpu = float(p.get("cpu_s") or 0)
        t.add_row(name, f"{cpu:.0f}", f"{100 * cpu / machine:.0f}", str(p.get("rss_peak_mb", "")), text)
    return t
