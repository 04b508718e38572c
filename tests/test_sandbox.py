"""The code-execution sandbox: hostile programs are stopped and scored 0; the explorer goes on."""

from __future__ import annotations

import os

import pytest
from conftest import make_config
from explorer_kafka import fresh_config, read_topic
from test_explorer import publish

from rftbus.producers.explorer import Explorer
from rftbus.producers.rewards.sandbox import SandboxLimits, run_sandboxed
from rftbus.schemas import Task

LIMITS = SandboxLimits(wall_s=3.0, cpu_s=2, memory_mb=512, max_procs=8)
HOSTILE = {
    "socket": "import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')",
    # bounded "fork many times": more forks than the process limit allows; children just sleep
    "forks": "import os, time\nfor i in range(64):\n    if os.fork() == 0:\n        time.sleep(20)\n        os._exit(0)\nprint('forked 64')",
    "memory": "block = bytearray(10 * 1024 ** 3)\nprint('allocated')",
    "sleep": "import time\ntime.sleep(10 ** 6)",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_code_is_stopped(broker, name):
    r = run_sandboxed(HOSTILE[name].format(port=broker.broker.port), LIMITS)
    assert not r.ok and r.stdout == "", (name, r)
    assert r.held.get("network") in ("netns", "socket_block")
    if name == "socket":
        assert "unreachable" in r.stderr.lower() or "refused" in r.stderr.lower() or "disabled" in r.stderr
    if name == "forks":
        assert "BlockingIOError" in r.stderr or "Resource temporarily unavailable" in r.stderr
        if os.geteuid() == 0:
            assert r.held["procs"].startswith("cgroup"), r.held  # root ignores RLIMIT_NPROC
    if name == "memory":
        assert "MemoryError" in r.stderr
    if name == "sleep":
        assert r.timed_out and r.wall_s < LIMITS.wall_s + 2


def test_good_code_passes_and_cpu_limit_kills():
    assert run_sandboxed("def add(a, b):\n    return a + b\nassert add(2, 3) == 5\nprint('ok')", LIMITS).stdout == "ok\n"
    spin = run_sandboxed("while True:\n    pass", SandboxLimits(wall_s=6, cpu_s=1))
    assert not spin.ok and not spin.timed_out and spin.returncode != 0 and spin.wall_s < 4


def test_explorer_scores_hostile_code_zero_and_lives(broker, tmp_path):
    cfg = fresh_config(make_config, tmp_path, broker, **{
        "explorer.admission": False, "explorer.idle_exit_s": 2.0, "rl.group_size": 1,
        "explorer.workflow.kind": "explorer_plugins:EchoCode",
        "explorer.rewards": [{"name": "code", "params": {"wall_s": 3.0, "cpu_s": 2, "memory_mb": 512, "max_procs": 8}}]})
    tests = "assert add(2, 3) == 5"
    programs = {name: code.format(port=broker.broker.port) for name, code in HOSTILE.items()}
    programs["good"] = "def add(a, b):\n    return a + b"
    tasks = [Task(taskset="code", prompt=name, metadata={"program": prog, "tests": tests}) for name, prog in programs.items()]
    publish(cfg, tasks)
    result = Explorer(cfg, report=lambda s: None).run()
    assert result["groups_produced"] == 5 and result["tasks_rejected"] == 0
    raw = {g.task_id: g.samples[0] for _, g in read_topic(cfg, "raw")}  # groups of one
    by_prompt = {t.prompt: raw[t.task_id].reward for t in tasks}
    assert by_prompt == {"good": 1.0, "socket": 0.0, "forks": 0.0, "memory": 0.0, "sleep": 0.0}
    sleeper = next(t for t in tasks if t.prompt == "sleep")
    assert raw[sleeper.task_id].reward_components["code.timed_out"] == 1.0
