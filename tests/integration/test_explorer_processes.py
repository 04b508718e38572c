"""Two real `rftbus explore` processes share one taskset: every task done exactly once; SIGTERM
makes each finish its group, flush, commit and exit 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from conftest import JARS, make_config
from explorer_kafka import committed, end_offsets, fresh_config, read_topic
from test_explorer import publish, wait_for

from rftbus.ground.tasksets import get_taskset

TESTS = Path(__file__).resolve().parents[1]


def _spawn(cfg, ident: str) -> subprocess.Popen:
    env = {**os.environ, "RFTBUS_BROKER__PORT": str(cfg.broker.port), "RFTBUS_BROKER__LIBS_DIR": str(JARS),
           "RFTBUS_EXPLORER__ADMISSION": "false", "RFTBUS_RL__GROUP_SIZE": "2",
           "RFTBUS_EXPLORER__GROUP_ID": cfg.explorer.group_id, "PYTHONPATH": str(TESTS)}
    env.update({f"RFTBUS_TOPICS__{k.upper()}__NAME": spec.name for k, spec in cfg.topics.all().items()})
    cmd = [str(Path(sys.executable).parent / "rftbus"), "--state-dir", str(cfg.state_dir), "explore", "--id", ident, "--json"]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_explorer_processes_split_tasks(broker, tmp_path):
    cfg = fresh_config(make_config, tmp_path, broker)
    procs = {i: _spawn(cfg, i) for i in ("ex-a", "ex-b")}
    status = {i: cfg.state_dir / "status" / f"explorer-{i}.json" for i in procs}

    def parts(i):
        try:
            return set(json.loads(status[i].read_text()).get("partitions") or [])
        except (FileNotFoundError, json.JSONDecodeError):
            return set()
    try:
        # both in the group, partitions split between them, before any task exists
        wait_for(lambda: parts("ex-a") and parts("ex-b") and not parts("ex-a") & parts("ex-b")
                 and len(parts("ex-a") | parts("ex-b")) == 4, timeout=90, what="both explorers assigned")
        tasks = list(get_taskset("addition").tasks("train", 16))
        publish(cfg, tasks)
        wait_for(lambda: len(read_topic(cfg, "raw", timeout=3)) >= 16, timeout=90, what="all groups")
    finally:
        for p in procs.values():
            p.send_signal(signal.SIGTERM)
        outs = {i: p.communicate(timeout=60) for i, p in procs.items()}
    for i, p in procs.items():
        assert p.returncode == 0, outs[i][1][-2000:]
    results = {i: json.loads(outs[i][0].strip().splitlines()[-1]) for i in procs}
    raw = [g for _, g in read_topic(cfg, "raw")]
    per_task = Counter(g.task_id for g in raw)
    assert set(per_task) == {t.task_id for t in tasks}  # none skipped
    assert set(per_task.values()) == {1} and {len(g.samples) for g in raw} == {2}  # none done twice
    by_explorer = Counter(g.explorer_id for g in raw)
    assert set(by_explorer) == {"ex-a", "ex-b"}  # they really shared the work
    assert sum(r["groups_produced"] for r in results.values()) == 16
    for i in procs:
        final = json.loads(status[i].read_text())
        assert final["state"] == "stopped" and final["groups_produced"] == results[i]["groups_produced"]
    ends = {p: o for p, o in end_offsets(cfg, "tasks").items() if o > 0}
    assert {p: o for p, o in committed(cfg, cfg.explorer.group_id, "tasks").items() if p in ends} == ends
