"""A partition's pass rates are state recovered with its committed inputs (rftbus/streams/priority.py, the `rates` table):
after a kill -9 the restarted worker decides the task's next group with the rate the first worker learnt. In the
worker's memory they started empty at every restart, so the same group took another lane than in a run without the
crash. Here on the real broker and worker: a task's group (mean reward 0.5) is decided and committed, the worker is
killed -9, then the task's next group (|A| 0.87) is decided by the restarted worker: with the difficulty bonus of
p = 0.5 (+0.5) it goes to the priority lane; with no rate it would go to the normal one."""

from __future__ import annotations

import time
import uuid

from rftbus.apps.bench.processes import WorkerProcess
from rftbus.apps.bench.synthetic import make_group
from rftbus.apps.chaos.every_event import _produce, _read_outputs, _settled, case_config
from rftbus.ground.kafka.clients import make_admin
from rftbus.ground.kafka.committed import CommittedOffsets
from rftbus.ground.kafka.topics import create_topics
from rftbus.ground.schemas import make_codec
from tests.conftest import make_config


def _settle(cfg, committed, worker, timeout_s=90.0):
    deadline = time.monotonic() + timeout_s
    while not _settled(cfg, committed):
        assert worker.proc.poll() is None, worker.tail()
        assert time.monotonic() < deadline, "the worker did not commit its input to the end"
        time.sleep(0.3)


def test_a_tasks_pass_rate_outlives_a_kill9_of_the_worker(broker, tmp_path):
    codec = make_codec(None)
    cfg = case_config(make_config(tmp_path, broker.broker.port), tmp_path, uuid.uuid4().hex[:8])
    create_topics(cfg, make_admin(cfg))
    # (both group ids hash to raw partition 0: a partition's rates are its own)
    first = make_group(rewards=[1.0, 0.0, 1.0, 0.0], response_tokens=8, prompt_tokens=4, seed=1,
                       group_id="ee-explorer-1")
    again = make_group(rewards=[1.0, 0.0, 0.0, 0.0], response_tokens=8, prompt_tokens=4, seed=5,
                       task_id=first.task_id, group_id="ee-explorer-5")
    committed = CommittedOffsets(cfg)
    try:
        _produce(cfg, [("raw", first.group_id.encode(), codec.encode(first, None))])
        worker = WorkerProcess(cfg, "w", tmp_path / "w1.log")
        worker.wait_ready(120)
        _settle(cfg, committed, worker)
        time.sleep(1.0)  # (the commit that wrote the rate to rocksdb is the one `_settled` saw)
        worker.kill()
        _produce(cfg, [("raw", again.group_id.encode(), codec.encode(again, None))])
        worker = WorkerProcess(cfg, "w", tmp_path / "w2.log")
        try:
            worker.wait_ready(120)
            _settle(cfg, committed, worker)
        finally:
            assert worker.stop() == 0, worker.tail()
    finally:
        committed.close()
    lanes = {key: role for role, key, *_ in _read_outputs(cfg) if role.startswith("curated")}
    assert lanes == {b"ee-explorer-1": "curated_priority", b"ee-explorer-5": "curated_priority"}, lanes
