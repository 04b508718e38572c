"""Wiring the trainer's parts from the config: model + DeepSpeed engine, Kafka clients, sinks.

Kept apart from the loop so the loop reads as the protocol it implements.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rftbus.ground.config import Config
from rftbus.ground.errors import RftbusError
from rftbus.ground.kafka.clients import check_reachable, make_consumer, make_producer
from rftbus.ground.kafka.in_flight import DeliveryError
from rftbus.ground.kafka.topics import create_topics, wait_visible
from rftbus.ground.schemas import ExperienceGroup, Rejection, TrainerMetric, WeightVersion, make_codec
from rftbus.trainer.batch_source import BatchConsumer, BatchSource, CommitResults, start_positions
from rftbus.trainer.checks import Limits
from rftbus.trainer.losses import Loss, make_loss
from rftbus.trainer.metrics import MetricsSink
from rftbus.trainer.publish import WeightPublisher
from rftbus.ground.weights.decisions import ServedVersions
from rftbus.ground.weights.transport import make_transport
from rftbus.ground.models.lineage import trainer_stage, weights_key
from rftbus.ground.weights.follower import WeightFollower, latest_published
from rftbus.trainer.rejects import Rejector
from rftbus.ground.status import StatusFile

log = logging.getLogger("rftbus.trainer")


@dataclass
class Components:
    cfg: Config
    rank: int
    world: int
    loss: Loss
    tokenizer: Any
    prompt: Any  # the model's PromptFormat (models/prompt.py): eval renders tasks as the explorers do
    engine: Any
    ref_model: Any
    pad_id: int
    max_len: int
    limits: Limits
    producer: Any
    consumer: Any
    codec: Any
    deserializer: Any
    lane_topics: dict[str, str]
    rejector: Rejector
    publisher: WeightPublisher | None
    metrics: MetricsSink | None
    status: StatusFile
    checkpoint_dir: Path
    commits: CommitResults | None = None  # the consumer's on_commit: the commits the loop did not wait for
    first_lineage: WeightFollower | None = None  # another lineage's trainer: the versions the rollouts are made with
    _scorer: Any = None  # scorer(), built on first use

    def staleness_reference(self, own: int, versions: list[int] | tuple[int, ...] = ()) -> int:
        """The newest version experiences are judged stale against: the trainer's own, or, for another lineage's
        trainer (run.trainers), the first lineage's newest published, whose numbers the explorers' rollouts carry
        (its own may run ahead of or behind them: rftbus/ground/models/lineage.py), or a newer one a group of `versions`
        names (its record may not have reached this trainer's follower yet; the streams checked it exists)."""
        return max([self.first_lineage.version, *versions]) if self.first_lineage is not None else own

    def assigned_partitions(self) -> list[tuple[str, int]]:
        """This rank's share of every lane: partition p of each topic goes to rank p % world."""
        out = []
        for topic in self.lane_topics.values():
            try:  # (a node whose metadata cache does not show a just-created topic yet is asked again)
                md = wait_visible(self.consumer, [topic], 15.0).topics[topic]
            except RftbusError:
                raise RftbusError(f"trainer input topic {topic!r} does not exist at {self.cfg.bootstrap_servers} "
                                  "(create it with `rftbus topics create`)") from None
            out += [(topic, p) for p in sorted(md.partitions) if p % self.world == self.rank]
        if not out:
            raise RftbusError(f"rank {self.rank} of {self.world} has no partitions to read; use at most as many "
                              "ranks as the input topics have partitions")
        return out

    def latest_published(self) -> WeightVersion | None:
        return latest_published(self.cfg)

    def start_positions(self, tps: list[tuple[str, int]], overrides: dict[tuple[str, int], int] | None = None,
                        timestamp_ms: int | None = None) -> dict[tuple[str, int], int]:
        """Where reading starts without a checkpoint (or for partitions added since it)."""
        return start_positions(self.consumer, tps, overrides, timestamp_ms)

    def open_source(self, positions: dict[tuple[str, int], int], max_pending: int) -> BatchSource:
        """The lanes, read from these positions."""
        return BatchConsumer(self.consumer, self.lane_topics, self.deserializer, positions, max_pending=max_pending)

    def taskset(self):
        from rftbus.ground.tasksets.data import open_taskset

        return open_taskset(self.cfg.taskset)

    def scorer(self):
        """The explorers' rewards, which score the trainer's eval too; built once (a reward may hold a helper
        process or an HTTP client)."""
        if self._scorer is None:
            from rftbus.ground.rewards import make_rewards

            self._scorer = make_rewards(self.cfg.explorer.rewards)
        return self._scorer

    def close(self, consumer: bool = False) -> None:
        """Flush what was produced; `consumer`: close the Kafka consumer too (when no source owns it yet)."""
        if consumer:
            self.consumer.close()
        self.producer.flush(30)
        if self.publisher is not None:
            try:
                self.publisher.wait(0.0)
            except DeliveryError as e:  # (at a stop: the next start publishes the checkpoint's version again)
                log.warning("%s", e)
        if self.metrics is not None:
            self.metrics.close()


def build_components(cfg: Config, rank: int, world: int) -> Components:
    import torch

    from rftbus.ground.models.loading import context_of, load_policy, load_tokenizer
    from rftbus.ground.prompting import run_prompt_format
    from rftbus.trainer.engine import build_engine
    from rftbus.trainer.policy import PolicyWithValue

    tc = cfg.trainer
    if not cfg.kafka.wait_s:
        check_reachable(cfg)  # an unreachable cluster is the first thing said, before a slow engine build
    loss = make_loss(tc, cfg.rl.max_staleness)
    torch.manual_seed(tc.seed + rank)
    tokenizer = load_tokenizer(cfg.model)
    prompt = run_prompt_format(tokenizer, cfg)  # a model without the template the config asks for fails here
    lm = load_policy(cfg.model, tokenizer)
    lm.config.use_cache = False
    if tc.gradient_checkpointing:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if tc.lora is not None:  # only the adapter trains (and is published); a missing target module fails here
        from rftbus.ground.models.lora import wrap

        lm = wrap(lm, tc.lora)
    module = PolicyWithValue(lm, value_head=loss.needs_values)
    ref_model = None
    if loss.uses_reference():
        ref_model = load_policy(cfg.model, tokenizer).eval()
        ref_model.requires_grad_(False)
    engine = build_engine(module, tc)
    if ref_model is not None:  # beside the policy, in the policy's compute dtype (bf16 under trainer.precision)
        ref_model.to(engine.device, dtype=next(engine.module.parameters()).dtype)
    context = (context_of(lm) or 0) or tc.max_seq_len or 2048
    max_len = min(tc.max_seq_len or context, context)  # rows are cut at max_len; records past `context` are rejected
    embeddings: Any = lm.get_input_embeddings()
    limits = Limits(vocab=int(embeddings.num_embeddings), context=context, max_abs_advantage=tc.max_abs_advantage,
                    max_abs_reward=tc.max_abs_reward, logprob_tolerance=tc.logprob_tolerance,
                    images=prompt.vision.problem if prompt.vision is not None else None,
                    image_token=prompt.vision.token_id if prompt.vision is not None else None)

    if cfg.kafka.wait_s:  # the engine was built while the broker started (rftbus run): wait for it, and its topics
        create_topics(cfg, check_reachable(cfg))
    codec = make_codec(cfg.schema_registry.url, cfg.schema_registry.client)
    producer = make_producer(cfg, **{"linger.ms": 0})
    commits = CommitResults()
    consumer = make_consumer(cfg, tc.group_id, **{"enable.partition.eof": True,  # see BatchConsumer._at_end
                                                  "on_commit": commits})
    topics = cfg.topics
    lanes = {"priority": topics.curated_priority.name, "curated": topics.curated.name, "expert": topics.expert.name}
    wanted = (("priority", "curated") if "rl" in loss.lanes else ()) + (("expert",) if "expert" in loss.lanes else ())
    lane_topics = {lane: lanes[lane] for lane in wanted}
    rejector = Rejector(producer, codec.serializer(Rejection), topics.rejected.name,
                        trainer_stage(tc.lineage))
    weights_model = weights_key(cfg.model.name, tc.lineage)  # this trainer's versions (rftbus/ground/models/lineage.py)
    publisher = metrics = None
    if rank == 0:
        served = ServedVersions(cfg, tc.lineage).start() if cfg.gate.enabled else None
        publisher = WeightPublisher(make_transport(cfg), weights_model, producer, codec.serializer(WeightVersion),
                                    topics.weights.name, cfg.rl.max_staleness, tc.keep_versions, tc.gc_grace_s,
                                    served.versions if served is not None else set)
        metrics = MetricsSink(producer, codec.serializer(TrainerMetric), topics.metrics.name, weights_model,
                              cfg.state_dir / "tensorboard")
    ident = tc.id or str(rank)  # a restarted rank overwrites its own status file
    # another lineage's trainer is not the run's trainer (its step, its books): a role of its own
    status = StatusFile(cfg.state_dir, "trainer" if not tc.lineage else "lineage-trainer", ident, tc.status_interval_s)
    status.update(lineage=tc.lineage, rank=rank, world=world, loss_name=loss.name, off_policy=loss.off_policy,
                  step=0, version=0)
    ckpt_dir = Path(tc.checkpoint_dir) if tc.checkpoint_dir else cfg.state_dir / "checkpoints"
    first = WeightFollower(cfg, prefetch=False).start() if tc.lineage else None
    if first is not None:
        first.caught_up.wait(cfg.request_timeout_s * 3)  # the versions so far, before the first group is judged
    return Components(
        cfg=cfg, rank=rank, world=world, loss=loss, tokenizer=tokenizer, prompt=prompt,
        engine=engine, ref_model=ref_model,
        pad_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0, max_len=max_len, limits=limits,
        producer=producer, consumer=consumer, commits=commits, codec=codec,
        deserializer=codec.deserializer(ExperienceGroup),
        lane_topics=lane_topics, rejector=rejector, publisher=publisher, metrics=metrics, status=status,
        checkpoint_dir=ckpt_dir, first_lineage=first,
    )
