"""The streams checkpoint's two answers to Faust's delivery, each shown to be needed (and to work) on
faust-streaming itself: the commit rule (rftbus/streams/checkpoint/commit_rule.py, routed by rftbus/streams/transport.py) and the
hole finder (rftbus/streams/checkpoint/holes.py)."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from pathlib import Path

from faust.transport.consumer import Consumer
from faust.types import TP
from intervaltree import IntervalTree

from rftbus.ground.kafka.clients import make_admin, make_producer
from rftbus.ground.kafka.topics import create_topics
from rftbus.ground.schemas import make_codec
from rftbus.streams.faust_conf import faust_settings
from rftbus.streams.transport import Adaptation, WorkerApp
from rftbus.streams.checkpoint.commit_rule import next_commit
from rftbus.apps.bench.processes import WorkerProcess, read_all
from rftbus.apps.bench.synthetic import make_group
from tests.conftest import make_config

RAW = TP("raw", 0)
HOOKS = Path(__file__).resolve().parents[1] / "hooks"
CODEC = make_codec(None)


class _Bookkeeping:
    """The attributes Consumer._new_offset reads, as Faust keeps them, for one partition."""

    def __init__(self, committed: int | None, acked: list[int]):
        self._acked = defaultdict(list, {RAW: list(acked)})
        self._acked_index = defaultdict(set, {RAW: set(acked)})
        self._gap = defaultdict(IntervalTree)
        self._committed_offset = defaultdict(lambda: None, {RAW: committed})


def test_faust_commits_past_an_unacked_record_and_the_rule_does_not():
    # faust-streaming#606: 2585 was never acked (Faust skipped it), 2586..2589 were. Kafka's committed
    # offset is the next one to read, so committing 2590 loses 2585 on the next restart.
    faust_rule = Consumer._new_offset
    assert faust_rule(_Bookkeeping(2585, [2586, 2587, 2588, 2589]), RAW) == 2590
    book = _Bookkeeping(2585, [2586, 2587, 2588, 2589])
    assert next_commit(book, RAW, 2585) is None  # held at 2585 until it is acked
    book._acked[RAW].append(2585)
    assert next_commit(book, RAW, 2585) == 2590
    # before anything was committed, the first offset seen since assignment is the head
    assert next_commit(_Bookkeeping(None, [2586, 2587]), RAW, 2585) is None
    assert next_commit(_Bookkeeping(None, [2585, 2586]), RAW, 2585) == 2587


def test_the_worker_consumer_routes_faust_commits_of_the_ingest_topics_to_the_rule(tmp_path):
    """transport.py's `commit_rule`: the worker's Faust consumer asks the checkpoint's rule for the topics it names,
    and keeps Faust's own for the others."""
    asked = []
    cfg = make_config(tmp_path, 9)
    app = WorkerApp("rftbus-test", **faust_settings(cfg, str(tmp_path / "faust")).kwargs)
    app.adaptation = Adaptation(commit_rules={"raw": lambda consumer, tp: asked.append(tp) or None})
    consumer = app.consumer
    for name, value in vars(_Bookkeeping(2585, [2586, 2587])).items():
        setattr(consumer, name, value)
    assert consumer._new_offset(RAW) is None
    assert asked == [RAW]
    other = TP("feedback", 0)
    consumer._acked[other], consumer._committed_offset[other] = [4, 5], 4
    assert consumer._new_offset(other) == 6  # Faust's own rule
    assert asked == [RAW]


def _skip_worker(broker, tmp_path, skip: str, prefix: str):
    tag = uuid.uuid4().hex[:6]
    keys = ["tasks", "raw", "curated", "curated_priority", "expert", "rejected", "feedback", "weights", "metrics"]
    cfg = make_config(tmp_path, broker.broker.port, **{f"topics.{k}.name": f"{prefix}{tag}.{k}" for k in keys},
                      **{"topics.raw.partitions": 1, "streams.app_id": f"{prefix}{tag}", "streams.commit_interval_s": 0.2,
                         "streams.redelivery_quiet_s": 2.0})
    create_topics(cfg, make_admin(cfg))
    worker = WorkerProcess(cfg, "skip", tmp_path / "skip.log",
                           extra_env={"PYTHONPATH": str(HOOKS), "STREAMS_TEST_SKIP_RAW": skip})
    return cfg, worker


def _curated_ids(cfg) -> set[str]:
    return {g.group_id for r in ("curated", "curated_priority")
            for g in read_all(cfg, getattr(cfg.topics, r).name, decode=CODEC.deserializer(), idle_s=0.3)}


def _redelivery(worker) -> dict:
    """The worker's delivery-guard counts once it has fetched something again, or after 10 s (the status
    file is written every second: it may lag the curation)."""
    deadline = time.monotonic() + 10
    while worker.status()["redelivery"]["refetches"] < 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    return worker.status()["redelivery"]


def test_a_new_apps_first_record_faust_skipped_is_fetched_again(broker, tmp_path):
    """A new app id (nothing committed) whose partition's only record, offset 0, never reaches the agent: what
    CI showed of a fresh worker. The guard counts from the partition's log start and fetches it again; before
    it learned log starts it had nothing to count from, and the group was never curated."""
    cfg, worker = _skip_worker(broker, tmp_path, "0:0", "on")
    p = make_producer(cfg)
    g = make_group(rewards=[1.0, 0.0], response_tokens=20, seed=1)
    p.produce(cfg.topics.raw.name, key=g.group_id.encode(), value=CODEC.encode(g, None))
    p.flush(10)
    try:
        worker.wait_ready(90)
        deadline = time.monotonic() + 45
        while g.group_id not in _curated_ids(cfg) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert g.group_id in _curated_ids(cfg), f"the skipped record was never fetched again: {worker.tail()}"
        assert _redelivery(worker)["refetches"] >= 1
    finally:
        assert worker.stop() == 0, worker.tail()


def test_a_record_faust_skipped_is_fetched_again_and_curated(broker, tmp_path):
    """The worker's ingest agent never sees raw offset 25 the first time (tests/hooks/sitecustomize.py does
    what Faust's stream does to an event it drops around a rebalance): the delivery guard seeks back to
    it, and the commit rule keeps the committed offset from passing it meanwhile. Without the guard the
    group is never curated and the partition's commit stays at 25. The first 20 groups go through before
    (so no start-up rebalance can re-deliver the skipped record instead of the guard)."""
    cfg, worker = _skip_worker(broker, tmp_path, "0:25", "of")
    p = make_producer(cfg)

    def send_and_wait(groups) -> set[str]:
        for g in groups:
            p.produce(cfg.topics.raw.name, key=g.group_id.encode(), value=CODEC.encode(g, None))
        p.flush(10)
        want = {g.group_id for g in groups}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            got = _curated_ids(cfg)
            if got >= want:
                break
            time.sleep(0.5)
        return want - got

    try:
        worker.wait_ready(90)
        groups = [make_group(rewards=[1.0, 0.0], response_tokens=20, seed=i) for i in range(40)]
        assert not send_and_wait(groups[:20]), worker.tail()
        missing = send_and_wait(groups[20:])  # offset 25 is among these
        assert not missing, f"{len(missing)} groups never curated: {worker.tail()}"
        st = _redelivery(worker)
        assert st["refetches"] >= 1 and st["gaps_accepted"] == 0, st
    finally:
        assert worker.stop() == 0, worker.tail()
