"""The explorer against the real broker, in-process: groups, rejections, weight sync, admission."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from confluent_kafka import TopicPartition
from conftest import make_config
from explorer_kafka import committed, end_offsets, fresh_config, read_topic

from rftbus.ground.weights.store_transport import store_url
from rftbus.ground.kafka.clients import make_consumer, make_producer
from rftbus.ground.models.loading import load_policy, load_tokenizer
from rftbus.producers.explorer import Explorer
from rftbus.ground.schemas import Task, WeightVersion, make_codec
from rftbus.ground.tasksets import get_taskset
from rftbus.ground.weights import WeightStore

ENC = make_codec(None)


def publish(cfg, tasks):
    p = make_producer(cfg)
    for t in tasks:
        p.produce(cfg.topics.tasks.name, key=t.task_id, value=ENC.encode(t, None))
    assert p.flush(10) == 0


def start(explorer):
    th = threading.Thread(target=explorer.run, daemon=True)
    th.start()
    return th


def wait_for(cond, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("batch_tasks", [1, 8])
def test_groups_rejections_and_commits(broker, tmp_path, batch_tasks):
    """Batched or not, each task is its own group, bad ones are rejected and every offset committed."""
    cfg = fresh_config(make_config, tmp_path, broker, **{
        "explorer.admission": False, "explorer.idle_exit_s": 8.0, "explorer.batch_tasks": batch_tasks,
        # long enough for a good task on a loaded machine; the hanging one still times out (twice)
        "explorer.task_timeout_s": 4.0,
        "explorer.task_retries": 1, "explorer.expert": True,
        "explorer.task_workflows": ["explorer_plugins:Failing", "explorer_plugins.Hanging"]})
    good = list(get_taskset("addition").tasks("train", 3))
    good[0].n_samples = 3
    bad = Task(taskset="addition", prompt="1+1=", answer="2", workflow="explorer_plugins:Failing")
    hang = Task(taskset="addition", prompt="2+2=", answer="4", workflow="explorer_plugins.Hanging")
    publish(cfg, good + [bad, hang])
    p = make_producer(cfg)
    p.produce(cfg.topics.tasks.name, key=b"junk", value=b"\x00\x01garbage")
    p.flush(10)
    reports: list[str] = []
    explorer = Explorer(cfg, report=reports.append)
    result = explorer.run()
    assert result["groups_produced"] == 3 and result["tasks_rejected"] == 2, (result, reports)
    raw = read_topic(cfg, "raw")
    assert len(raw) == 3  # one record per group
    for key, g in raw:
        assert key == g.group_id and g.explorer_id == explorer.id and g.survivors == []
        n = 3 if g.task_id == good[0].task_id else 2
        assert len(g.samples) == n and len(set(g.experience_ids())) == n and g.prompt_ids
        for e in g.samples:
            assert len(e.response_ids) == len(e.logprobs) == len(e.loss_mask) > 0
            assert all(lp <= 0 for lp in e.logprobs) and all(e.loss_mask)
            assert e.model_version == 0 and e.reward is not None and e.advantage is None
            assert "taskset" in e.reward_components and e.generation_ms > 0
    rejected = {r.reason: r for _, r in read_topic(cfg, "rejected")}
    assert set(rejected) == {"task_failed", "task_timeout", "malformed"}
    assert "environment server is down" in rejected["task_failed"].detail and "attempt 2" in rejected["task_failed"].detail
    assert rejected["task_timeout"].stage == "explorer" and ENC.decode(rejected["task_timeout"].original).task_id == hang.task_id
    assert len(read_topic(cfg, "expert")) == 3
    # every task offset is committed, only after its records were acknowledged
    ends = {p: o for p, o in end_offsets(cfg, "tasks").items() if o > 0}
    assert {p: o for p, o in committed(cfg, cfg.explorer.group_id, "tasks").items() if p in ends} == ends
    status = (cfg.state_dir / "status" / f"explorer-{explorer.id}.json").read_text()
    assert '"state": "stopped"' in status and '"groups_produced": 3' in status
    if batch_tasks > 1:  # the good tasks' groups came from batched calls, not one call each
        assert explorer.primed.primed_calls >= 1 and explorer.primed.hits >= 2, (explorer.primed.primed_calls, reports)
        batched = [e for _, g in raw for e in g.samples if "batch_groups" in e.metadata]
        assert batched and all(int(e.metadata["batch_groups"]) >= 2 for e in batched)


def test_weight_hot_reload_refuses_corrupt_version(broker, tmp_path):
    cfg = fresh_config(make_config, tmp_path, broker, **{"explorer.admission": False})
    store = WeightStore(store_url(cfg))
    tok = load_tokenizer(cfg.model)
    p = make_producer(cfg)

    def announce(version, saved, sha=None):
        rec = WeightVersion(model=cfg.model.name, version=version, step=version, uri=saved.uri,
                            sha256=sha or saved.sha256, bytes=saved.bytes)
        p.produce(cfg.topics.weights.name, key=rec.model, value=ENC.encode(rec, None))
        p.flush(10)

    base = load_policy(cfg.model, tok).state_dict()
    corrupt = store.save(cfg.model.name, 1, base)
    announce(1, corrupt, sha="0" * 64)  # published hash does not match the file
    explorer = Explorer(cfg, report=lambda s: None)
    th = start(explorer)
    tasks = list(get_taskset("addition").tasks("train", 6))
    publish(cfg, tasks[:2])
    wait_for(lambda: explorer.stats["groups_produced"] == 2, what="2 groups on v0")
    assert explorer.engine.version == 0 and 1 in explorer.follower.refused
    new_state = {k: v + 0.01 for k, v in base.items()}
    announce(2, store.save(cfg.model.name, 2, new_state))
    wait_for(lambda: explorer.engine.version == 2, what="swap to v2")
    publish(cfg, tasks[2:4])
    wait_for(lambda: explorer.stats["groups_produced"] == 4, what="2 groups on v2")
    explorer.request_stop()
    th.join(30)
    versions = {g.task_id: g.samples[0].model_version for _, g in read_topic(cfg, "raw")}
    assert {versions[t.task_id] for t in tasks[:2]} == {0} and {versions[t.task_id] for t in tasks[2:4]} == {2}
    got = explorer.engine.model.state_dict()
    assert all(torch.equal(got[k], new_state[k]) for k in new_state)
    status = (cfg.state_dir / "status" / f"explorer-{explorer.id}.json").read_text()
    assert '"refused_versions": [1]' in status and '"version": 2' in status


def _forward_raw_to_curated(cfg, stop: threading.Event):
    """Stands in for streams: moves raw experiences to curated and commits (so only the trainer lags)."""
    consumer = make_consumer(cfg, cfg.streams.app_id)
    consumer.subscribe([cfg.topics.raw.name])
    producer = make_producer(cfg)
    while not stop.is_set():
        msg = consumer.poll(0.2)
        if msg is None or msg.error():
            continue
        producer.produce(cfg.topics.curated.name, key=msg.key(), value=msg.value())
        producer.flush(10)
        consumer.commit(msg, asynchronous=False)
    consumer.close()


def test_acceptance_rate_window_floor_and_noise():
    from rftbus.producers.admission import AcceptanceRate

    a = AcceptanceRate(floor=0.1, min_records=16, window_s=30.0)
    assert a.update(0.0, 0, 0) == 1.0  # unmeasured: count in full
    assert a.update(1.0, 8, 0) == 1.0  # 8 < 16 records: noise, keep the last figure
    assert a.update(2.0, 40, 10) == 0.25
    assert a.update(3.0, 400, 10) == 0.1  # floored
    assert a.update(40.0, 800, 410) == 1.0  # the old samples left the window: (410-10)/(800-400)


def test_admission_counts_raw_groups_at_streams_acceptance_rate(broker, tmp_path):
    """Streams drops 3 of 4 groups: raw backlog counts at 1/4, the trainer's curated lag in full (records are
    groups).

    A new group on new topics: the admin API's offset query crashed this test with SIGSEGV before
    committed offsets were read through a consumer (rftbus/ground/kafka/committed.py)."""
    from rftbus.ground.kafka.clients import make_admin
    from rftbus.producers.admission import Admission

    cfg = fresh_config(make_config, tmp_path, broker, **{"rl.group_size": 4, "rl.batch_groups": 2,
                                                         "explorer.admission_refresh_s": 3600.0,  # refresh by hand
                                                         "explorer.admission_min_acceptance": 0.1})
    adm = Admission(cfg, make_admin(cfg))
    wait_for(lambda: _refreshed(adm), what="partition leaders of the new topics")  # baseline reading
    assert adm.acceptance.value == 1.0 and adm.pending() == 0
    producer = make_producer(cfg)
    for i in range(8):
        producer.produce(cfg.topics.raw.name, key=f"g{i}", value=b"x", partition=0)
    for i in range(2):
        producer.produce(cfg.topics.curated.name, key=f"c{i}", value=b"x", partition=0)
    producer.flush(10)
    streams = make_consumer(cfg, cfg.streams.app_id)
    streams.commit(offsets=[TopicPartition(cfg.topics.raw.name, 0, 8)], asynchronous=False)
    streams.close()
    adm.refresh()
    assert adm.acceptance.value == pytest.approx(0.25)
    assert adm.pending() == pytest.approx(2)  # nothing upstream; 2 curated groups the trainer has not taken
    for i in range(2):  # two more groups not yet through streams
        producer.produce(cfg.topics.raw.name, key=f"h{i}", value=b"x", partition=0)
    producer.flush(10)
    adm.refresh()
    assert adm.pending() == pytest.approx(0.25 * 2 + 2)
    adm.produced_group()  # our own group the lags cannot see yet counts at the same rate
    assert adm.pending() == pytest.approx(0.25 * 3 + 2)


def _refreshed(adm) -> bool:
    from rftbus.producers.admission import AdmissionUnavailable

    try:
        adm.refresh()
        return True
    except AdmissionUnavailable:  # a just-created topic's leader is not known yet: a clean error
        return False


@pytest.mark.parametrize("batch_tasks", [1, 3])
def test_admission_pauses_at_bound_and_resumes(broker, tmp_path, batch_tasks):
    """A batch never takes more tasks than admission has room for (bound 4, batches of up to 3)."""
    cfg = fresh_config(make_config, tmp_path, broker, **{
        "rl.max_staleness": 1, "rl.batch_groups": 2, "explorer.admission_refresh_s": 0.2,
        "explorer.batch_tasks": batch_tasks})
    stop = threading.Event()
    fwd = threading.Thread(target=_forward_raw_to_curated, args=(cfg, stop), daemon=True)
    fwd.start()
    explorer = Explorer(cfg, report=lambda s: None)
    bound = explorer.admission.bound
    assert bound == 4
    adm = explorer.admission
    th = start(explorer)
    publish(cfg, list(get_taskset("addition").tasks("train", 12)))
    status_path = cfg.state_dir / "status" / f"explorer-{explorer.id}.json"
    wait_for(lambda: '"waiting_for_admission": true' in status_path.read_text(), what="explorer waiting")
    seen = adm.reads  # it stays at the bound while the trainer does not advance: lags read five more times
    wait_for(lambda: adm.reads >= seen + 5, what="five more admission refreshes")
    assert explorer.stats["groups_produced"] == bound
    wait_for(lambda: sum(end_offsets(cfg, "curated").values()) == bound, what="forwarded")
    # the trainer commits what it has trained: its lag drops to zero and the explorer resumes
    trainer = make_consumer(cfg, cfg.trainer.group_id)
    trainer.commit(offsets=[TopicPartition(cfg.topics.curated.name, p, o) for p, o in end_offsets(cfg, "curated").items()],
                   asynchronous=False)
    trainer.close()
    wait_for(lambda: explorer.stats["groups_produced"] == 2 * bound, what="resumed to the next bound")
    seen = adm.reads
    wait_for(lambda: adm.reads >= seen + 5, what="five more admission refreshes")
    assert explorer.stats["groups_produced"] == 2 * bound and explorer.status.fields["waiting_for_admission"]
    explorer.request_stop()
    th.join(30)
    stop.set()
    fwd.join(10)


@pytest.mark.parametrize("eta", [0])
def test_eta_zero_loads_newest_version_before_admitting(broker, tmp_path, eta):
    cfg = fresh_config(make_config, tmp_path, broker, **{"rl.max_staleness": eta, "rl.batch_groups": 100,
                                                          "explorer.max_tasks": 2})
    tok = load_tokenizer(cfg.model)
    saved = WeightStore(store_url(cfg)).save(cfg.model.name, 3, load_policy(cfg.model, tok).state_dict())
    p = make_producer(cfg)
    rec = WeightVersion(model=cfg.model.name, version=3, step=3, uri=saved.uri, sha256=saved.sha256, bytes=saved.bytes)
    p.produce(cfg.topics.weights.name, key=rec.model, value=ENC.encode(rec, None))
    p.flush(10)
    publish(cfg, list(get_taskset("addition").tasks("train", 2)))
    Explorer(cfg, report=lambda s: None).run()
    assert {e.model_version for _, g in read_topic(cfg, "raw") for e in g.samples} == {3}


def test_static_member_restart_gets_its_partitions_back_at_once(broker, tmp_path):
    """kill -9 a supervised-style explorer (static member, explicit id) and start it again: the restart
    produces again well inside the session timeout (60 s here), which a dynamic member must wait out
    before the group rebalances. A static member without an id is a clear config error."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    cfg = fresh_config(make_config, tmp_path, broker, **{"explorer.admission": False,
                                                         "kafka.consumer": {"session.timeout.ms": 60000}})
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cfg.model_dump(mode="json")))
    exe = str(Path(sys.executable).parent / "rftbus")
    env = {**os.environ, "RFTBUS_EXPLORER__STATIC_MEMBERSHIP": "true"}
    no_id = subprocess.run([exe, "--config", str(path), "explore"], capture_output=True, text=True, env=env, timeout=120)
    assert no_id.returncode == 1 and "static_membership needs an explicit explorer id" in no_id.stderr, no_id.stderr
    tasks = list(get_taskset("addition").tasks("train", 8))
    produced = lambda: sum(end_offsets(cfg, "raw").values())  # noqa: E731
    logs = [open(tmp_path / f"explorer-{i}.log", "w") for i in range(2)]
    first = subprocess.Popen([exe, "--config", str(path), "explore", "--id", "e0"], stdout=logs[0],
                             stderr=subprocess.STDOUT, env=env)
    second = None
    try:
        publish(cfg, tasks[:4])
        wait_for(lambda: produced() >= 4, timeout=120, what="the first explorer's groups")
        first.kill()
        first.wait(10)
        restarted = time.monotonic()
        second = subprocess.Popen([exe, "--config", str(path), "explore", "--id", "e0"], stdout=logs[1],
                                  stderr=subprocess.STDOUT, env=env)
        publish(cfg, tasks[4:])
        wait_for(lambda: produced() >= 8, timeout=120, what="the restarted explorer's groups")
        assert time.monotonic() - restarted < 40, (tmp_path / "explorer-1.log").read_text()[-2000:]
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.kill()
        for f in logs:
            f.close()


def test_a_task_never_holds_its_partition_past_its_deadline(broker, tmp_path):
    """#18: a prompt past the model's context is rejected before generating (well under a second), and a
    task that runs out of time is rejected within its own deadline (no second full attempt)."""
    cfg = fresh_config(make_config, tmp_path, broker, **{
        "explorer.admission": False, "explorer.idle_exit_s": 6.0, "explorer.task_timeout_s": 60.0,
        "explorer.task_retries": 1, "topics.tasks.partitions": 1,
        "explorer.task_workflows": ["explorer_plugins.Hanging"]})
    long = Task(taskset="addition", prompt="12+7=" * 4000, answer="19")  # 20,000 tokens; the context is 64
    hang = Task(taskset="addition", prompt="2+2=", answer="4", workflow="explorer_plugins.Hanging",
                metadata={"timeout_s": "1.5"})
    good = list(get_taskset("addition").tasks("train", 1))
    publish(cfg, [long, hang, *good])
    reports: list[str] = []
    result = Explorer(cfg, report=reports.append).run()
    assert result["groups_produced"] == 1 and result["tasks_rejected"] == 2, (result, reports)
    rejected = {r.reason: r for _, r in read_topic(cfg, "rejected")}
    assert set(rejected) == {"prompt_too_long", "task_timeout"}, rejected
    too_long = rejected["prompt_too_long"]
    assert "20000 tokens" in too_long.detail and "context of 64" in too_long.detail, too_long.detail
    took = float(too_long.detail.rsplit("(after ", 1)[1].split("s,")[0])
    assert took < 1.0 and "1 attempt(s)" in too_long.detail, too_long.detail
    timeout = rejected["task_timeout"]
    took = float(timeout.detail.rsplit("(after ", 1)[1].split("s,")[0])
    assert 1.5 <= took < 3.0 and "1 attempt(s)" in timeout.detail and "deadline of 1.5s" in timeout.detail
