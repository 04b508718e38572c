"""The trainer loop with no broker: its batches come from memory through the BatchSource protocol
(rftbus/trainer/batch_source.py), everything else is real (a tiny pretrained-shape model in DeepSpeed's engine, the
checkpoints, the weight store, the rejector and publisher writing to an in-memory producer).

What the loop promises (rftbus/trainer/loop.py's docstring) is checked here on its own: whole groups in offset order,
a record that cannot train rejected at its lane's head, an experience id never trained twice, each commit only
after the checkpoint that holds the same positions is on disk, each version published after that checkpoint,
and a restart resuming from the checkpoint's positions with nothing trained again. The same loop against Kafka:
tests/integration/test_trainer_modes.py and the whole-run tests.
"""

from __future__ import annotations

import copy
from collections import deque
from pathlib import Path

import pytest

from rftbus.apps.bench.synthetic import make_group
from rftbus.ground.config import Config
from rftbus.ground.schemas import ExperienceGroup, Rejection, TrainerMetric, WeightVersion, make_codec
from rftbus.ground.status import StatusFile
from rftbus.trainer.batch_source import BatchConsumer, Polled
from rftbus.trainer.checkpoint import Checkpoints, read_lineage
from rftbus.trainer.components import Components
from rftbus.trainer.loop import RunOptions, Trainer
from rftbus.ground.weights.store_transport import StoreTransport
from tests.integration.test_grpo_direction import dist_env  # noqa: F401 - the fixture

CODEC = make_codec(None)
LANES = {"priority": "prio", "curated": "curated"}


class MemoryProducer:
    """confluent-kafka's Producer as the trainer's sinks use it (produce, poll, flush), keeping what they wrote."""

    def __init__(self):
        self.records: list[tuple[str, bytes | None, bytes]] = []

    def produce(self, topic, key=None, value=None, on_delivery=None, **_):
        self.records.append((topic, key, value))
        if on_delivery is not None:
            on_delivery(None, None)

    def poll(self, timeout=0):
        return 0

    def flush(self, timeout=0):
        return 0

    def values(self, topic: str, kind) -> list:
        return [CODEC.deserializer(kind)(v, None) for t, _, v in self.records if t == topic]


class MemorySource(BatchConsumer):
    """The lanes read from lists instead of Kafka: BatchConsumer's own head/finish/positions bookkeeping, with
    `poll` taking records from memory and `commit` checking that the checkpoint holding the positions exists."""

    def __init__(self, log: dict[tuple[str, int], list[Polled]], positions: dict[tuple[str, int], int], ckpt_dir: Path):
        self.log, self.ckpt_dir = log, ckpt_dir
        self.topics, self.lane_of = LANES, {t: lane for lane, t in LANES.items()}
        self.max_pending = 1000
        self.read_pos = dict(positions)
        self.pending = {tp: deque() for tp in positions}
        self.lanes = {lane: deque() for lane in LANES}
        self.paused = set()
        self.commits: list[tuple[dict, dict | None]] = []  # (positions committed, the latest checkpoint's)
        self.waited: list[bool] = []  # whether the loop waited for each commit

    def poll(self, timeout: float, max_messages: int = 500) -> int:
        taken = 0
        for tp, records in self.log.items():
            for r in records[self.read_pos[tp]:]:
                self.read_pos[tp] = r.offset + 1
                self.pending[tp].append(r.offset)
                self.lanes[r.lane].append(r)
                taken += 1
        return taken

    def _flow_control(self) -> None:
        pass

    def lane_drained(self, lane: str) -> bool:
        return all(self.read_pos[tp] >= len(rs) for tp, rs in self.log.items() if tp[0] == self.topics[lane])

    def caught_up(self) -> bool:
        return all(self.lane_drained(lane) for lane in self.topics)

    def commit(self, positions, wait: bool = True):
        latest = Checkpoints(self.ckpt_dir, 0, 1).latest()
        self.commits.append((dict(positions), latest[1].positions_of(0) if latest else None))
        self.waited.append(wait)

    def close(self) -> None:
        pass


class MemoryComponents(Components):
    log: dict = {}
    sources: list = []

    def assigned_partitions(self):
        return list(self.log)

    def latest_published(self):
        published = self.producer.values("weights", WeightVersion)
        return published[-1] if published else None

    def start_positions(self, tps, overrides=None, timestamp_ms=None):
        return {tp: 0 for tp in tps}

    def open_source(self, positions, max_pending):
        self.sources.append(MemorySource(self.log, positions, self.checkpoint_dir))
        return self.sources[-1]

    def close(self, consumer: bool = False) -> None:
        pass


def _components(cfg: Config, producer: MemoryProducer, log) -> MemoryComponents:
    """What build_components wires, with the Kafka clients left out: the real model, engine, loss and sinks."""
    from rftbus.ground.models.loading import load_policy, load_tokenizer
    from rftbus.ground.models.prompt import prompt_format
    from rftbus.trainer.checks import Limits
    from rftbus.trainer.engine import build_engine
    from rftbus.trainer.losses import make_loss
    from rftbus.trainer.metrics import MetricsSink
    from rftbus.trainer.policy import PolicyWithValue
    from rftbus.trainer.publish import WeightPublisher
    from rftbus.trainer.rejects import Rejector

    tc = cfg.trainer
    tok = load_tokenizer(cfg.model)
    lm = load_policy(cfg.model, tok)
    lm.config.use_cache = False
    loss = make_loss(tc, cfg.rl.max_staleness)
    engine = build_engine(PolicyWithValue(lm, value_head=False), tc)
    vocab = int(lm.get_input_embeddings().num_embeddings)
    c = MemoryComponents(
        cfg=cfg, rank=0, world=1, loss=loss, tokenizer=tok, prompt=prompt_format(tok, cfg.model), engine=engine,
        ref_model=None, pad_id=tok.pad_token_id or 0, max_len=256, limits=Limits(vocab=vocab, context=2048),
        producer=producer, consumer=None, codec=CODEC, deserializer=CODEC.deserializer(ExperienceGroup),
        lane_topics=LANES, rejector=Rejector(producer, CODEC.serializer(Rejection), "rejected"),
        publisher=WeightPublisher(StoreTransport(cfg), cfg.model.name, producer,
                                  CODEC.serializer(WeightVersion), "weights", cfg.rl.max_staleness, 100, 0.0, set),
        metrics=MetricsSink(producer, CODEC.serializer(TrainerMetric), "metrics", cfg.model.name, None),
        status=StatusFile(cfg.state_dir, "trainer", "0"), checkpoint_dir=cfg.state_dir / "checkpoints")
    c.log, c.sources = log, []
    return c


def _curated(offset: int, group: ExperienceGroup | None, problem=None) -> Polled:
    return Polled(group, "curated", "curated", 0, offset, problem=problem)


def _group(seed: int) -> ExperienceGroup:
    g = make_group(rewards=[1.0, 0.0], response_tokens=6, prompt_tokens=5, seed=seed, vocab=40)
    g.survivors = [0, 1]
    for s, a in zip(g.samples, (1.0, -1.0)):
        s.advantage = a
    return g


def _run(cfg: Config, log, producer: MemoryProducer, monkeypatch) -> tuple[Trainer, MemoryComponents]:
    trainer = Trainer(cfg, RunOptions(), log=lambda *_: None)
    comps = _components(cfg, producer, log)

    def build(self):
        self.c, self.loss, self.replay = comps, comps.loss, None
        self.ckpts = Checkpoints(comps.checkpoint_dir, self.rank, self.world)

    monkeypatch.setattr(Trainer, "_build", build)
    trainer.run()
    return trainer, comps


@pytest.mark.usefixtures("dist_env")
def test_the_loop_trains_checkpoints_commits_and_publishes_in_order_and_resumes(tmp_path, monkeypatch):
    groups = [_group(seed) for seed in range(8)]
    dup = copy.deepcopy(groups[0])  # a second record of g0's experience ids: never trained twice
    dup.group_id = "copy-of-g0"
    records = [_curated(0, groups[0]), _curated(1, groups[1]), _curated(2, None, ("malformed", "bad bytes")),
               _curated(3, groups[2]), _curated(4, dup), *[_curated(5 + i, g) for i, g in enumerate(groups[3:])]]
    log = {("prio", 0): [], ("curated", 0): records}
    cfg = Config.model_validate({"state_dir": str(tmp_path), "rl": {"batch_groups": 2, "max_staleness": 8},
                                 "trainer": {"loss": "grpo", "lr": 1e-3, "max_steps": 2, "idle_exit_s": 3.0}})
    producer = MemoryProducer()
    first, comps = _run(cfg, log, producer, monkeypatch)

    assert first.summary.steps == 2 and first.summary.version == 2
    assert [w.version for w in producer.values("weights", WeightVersion)] == [0, 1, 2]  # v0 at the fresh start
    rejected = {r.reason: r for r in producer.values("rejected", Rejection)}
    assert sorted(rejected) == ["duplicate", "malformed"] and rejected["malformed"].offset == 2
    assert rejected["duplicate"].offset == 4
    assert sorted(rejected["duplicate"].experience_ids) == sorted(s.experience_id for s in groups[0].samples)
    source = comps.sources[0]
    assert source.commits, "nothing was committed"
    for committed, in_checkpoint in source.commits:
        assert committed == in_checkpoint  # committed only once a checkpoint holding exactly these positions existed
    # two steps of two groups: g0, g1, g2 and g3 (offsets 0..5) trained, in offset order; the copy rejected
    assert source.commits[-1][0][("curated", 0)] == 6
    # a step does not wait for its commit (a frozen coordinator would hold the next step); the stop came right after a
    # checkpointed step, so Kafka's BatchConsumer.close makes that last commit again, waited for (the committed offsets
    # after a stop: tests/integration/test_trainer.py::test_kill9_resume_trains_every_experience_exactly_once)
    assert source.waited and not any(source.waited), source.waited

    # a restart resumes at the checkpoint's positions and trains what is left, nothing again
    cfg2 = cfg.model_copy(update={"trainer": cfg.trainer.model_copy(update={"max_steps": None})})
    second, comps2 = _run(cfg2, log, producer, monkeypatch)
    assert second.summary.resumed_from and second.summary.start_step == 2
    assert comps2.sources[0].commits[-1][0][("curated", 0)] == len(records)
    lineage = read_lineage(Checkpoints(cfg.state_dir / "checkpoints", 0, 1).lineage)
    trained = [i for line in lineage for i in line["experience_ids"]]
    want = {s.experience_id for g in groups for s in g.samples}
    assert len(trained) == len(set(trained)) and set(trained) == want
    assert [line["groups"] for line in lineage][:2] == [[groups[0].group_id, groups[1].group_id],
                                                        [groups[2].group_id, groups[3].group_id]]


def test_the_commits_the_loop_did_not_wait_for_are_counted_when_kafka_refuses_them():
    from confluent_kafka import KafkaError

    from rftbus.trainer.batch_source import CommitResults

    results = CommitResults()
    results(None, [])
    assert results.failed == 0 and results.last_error is None
    results(KafkaError(KafkaError.REQUEST_TIMED_OUT), [])
    assert results.failed == 1 and "timed out" in (results.last_error or "").lower()
