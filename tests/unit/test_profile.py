"""rftbus/ground/profile.py and the run's table of it (run/profile_table.py): phases add up wall and CPU seconds,
ride along in every status file, and the run's table names every process of this run only."""

from __future__ import annotations

import io
import os
import time

from rich.console import Console

from rftbus.ground import profile
from rftbus.apps.run.profile_table import collect, proc_usage, table
from rftbus.ground.status import write_status


def test_phases_count_wall_and_cpu_and_ride_in_status_files(tmp_path):
    profile.reset()
    with profile.phase("busy"):  # 50 ms of this process's CPU, however long a loaded machine takes to give it
        t = time.process_time()
        while time.process_time() - t < 0.05:
            pass
    with profile.phase("idle"):
        time.sleep(0.05)
    snap = profile.snapshot()
    busy, idle = snap["phases"]["busy"], snap["phases"]["idle"]
    assert busy["count"] == idle["count"] == 1
    assert busy["cpu_s"] >= 0.03 and idle["wall_s"] >= 0.045 and idle["cpu_s"] < 0.03
    assert snap["cpu_s"] > 0 and snap["rss_peak_mb"] > 0
    started = time.time()
    write_status(tmp_path, "trainer", "0", {"step": 3})
    old = tmp_path / "status" / "explorer-old.json"
    old.write_text('{"role": "explorer", "id": "old", "updated_at": 1, "profile": {"cpu_s": 5, "phases": {}}}')
    prof = collect(tmp_path, started - 1, {"0": os.getpid()})
    assert set(prof["processes"]) == {"trainer-0", "run (eval)", "broker"}  # not the earlier run's explorer
    assert prof["processes"]["trainer-0"]["phases"]["busy"]["count"] == 1
    assert prof["processes"]["broker"]["cpu_s"] > 0  # read from /proc
    out = io.StringIO()
    Console(file=out, width=200).print(table(prof))
    assert "trainer-0" in out.getvalue() and "busy" in out.getvalue()
    assert proc_usage(2**22 + 12345) is None  # no such process
    profile.reset()


def test_a_headless_run_prints_one_plain_progress_line():
    """#45: with output to a file the live view's frames never show; a line does."""
    from rftbus.apps.run.display import progress_line

    line = progress_line(started=time.time() - 95, lags={"raw": 3, "curated": 0}, events=[],
                         statuses=[{"role": "trainer", "step": 12, "version": 12},
                                   {"role": "explorer", "groups_produced": 118, "waiting_for_admission": True}],
                         evals=[{"version": 0, "reward": 0.25}, {"version": 9, "reward": 0.625}],
                         children={"trainer": "running", "explorer-0": "restarting (restarts 1, last crash: x)"})
    assert line.startswith("[95 s] step 12 v12 | eval v9 0.625 (initial 0.250, best 0.625)")
    assert "explorers 118 groups (1 waiting)" in line and "lag raw=3 curated=0" in line
    assert "explorer-0: restarting" in line and "\n" not in line
    gated = progress_line(started=time.time(), lags={}, events=[], evals=[], children={},
                          statuses=[{"role": "gate", "serving": 4, "candidate": 7}])
    assert "serving v4, v7 on canary" in gated
