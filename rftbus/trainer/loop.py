"""The trainer loop: batches off the stream → DeepSpeed step → checkpoint + offsets → weight version.

Order inside a step is what makes the guarantees hold:
1. whole groups are taken from the heads of the lanes (priority lane first), in offset order; what a
   group cannot train (invalid samples, stale ones: reason `stale`) goes to rejected;
2. the batch trains; its experience ids join the pending lineage segment;
3. at a checkpoint (every `checkpoint_interval` steps and at every publish): rejections are flushed,
   the checkpoint (model, optimizer, scheduler, RNG, positions, lineage) is made durable, and only
   then are offsets committed to Kafka (not waited for while training, the last one at a stop is);
4. every `sync_interval` steps the new version is published — after the checkpoint that holds it, so
   a restart never re-trains a step whose weights explorers already used.
Ranks move in lockstep: each turn of the loop they agree on one `Turn` (train, wait, stop) and train only together.
"""

from __future__ import annotations

import signal
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from rftbus.ground.config import Config
from rftbus.trainer.batch_source import BatchSource, Polled
from rftbus.ground.errors import RftbusError
from rftbus.trainer.checkpoint import Checkpoints, positions_to_json, read_lineage
from rftbus.trainer.checks import Reject, by_version, check_record
from rftbus.trainer.dedupe import TrainedIds
from rftbus.trainer.dist import all_gather, prepare_env
from rftbus.trainer.non_finite import bisect_take, skip_step
from rftbus.trainer.selection import Take, select
from rftbus.trainer.step_record import step_record
from rftbus.ground.profile import phase
from rftbus.ground.weights.staleness import bound


REJECTIONS_CHECKPOINT_S = 2.0  # how soon, while waiting, rejections alone get a checkpoint (and a commit)


@dataclass
class RunOptions:
    mode: str = "online"  # online | replay
    start_offsets: dict[tuple[str, int], int] | None = None
    start_timestamp_ms: int | None = None
    until_end: bool = False  # replay: stop once every partition is read to its end
    enforce_staleness: bool = True


@dataclass
class RunSummary:
    steps: int = 0
    start_step: int = 0
    version: int = 0
    trained: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    skipped_steps: int = 0  # batches with a non-finite loss: not trained, their records rejected
    bisected_steps: int = 0  # batches with a non-finite loss whose culprits were rejected, the rest trained
    resumed_from: str | None = None
    stopped_by: str = ""


@dataclass
class Turn:
    """What every rank agreed to do this turn of the loop: train `take`, wait (and `checkpoint` the positions
    rejections moved), or stop (`why`)."""

    act: Literal["train", "wait", "stop"]
    take: Take | None = None
    checkpoint: bool = False
    why: str = ""  # stop: its reason; wait: why the trainer holds, if it does


class Trainer:
    def __init__(self, cfg: Config, opts: RunOptions | None = None, log=print):
        self.cfg, self.opts, self.log = cfg, opts or RunOptions(), log
        self.tc = cfg.trainer
        self.dist = prepare_env(self.tc.device)
        self.rank, self.world = self.dist.rank, self.dist.world
        self.stop_reason = ""
        self.summary = RunSummary()
        self.step = self.version = 0
        self.recent_steps: deque[tuple[float, int]] = deque(maxlen=32)  # (unix time, step): exact gaps
        self.pending_lineage: list[dict] = []  # lineage lines of the steps since the last checkpoint
        self.verdicts: dict[tuple[str, int, int], list[int]] = {}  # record -> samples it may still train
        self.trained_ids = TrainedIds(self.tc.dedupe_window)  # ids decided: a repeat is rejected `duplicate`
        self.last_ckpt, self.dirty = 0, False
        self.last_ckpt_at, self.rejected_at_ckpt = time.monotonic(), 0
        self.ckpt_positions: dict[tuple[str, int], int] | None = None  # bc.positions() at the last checkpoint
        self.last_step_at = time.monotonic()  # the end of the last step (or the start): `step_wait_s`
        self.idle_since = time.monotonic()  # the last step, or the start: `idle_exit_s`

    # -- setup -----------------------------------------------------------------------------------
    def _build(self) -> None:
        from rftbus.trainer.components import build_components

        self.c = build_components(self.cfg, self.rank, self.world)
        self.loss = self.c.loss
        self.replay = None
        if self.tc.demo_replay and "expert" in self.loss.lanes:
            from rftbus.trainer.replay import DemoReplay

            self.replay = DemoReplay(self.tc.demo_replay, self.tc.demo_replay_per_step, seed=self.rank)
        self.ckpts = Checkpoints(self.c.checkpoint_dir, self.rank, self.world)

    def _on_signal(self, signum, _frame) -> None:
        self.stop_reason = signal.Signals(signum).name

    def _resume_or_start(self) -> BatchSource:
        c, latest = self.c, self.ckpts.latest()
        tps = c.assigned_partitions()
        if latest is not None:
            if self.opts.start_offsets or self.opts.start_timestamp_ms is not None:
                raise RftbusError(f"checkpoint {latest[0]} exists, so the stream position comes from it; "
                                  "start offsets/timestamps apply only to a fresh checkpoint_dir")
            path, m = latest
            self.ckpts.restore(c.engine, path, m)
            self.step, self.version = m.step, m.version
            positions = m.positions_of(self.rank)
            missing = [tp for tp in tps if tp not in positions]
            if missing:  # partitions added since the checkpoint
                positions.update(c.start_positions(missing))
            self.summary.resumed_from = path.name
            if self.replay is not None and "expert" in c.lane_topics:
                n = self.replay.refill(self.cfg, positions, c.lane_topics["expert"], c.deserializer, c.limits)
                self.log(f"demonstration replay: {n} rebuilt from the log")
            self._ensure_published()
            self.log(f"resumed from {path.name}: step {self.step}, version {self.version}")
        else:
            self.step, self.version = 0, 0
            positions = c.start_positions(tps, self.opts.start_offsets, self.opts.start_timestamp_ms)
            self._publish(0)  # fresh start: v0, the weights every explorer can also build from the seed
            self.log("fresh start: published version 0")
        self.summary.start_step = self.step
        n = self.trained_ids.seed(read_lineage(self.ckpts.lineage))  # what the restored weights have seen
        if n:
            self.log(f"dedupe: {len(self.trained_ids)} trained experience ids remembered from the lineage")
        return c.open_source(positions, self.tc.max_pending_groups or 4 * self.cfg.rl.batch_groups)

    def _publish(self, version: int) -> None:
        with phase("publish"):
            self._publish_version(version)

    def _publish_version(self, version: int) -> None:
        from rftbus.trainer.engine import policy_state_dict

        sd, meta = policy_state_dict(self.c.engine)  # collective under ZeRO-3
        if self.rank == 0:
            assert self.c.publisher is not None  # rank 0 has one
            rec = self.c.publisher.publish(sd, version, self.step, meta)
            self.c.status.update(version=version, weights_uri=rec.uri)

    def _ensure_published(self) -> None:
        """After a crash between checkpoint and publish, the checkpoint's version is published now."""
        need = False
        if self.rank == 0:
            last = self.c.latest_published()
            need = last is None or last.version < self.version
        if all_gather(need, self.world)[0]:
            self._publish(self.version)
            self.log(f"published version {self.version} that the checkpoint holds")

    # -- batches ---------------------------------------------------------------------------------
    def _trainable(self, r: Polled) -> list[int]:
        """The samples of `r` that may train now. Each rejection is sent once: the record's verdict is
        kept until it is finished, and samples that turn stale leave it as they are rejected."""
        key = (r.topic, r.partition, r.offset)
        idx = self.verdicts.get(key)
        if idx is None:
            v = check_record(r, self.c.limits)
            if v.train and r.group is not None:  # a repeat of an id already decided or pending: never twice
                ok, dup = self.trained_ids.claim(key, [r.group.samples[i].experience_id for i in v.train])
                if dup:
                    v.rejects.append(Reject("duplicate", dup[0][1], [v.train[k] for k, _ in dup], evidence=False))
                    v.train = [v.train[k] for k in ok]
            self._reject(r, v.rejects)
            idx = self.verdicts[key] = v.train
        check_expert = self.tc.staleness_for_expert
        if idx and r.group is not None and self.opts.enforce_staleness and (r.lane != "expert" or check_expert):
            ref = self.c.staleness_reference(self.version, [r.group.samples[i].model_version for i in idx])
            fresh, rejects = by_version(r.group, idx, ref, bound(self.cfg.rl, r.group.source))
            if rejects:  # rejected once, and never trained
                self._reject(r, rejects)
                idx = self.verdicts[key] = fresh
        return idx

    def _reject(self, r: Polled, rejects: list[Reject]) -> None:
        for rej in rejects:
            ids = [r.group.samples[i].experience_id for i in rej.indices] if r.group is not None else []
            self.c.rejector(r, rej.reason, rej.detail, ids, rej.evidence)
            self.dirty = True

    def _finish(self, bc: BatchSource, records: list[Polled]) -> None:
        bc.finish(records)
        for r in records:
            self.verdicts.pop((r.topic, r.partition, r.offset), None)
            self.trained_ids.finish((r.topic, r.partition, r.offset))

    def _drop_dead_heads(self, bc: BatchSource) -> None:
        """Records at a lane's head with nothing left to train are done at once (not held for a step)."""
        for lane in bc.lanes:
            while True:
                head = bc.head(lane, 1)
                if not head or self._trainable(head[0]):
                    break
                self._finish(bc, head)

    def _select(self, bc: BatchSource, partial: bool) -> Take | None:
        self._drop_dead_heads(bc)
        return select(bc, self.cfg, self.loss, self._trainable, partial, self.last_step_at)

    # -- steps -----------------------------------------------------------------------------------
    def _batch(self, rows: list):
        from rftbus.trainer.batch import collate, late_rows, whiten_advantages

        batch = collate(rows, self.c.pad_id, self.c.max_len, self.c.prompt.vision)
        batch.late = late_rows(rows, self.c.staleness_reference(self.version), self.cfg.rl.max_staleness)
        return whiten_advantages(batch) if self.tc.advantage_norm == "batch" else batch

    def _train(self, bc: BatchSource, take: Take) -> None:
        from rftbus.trainer.batch import rows_of
        from rftbus.trainer.step import NonFiniteLoss, train_step

        t0 = time.perf_counter()
        for attempt in (1, 2):  # a non-finite loss: its samples are bisected out and the rest tried again
            groups = [(r, r.group, idx) for r, idx in take if idx and r.group is not None]  # (trainable: decoded)
            rows = [row for r, g, idx in groups for row in rows_of(g, r.lane == "expert", idx)]
            replayed = self.replay.draw() if self.replay is not None else []  # trained again, not counted again
            batch = self._batch(rows + replayed)
            try:
                parts = train_step(self.c.engine, self.loss, batch, self.c.ref_model,
                                   self.tc.update_epochs, agree=lambda ok: all(all_gather(ok, self.world)),
                                   micro_tokens=self.tc.micro_batch_tokens,
                                   agree_count=lambda n: max(all_gather(n, self.world)))
                break
            except NonFiniteLoss as e:
                kept = bisect_take(self, take, e.detail) if attempt == 1 else None
                if kept is None:
                    skip_step(self, bc, take, e.detail)
                    return
                if not any(idx for _, idx in kept):  # every sample was to blame (on every rank)
                    self._finish(bc, [r for r, _ in kept])
                    return
                take = kept
        self._finish(bc, [r for r, _ in take])
        if self.replay is not None:
            self.replay.add(rows)
        dt = time.perf_counter() - t0
        self.step += 1
        self.last_step_at = time.monotonic()
        values, line = step_record(step=self.step, rank=self.rank, version=self.version,
                                   ref=self.c.staleness_reference(self.version), parts=parts, rows=rows, groups=groups,
                                   take=take, tokens=int(batch.attention_mask.sum()), step_s=dt, replayed=len(replayed))
        self.pending_lineage.append(line)
        self.summary.trained += len(rows)
        publish_now = self.step % self.cfg.rl.sync_interval == 0
        if publish_now or self.step - self.last_ckpt >= self.tc.checkpoint_interval:
            self._checkpoint(bc, self.version + 1 if publish_now else self.version)
        if publish_now:
            self.version += 1
            self._publish(self.version)
        values["busy_s"] = time.perf_counter() - t0  # step + checkpoint + publish: `bench async`'s T
        if self.rank == 0:
            assert self.c.metrics is not None  # rank 0 has one
            self.c.metrics.emit(self.step, self.version, values)
            if self.step == self.summary.start_step + 1:
                self.c.status.update(first_step_at=time.time())  # the run's summary: how soon it learned
            self.recent_steps.append((round(time.time(), 3), self.step))
            # the run counts the demonstrations still to train from these (several ranks: rank 0 has only its own)
            own = {"positions": positions_to_json(bc.positions())} if self.world == 1 else {}
            self.c.status.update(state="training", step=self.step, version=self.version, **own,
                                 recent_steps=list(self.recent_steps), last_reward=values.get("reward_mean"),
                                 staleness=values["staleness_mean"], throughput_tokens_s=values["tokens_per_s"],
                                 last_loss=values.get("loss"))
            self.log(f"step {self.step} v{self.version} loss {values.get('loss', 0.0):.4f} "
                     f"reward {values.get('reward_mean', float('nan')):.3f} staleness {values['staleness_mean']:.2f} "
                     f"{len(rows)} exps {values['tokens_per_s']:.0f} tok/s")
        if self.tc.eval_interval and self.step % self.tc.eval_interval == 0 and self.rank == 0:
            self._eval()

    def _eval(self) -> None:
        from rftbus.trainer.evaluate import evaluate

        res = evaluate(self.c.engine.module.lm, self.c.prompt, self.c.taskset(), self.tc.eval_n,
                       self.tc.eval_max_new_tokens or self.cfg.explorer.sampling.max_new_tokens, scorer=self.c.scorer())
        assert self.c.metrics is not None  # evals run on rank 0, which has one
        self.c.metrics.emit(self.step, self.version, res, kind="eval")

    def _rejected_since_checkpoint(self) -> bool:
        return self.dirty or sum(self.c.rejector.count.values()) != self.rejected_at_ckpt

    def _moved_since_checkpoint(self, bc: BatchSource) -> bool:
        """Positions moved without a step: rejections, or a partition read past records no reader sees
        (a streams recovery fence, rftbus/ground/kafka/fence.py). Both must reach Kafka's committed offsets while
        the trainer waits, or admission counts them as pending and the explorers wait for a step that never
        comes (the fence's case found by the cluster chaos run)."""
        return self._rejected_since_checkpoint() or (self.ckpt_positions is not None
                                                      and bc.positions() != self.ckpt_positions)

    def _checkpoint(self, bc: BatchSource, version: int, final: bool = False) -> None:
        with phase("checkpoint"):
            self._save_checkpoint(bc, version, final)

    def _save_checkpoint(self, bc: BatchSource, version: int, final: bool) -> None:
        self.c.rejector.flush()
        positions = bc.positions()
        all_pos = all_gather(positions_to_json(positions), self.world)
        segment = [line for seg in all_gather(self.pending_lineage, self.world) for line in seg]
        self.ckpts.save(self.c.engine, self.step, version, all_pos, segment, self.loss.name)
        bc.commit(positions, wait=final)  # only now: the checkpoint holding these offsets is durable
        if self.c.commits is not None and self.c.commits.failed:  # (commits not waited for: Kafka's answers)
            self.c.status.update(commit_failures=self.c.commits.failed, last_commit_error=self.c.commits.last_error)
        self.ckpt_positions = dict(positions)
        if self.rank == 0:
            assert self.c.metrics is not None  # rank 0 has one
            self.c.metrics.emit_trained(segment)  # lineage for analytics, never of a step a restart rolls back
        self.pending_lineage, self.last_ckpt, self.dirty = [], self.step, False
        self.last_ckpt_at, self.rejected_at_ckpt = time.monotonic(), sum(self.c.rejector.count.values())
        self.ckpts.prune(self.tc.keep_checkpoints)

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> RunSummary:
        """Start (resume or publish v0), then turn by turn: poll, agree with the other ranks, and train, checkpoint
        or wait; at a stop, the last checkpoint. Steps publish their versions themselves (`_train`)."""
        self._trap_signals()
        bc = self._start()
        try:
            while (turn := self._next_turn(bc)).act != "stop":
                if turn.act == "train":
                    assert turn.take is not None
                    self._train(bc, turn.take)
                    self.idle_since = time.monotonic()
                else:
                    self._wait(bc, turn)
            self.summary.stopped_by = turn.why
            if self.step > self.last_ckpt or self._rejected_since_checkpoint():
                self._checkpoint(bc, self.version, final=True)
        finally:
            self._close(bc)
        return self.summary

    def _trap_signals(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _start(self) -> BatchSource:
        """The model, DeepSpeed and the consumer, then resume from the checkpoint or publish v0."""
        with phase("start"):
            self._build()
            self.c.status.start()
        try:
            with phase("start"):
                bc = self._resume_or_start()
        except BaseException:
            self.c.status.stop(state="failed")
            self.c.close(consumer=True)
            raise
        self.last_ckpt, self.dirty = self.step, False
        self.ckpt_positions = bc.positions()
        self.last_ckpt_at = self.last_step_at = self.idle_since = time.monotonic()
        return bc

    def _next_turn(self, bc: BatchSource) -> Turn:
        """Poll, pick this rank's batch, and agree with every rank on what the turn does: ranks train only
        together, and one rank's stop stops them all."""
        with phase("poll"):
            bc.poll(self.tc.poll_timeout_s)
        held = self.tc.hold_at_step is not None and self.step >= self.tc.hold_at_step
        take = None if held else self._select(bc, partial=False)
        at_end = take is None and not held and self.opts.until_end and bc.caught_up()
        self._check_limits()
        # Rejections (stale, malformed) move positions without a step; checkpoint them while waiting, or their
        # offsets stay uncommitted, count as pending for admission, and the explorers wait for a step that can
        # never come (found by `rftbus chaos`).
        due = self._moved_since_checkpoint(bc) and time.monotonic() - self.last_ckpt_at >= REJECTIONS_CHECKPOINT_S
        ready, stops, ends, dues = zip(*all_gather((take is not None, self.stop_reason, at_end, due), self.world),
                                       strict=True)
        if any(stops):
            return Turn("stop", why=next(s for s in stops if s))
        if all(ready):
            return Turn("train", take)
        if all(r or e for r, e in zip(ready, ends, strict=True)):  # replay reached the end: train what is left
            take = take or self._select(bc, partial=True)
            if all(all_gather(take is not None, self.world)):
                return Turn("train", take)
            return Turn("stop", why="end")
        return Turn("wait", checkpoint=any(dues), why=f"held at step {self.step} (trainer.hold_at_step)" if held else "")

    def _check_limits(self) -> None:
        """trainer.max_steps and trainer.idle_exit_s become a stop reason."""
        if not self.stop_reason and self.tc.max_steps is not None and self.step - self.summary.start_step >= \
                self.tc.max_steps:
            self.stop_reason = "max_steps"
        if (not self.stop_reason and self.tc.idle_exit_s is not None
                and time.monotonic() - self.idle_since > self.tc.idle_exit_s):
            self.stop_reason = "idle"

    def _wait(self, bc: BatchSource, turn: Turn) -> None:
        if turn.checkpoint:
            self._checkpoint(bc, self.version)
        self.c.status.update(state="waiting", pending_units=sum(len(b) for b in bc.lanes.values()),
                             **({"waiting_reason": turn.why} if turn.why else {}))

    def _close(self, bc: BatchSource) -> None:
        self.c.status.stop(state="stopped")
        self.summary.steps = self.step - self.summary.start_step
        self.summary.version = self.version
        self.summary.rejected = dict(self.c.rejector.count)
        self.c.close()
        bc.close()
