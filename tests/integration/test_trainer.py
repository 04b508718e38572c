"""The trainer through its real parts: Kafka broker, DeepSpeed (CPU, gloo), transformers, the CLI.

The headline test runs `rftbus train` as a subprocess, SIGKILLs it mid-stream, tampers with the
group's committed offsets, restarts it and proves from the lineage that every experience was
trained exactly once (none twice, none skipped) and that no weight version was published twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
import zlib
from pathlib import Path

import pytest
import yaml
from confluent_kafka import TopicPartition

from rftbus.ground.config import TopicsConfig
from rftbus.ground.kafka.clients import make_admin, make_consumer, make_producer
from rftbus.ground.kafka.read import read_to_end
from rftbus.ground.kafka.topics import create_topics
from rftbus.ground.models.loading import load_tokenizer
from rftbus.ground.models.config import ModelConfig
from rftbus.ground.schemas import Experience, ExperienceGroup, Source, make_codec
from rftbus.trainer.checkpoint import read_lineage
from tests.conftest import JARS, make_config

TOPIC_KEYS = list(TopicsConfig.model_fields)
TOK = load_tokenizer(ModelConfig())
CODEC = make_codec(None)


def trainer_config(tmp_path: Path, broker, **overrides):
    """A per-test Config (own topics, own state dir) and the YAML file a subprocess reads it from."""
    u = uuid.uuid4().hex[:8]
    topics = {f"topics.{k}.name": f"t-{k}-{u}" for k in TOPIC_KEYS}
    settings = {**topics, "rl.group_size": 2, "rl.batch_groups": 2, "trainer.group_id": f"trainer-{u}",
                "trainer.status_interval_s": 0.2, **overrides}
    cfg = make_config(tmp_path, broker.broker.port, **settings)
    create_topics(cfg, make_admin(cfg))
    tree: dict = {}
    for key, value in settings.items():
        node = tree
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    path = tmp_path / "rftbus.yaml"
    path.write_text(yaml.safe_dump(tree))
    return cfg, path


def curated_group(gid: str, n: int, version: int = 0, source: Source = Source.explorer, **meta) -> ExperienceGroup:
    """A group as the streams put it on a curated lane: every sample a survivor, advantages set."""
    a = zlib.crc32(gid.encode()) % 50
    samples = []
    for i in range(n):
        resp = TOK(str(a + i))["input_ids"] + [TOK.eos_token_id]
        samples.append(Experience(response_ids=resp, logprobs=[-3.9] * len(resp), loss_mask=[True] * len(resp),
                                  reward=float(i % 2), advantage=1.0 if i % 2 else -1.0, model_version=version))
    return ExperienceGroup(group_id=gid, task_id=gid, source=source, explorer_id="test",
                           prompt_ids=TOK(f"{a}+0=")["input_ids"], samples=samples, survivors=list(range(n)),
                           metadata=dict(meta))


def produce_groups(cfg, topic: str, count: int, n: int = 2, version: int = 0, prefix: str = "g") -> list[str]:
    """`count` whole groups of `n`, one record each; returns the experience ids."""
    producer = make_producer(cfg)
    ser = CODEC.serializer(ExperienceGroup)
    ids = []
    for g in range(count):
        gid = f"{prefix}{uuid.uuid4().hex[:6]}{g:02x}"
        group = curated_group(gid, n, version)
        producer.produce(topic, key=gid, value=ser(group, None))
        ids += group.experience_ids()
    assert producer.flush(30) == 0
    return ids


def read_topic(cfg, topic: str) -> list:
    return [CODEC.decode(m.value()) for m in read_to_end(cfg, topic, timeout_s=30)]


def start_trainer(cfg, config_path: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "RFTBUS_BROKER__PORT": str(cfg.broker.port), "RFTBUS_BROKER__LIBS_DIR": str(JARS)}
    cmd = [str(Path(sys.executable).parent / "rftbus"), "-c", str(config_path), "--state-dir", str(cfg.state_dir),
           "train", *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_for(pred, timeout: float, what: str, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"trainer exited ({proc.returncode}) while waiting for {what}: {proc.stderr.read()[-3000:]}")
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def committed(cfg, group: str, topic: str) -> dict[int, int]:
    c = make_consumer(cfg, group)
    md = c.list_topics(topic, timeout=10).topics[topic]
    got = c.committed([TopicPartition(topic, p) for p in md.partitions], timeout=15)
    c.close()
    return {tp.partition: tp.offset for tp in got}


@pytest.mark.timeout(600)  # two trainer starts (DeepSpeed init) on a loaded CI machine
def test_kill9_resume_trains_every_experience_exactly_once(broker, tmp_path):
    cfg, path = trainer_config(tmp_path, broker, **{
        "rl.max_staleness": 1000, "rl.sync_interval": 3, "trainer.checkpoint_interval": 2})
    curated = cfg.topics.curated.name
    lineage_file = cfg.state_dir / "checkpoints" / "lineage.jsonl"
    produced = produce_groups(cfg, curated, 8)
    feeding = threading.Event()

    def feed():  # keep groups arriving while the trainer works, so the kill lands mid-stream
        for _ in range(16):
            produced.extend(produce_groups(cfg, curated, 1))
            time.sleep(0.1)
        feeding.set()

    proc = start_trainer(cfg, path)
    feeder = threading.Thread(target=feed)
    wait_for(lambda: len(read_lineage(lineage_file)) >= 3, 240, "three checkpointed steps", proc)
    fed = len(produced)
    feeder.start()
    wait_for(lambda: len(produced) >= fed + 3, 30, "three groups fed after the checkpoints")  # mid-stream
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    feeder.join()
    before = read_lineage(lineage_file)
    assert before, "nothing was checkpointed before the kill"

    # Kafka's committed offsets say "all done"; the checkpoint says otherwise and must win.
    c = make_consumer(cfg, cfg.trainer.group_id)
    md = c.list_topics(curated, timeout=10).topics[curated]
    ends = {p: c.get_watermark_offsets(TopicPartition(curated, p), timeout=10)[1] for p in md.partitions}
    c.commit(offsets=[TopicPartition(curated, p, high) for p, high in ends.items()], asynchronous=False)
    c.close()

    proc = start_trainer(cfg, path)
    want = set(produced)
    wait_for(lambda: {i for line in read_lineage(lineage_file) for i in line["experience_ids"]} >= want,
             240, "every experience in the lineage", proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    assert "resumed from step-" in err

    lineage = read_lineage(lineage_file)
    trained = [i for line in lineage for i in line["experience_ids"]]
    assert len(trained) == len(set(trained)), "an experience was trained twice"
    assert set(trained) == want, "an experience was skipped"
    assert [line["step"] for line in lineage] == list(range(1, len(lineage) + 1))
    # The lineage never rewrote a checkpointed step.
    assert lineage[: len(before)] == before
    # Offsets: each (topic, partition, offset) -- one group -- trained once, and Kafka's commit equals the
    # checkpoint's end.
    offsets = [tuple(o) for line in lineage for o in line["offsets"]]
    assert len(offsets) == len(set(offsets)) == len(produced) // 2
    assert committed(cfg, cfg.trainer.group_id, curated) == ends
    # No version was ever published twice with different weights (rolled-back steps never publish).
    versions: dict[int, set[str]] = {}
    for rec in read_topic(cfg, cfg.topics.weights.name):
        versions.setdefault(rec.version, set()).add(rec.sha256)
    assert all(len(s) == 1 for s in versions.values()), versions
    assert sorted(versions) == list(range(0, len(lineage) // 3 + 1))
    status = json.loads((cfg.state_dir / "status" / "trainer-0.json").read_text())
    assert status["state"] == "stopped" and status["step"] == len(lineage)
