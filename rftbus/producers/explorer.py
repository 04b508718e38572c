"""The explorer rollout worker: tasks in, one group of experiences per task out.

Loop: poll a task -> wait for admission (partitions paused, group membership kept) -> run its
workflow (n samples) -> produce one ExperienceGroup record keyed by group_id -> commit the task offset
once Kafka has acknowledged it (the tasks side: `TaskIntake`). Weights are swapped between groups
when the follower has prefetched a newer verified version. SIGTERM/SIGINT (`request_stop`) ends the
loop after the current group; shutdown flushes, commits and leaves the group.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Message

from rftbus.ground.config import Config
from rftbus.ground.weights.swap import swap_in_ready
from rftbus.ground.kafka.clients import make_admin, make_producer
from rftbus.ground.models.loading import load_tokenizer
from rftbus.ground.prompting import run_prompt_format
from rftbus.ground.profile import phase
from rftbus.producers.admission import Admission, AdmissionUnavailable
from rftbus.producers.engines import RolloutEngine, make_engine
from rftbus.producers.engines.primed import PrimedEngine
from rftbus.producers.experience import expert_group, group_of
from rftbus.producers.no_signal import NoSignalMemory
from rftbus.ground.rewards import make_rewards
from rftbus.producers.rollout import run_task
from rftbus.producers.task_intake import TaskIntake
from rftbus.ground.status import StatusFile
from rftbus.producers.workflows import RolloutContext, task_problem
from rftbus.ground.schemas import (REJECTION_MAX_BYTES, DecodeError, ExperienceGroup, Rejection, Task, bound_key,
                            fitted_rejection, make_codec, topic_context)
from rftbus.ground.tasksets import get_taskset, taskset_names
from rftbus.ground.weights.follower import WeightFollower


@dataclass
class Timings:
    """Seconds spent per stage (what `rftbus bench explore` reports)."""

    generate_s: float = 0.0
    encode_s: float = 0.0
    produce_s: float = 0.0
    commit_s: float = 0.0  # the task intake's, taken at shutdown
    admission_s: float = 0.0
    experiences: int = 0
    groups: int = 0
    counts: dict[str, int] = field(default_factory=dict)


class Explorer:
    def __init__(self, cfg: Config, report: Callable[[str], None] = print, engine: RolloutEngine | None = None):
        self.cfg, self.report = cfg, report
        ex = cfg.explorer
        self.id = ex.id or f"{socket.gethostname()}-{os.getpid()}"
        codec = make_codec(cfg.schema_registry.url, cfg.schema_registry.client)
        self.encode_group, self.encode_rej = codec.serializer(ExperienceGroup), codec.serializer(Rejection)
        self.decode_task = codec.deserializer(Task)
        self.tokenizer = load_tokenizer(cfg.model)
        self.prompt = run_prompt_format(self.tokenizer, cfg)  # before the engine: a bad template fails first
        self.engine = engine or make_engine(cfg, self.tokenizer)
        self.primed = PrimedEngine(self.engine) if ex.batch_tasks > 1 else None
        rewards = make_rewards(ex.rewards)
        rewards.images = self.prompt.vision.pil if self.prompt.vision is not None else None  # what a reward sees
        self.ctx = RolloutContext(self.primed or self.engine, self.tokenizer, ex.sampling, rewards, ex.workflow,
                                  self.prompt)
        self.producer = make_producer(cfg)
        self.status = StatusFile(cfg.state_dir, "explorer", self.id, ex.status_interval_s)
        self.intake = TaskIntake(cfg, self.producer.flush, self.status, self.report)
        self.acks, self.seen = self.intake.acks, self.intake.seen
        syncs = getattr(self.engine, "supports_weight_sync", True)
        self.follower = WeightFollower(cfg, report=self.report) if syncs else None
        self.admission = Admission(cfg, make_admin(cfg), self.acks.unacked_groups,
                                   self._versions) if ex.admission else None
        self.no_signal = (NoSignalMemory(ex.no_signal_floor, min_group=ex.no_signal_min_group)
                          if ex.no_signal_floor is not None else None)
        self.t = Timings()
        self.stats = {"groups_produced": 0, "experiences_produced": 0, "tasks_rejected": 0,
                      "tasks_skipped_duplicate": 0, "tasks_skipped_no_signal": 0, "expert_produced": 0}
        self._stop = False
        self._headroom = float("inf")  # groups admission would still let in (set by _blocked_reason)
        self._handled = 0

    def request_stop(self) -> None:
        self._stop = True
        self.status.update(state="stopping")

    # -- main loop ------------------------------------------------------------------------------
    def run(self) -> dict:
        ex = self.cfg.explorer
        self.status.update(state="starting", version=self.engine.version, waiting_for_admission=False,
                           admission_bound=self.admission.bound if self.admission else None, **self.stats)
        self.status.start()
        if self.follower:
            with phase("start"):  # the newest weights before the first rollout
                self.follower.start()
                if not self.follower.caught_up.wait(15):
                    self.report(f"weights topic {self.cfg.topics.weights.name} not read to its end in 15 s; "
                                "starting anyway")
                self._swap_weights(wait_s=30)
        intake = self.intake
        intake.subscribe()
        self.status.update(state="running")
        try:
            while not self._stop:
                self.producer.poll(0)
                intake.commit()
                self._swap_weights()
                if not intake.hold_next(0.2):
                    if ex.idle_exit_s and intake.idle(ex.idle_exit_s):
                        self.report(f"no new task for {ex.idle_exit_s:g}s; exiting")
                        break
                    continue
                if not self._admitted():
                    continue
                batch = [(m, self._decode(m)) for m in [intake.take_held()] + self._more_tasks()]
                skips = self._no_signal_skips(batch)
                self._prime([(m, t) for m, t in batch if id(m) not in skips])
                for m, task in batch:  # a fetched task is always handled (or it would have to be rewound)
                    self._handle(m, task, skip=id(m) in skips)
                if self.primed:
                    self.primed.clear()
                intake.last_activity = time.monotonic()
                if ex.max_tasks and self._handled >= ex.max_tasks:
                    break
        finally:
            self._shutdown()
        return dict(self.stats, version=self.engine.version)

    def _admitted(self) -> bool:
        """True when the held task may start; otherwise keep membership with partitions paused."""
        t0 = time.perf_counter()
        why = self._blocked_reason()
        self.t.admission_s += time.perf_counter() - t0
        if why is None:
            if self.intake.resume():
                self.status.update(waiting_for_admission=False, waiting_reason=None, state="running")
                self.report("admission: resumed")
            return True
        if not self.intake.paused:
            self.intake.pause()
            self.report(f"admission: waiting ({why})")
        self.status.update(waiting_for_admission=True, waiting_reason=why, state="waiting")
        self.intake.serve_while_paused(0.2)
        return False

    def _blocked_reason(self) -> str | None:
        if self.cfg.rl.max_staleness == 0 and self.follower:
            latest = self.follower.latest_version()
            if latest is not None and latest > self.engine.version and latest not in self.follower.refused:
                return f"η=0: loading the newest version v{latest} first"
        if self.admission is None:
            return None
        try:
            pending = self.admission.pending()
        except AdmissionUnavailable as e:
            return f"consumer lags unreadable ({e})"
        self.status.update(pending_groups=round(pending, 2), admission_bound=round(self.admission.bound, 2),
                           admission_read_age_s=round(self.admission.read_age_s(), 1),
                           admission_failed_reads=self.admission.failed_reads)
        why = self.admission.blocked(pending)
        self._headroom = max(1.0, self.admission.bound - pending) if why is None else 0.0
        return why

    def _versions(self) -> tuple[int | None, int]:
        """(newest published version that is not refused, this explorer's own) for admission."""
        if self.follower is None:
            return None, self.engine.version
        latest = self.follower.latest_version()
        if latest is not None and latest in self.follower.refused:
            latest = self.engine.version
        return latest, self.engine.version

    # -- a batch of tasks ------------------------------------------------------------------------
    def _more_tasks(self) -> list:
        """Up to batch_tasks - 1 more tasks already fetched, within admission's headroom and max_tasks."""
        ex = self.cfg.explorer
        room = min(ex.batch_tasks, int(self._headroom) if self._headroom != float("inf") else ex.batch_tasks)
        if ex.max_tasks:
            room = min(room, ex.max_tasks - self._handled)
        return self.intake.more(room - 1)

    def _prime(self, batch: list[tuple[Message, Task | DecodeError]]) -> None:
        """One engine call for the batch's single-turn tasks (see rftbus/producers/engines/primed.py).
        Only a guess at what the workflows will ask: a task that is a duplicate or runs another
        workflow simply finds nothing primed, or leaves it unused."""
        if self.primed is None or len(batch) < 2:
            return
        ex, requests, pixels = self.cfg.explorer, [], []
        for msg, task in batch:
            if isinstance(task, DecodeError) or (msg.partition() or 0, task.task_id) in self.seen \
                    or self._task_problem(task) is not None:  # refused in _handle, never tokenized
                continue
            if (task.workflow or ex.workflow.kind) == "single_turn":
                try:
                    prompt = self.prompt.of_task(task)
                    shown = self.prompt.vision.inputs(task.images) if task.images else None
                except Exception:  # noqa: BLE001 - not primed: its own call reports the error, per task
                    continue
                ctx = self.engine.max_context
                if ctx is not None and len(prompt) >= ctx:  # its own call rejects it before generating
                    continue
                requests.append((tuple(prompt), self._group_size(task)))
                pixels.append(shown)
        if len(requests) < 2:
            return
        t0 = time.perf_counter()
        try:
            with phase("rollout"):
                self.primed.prime(requests, ex.sampling, pixels)
        except Exception as e:  # noqa: BLE001 - the batch falls back to one call per task, where errors are per task
            self.report(f"batched generation of {len(requests)} tasks failed ({type(e).__name__}: {e}); "
                        "generating them one by one")
        self.t.generate_s += time.perf_counter() - t0

    # -- one task -------------------------------------------------------------------------------
    def _decode(self, msg) -> Task | DecodeError:
        """The task, or why the record is not one."""
        try:
            task = self.decode_task(msg.value(), None)
        except DecodeError as e:
            return e
        if task is None:  # the deserializer passes tombstones through as None
            return DecodeError("empty", "null value (tombstone) on the tasks topic")
        assert isinstance(task, Task)  # (the deserializer accepts only Task)
        return task

    def _no_signal_skips(self, batch: list[tuple[Message, Task | DecodeError]]) -> set[int]:
        """The fetched tasks (by id of their message) not to generate now: no reward variance lately."""
        if self.no_signal is None:
            return set()
        return {id(m) for m, t in batch
                if isinstance(t, Task) and (m.partition() or 0, t.task_id) not in self.seen
                and not self.no_signal.roll_out(t)}

    def _handle(self, msg, task: Task | DecodeError, skip: bool = False) -> None:
        p, off = msg.partition(), msg.offset()
        self.acks.begin(p, off)
        handled = True
        try:
            if isinstance(task, DecodeError):
                self._reject(msg, "malformed", f"task does not decode: {task}")
                return
            if (p, task.task_id) in self.seen:
                self.stats["tasks_skipped_duplicate"] += 1
                return
            problem = self._task_problem(task)
            if problem is not None:  # bounded work: never a 10,000-sample group or a task-named import
                self.report(f"task {task.task_id[:80]} -> {problem[0]}: {problem[1][:300]}")
                self._reject(msg, *problem)
                self.stats["tasks_rejected"] += 1
                self.seen.add(p, task.task_id)
                return
            self._handled += 1
            if skip:  # handled: committed with no output, like a duplicate (a redo decides the same)
                self.stats["tasks_skipped_no_signal"] += 1
            else:
                self._roll_out(task, msg)
            self.seen.add(p, task.task_id)
        except BaseException:
            handled = False  # never sealed, so never committed: the task is redone, not silently skipped
            raise
        finally:
            if handled:
                self.acks.seal(p, off)
            t = self.t  # busy seconds per group: what `rftbus bench async` calls G (÷ groups, × B)
            self.status.update(version=self.engine.version, busy_s=round(t.generate_s + t.encode_s + t.produce_s, 4),
                               groups_timed=t.groups, **self.stats)

    def _task_problem(self, task: Task) -> tuple[str, str] | None:
        """(reason, detail) for a task the explorer refuses before any work: over its bounds (task_problem), or
        showing images that are over the bounds, forged (a hash or a uri that is not the store's), or that this
        model or engine cannot read."""
        problem = task_problem(task, self.cfg.explorer)
        if problem is not None or not task.images:
            return problem
        from rftbus.ground.images import verified_refusal

        bad = verified_refusal(task.images, self.cfg)  # read and hashed now: the sha256 is checked before generating
        if bad is not None:
            return bad.reason, f"task {task.task_id[:80]}: {bad.detail}"
        if self.prompt.vision is None or not self.engine.reads_images:
            why = "the model reads text only" if self.prompt.vision is None else \
                f"the {self.engine.name} engine does not read images yet"
            return "images_unsupported", f"task {task.task_id[:80]} shows {len(task.images)} image(s): {why}"
        return None

    def _group_size(self, task: Task) -> int:
        """The task's own n_samples, else rl.group_size, smaller for a prompt known flat (no_signal_min_group)."""
        if task.n_samples:
            return task.n_samples
        n = self.cfg.rl.group_size
        return self.no_signal.group_size(task, n) if self.no_signal is not None else n

    def _roll_out(self, task: Task, msg) -> None:
        ex, n = self.cfg.explorer, self._group_size(task)
        version = self.engine.version
        t0 = time.perf_counter()
        with phase("rollout"):
            outcome = run_task(task, n, self.ctx, ex.workflow.kind, ex.task_timeout_s, ex.task_retries)
        self.t.generate_s += time.perf_counter() - t0
        if outcome.samples is None:
            took = f"after {time.perf_counter() - t0:.3f}s, {outcome.attempts} attempt(s)"
            self.report(f"task {task.task_id} -> {outcome.reason} {took}: "
                        f"{outcome.detail.splitlines()[0] if outcome.detail else ''}")
            self._reject(msg, outcome.reason or "task_failed", f"{outcome.detail} ({took})")
            self.stats["tasks_rejected"] += 1
            return
        group = group_of(task, outcome.samples, version, self.id)
        self._produce(self.cfg.topics.raw.name, group.group_id, group, self.encode_group, msg)
        n_exp = len(group.samples)
        self.stats["groups_produced"] += 1
        self.stats["experiences_produced"] += n_exp
        self.t.groups += 1
        self.t.experiences += n_exp
        rewards = [s.reward or 0.0 for s in group.samples]
        self.status.update(last_reward_mean=sum(rewards) / n_exp)
        if self.no_signal is not None:
            self.no_signal.record(task, rewards)
        if self.admission:
            self.admission.produced_group()
        if ex.expert and task.taskset in taskset_names():
            demo = expert_group(task, get_taskset(task.taskset).expert(task), self.prompt, self.id)
            self._produce(self.cfg.topics.expert.name, demo.group_id, demo, self.encode_group, msg)
            self.stats["expert_produced"] += 1

    def _produce(self, topic: str, key: str | bytes | None, record, encode, msg) -> None:
        t0 = time.perf_counter()
        with phase("encode"):
            value = encode(record, topic_context(topic))
        t1 = time.perf_counter()
        cb = self.acks.expect(msg.partition(), msg.offset())
        while True:
            try:
                self.producer.produce(topic, value=value, key=key, on_delivery=cb)
                break
            except BufferError:  # local queue full: let deliveries drain
                self.producer.poll(0.1)
        self.t.encode_s += t1 - t0
        self.t.produce_s += time.perf_counter() - t1

    def _reject(self, msg, reason: str, detail: str) -> None:
        rec = fitted_rejection(max_bytes=REJECTION_MAX_BYTES, original=msg.value(), reason=reason, detail=detail,
                               stage="explorer", source_topic=msg.topic(), partition=msg.partition(),
                               offset=msg.offset())
        self._produce(self.cfg.topics.rejected.name, bound_key(msg.key()), rec, self.encode_rej, msg)

    # -- weights, shutdown -------------------------------------------------------------------------
    def _swap_weights(self, wait_s: float = 0.0) -> None:
        if not self.follower:
            return
        with phase("weights"):
            swapped = swap_in_ready(self.follower, self.engine, self.report, wait_s)
        if swapped:
            self.status.update(version=self.engine.version)
        self.status.update(refused_versions=sorted(self.follower.refused))

    def _shutdown(self) -> None:
        self.status.update(state="stopping")
        self.intake.close()
        self.t.commit_s = self.intake.commit_s
        if self.admission:
            self.admission.close()
        if self.follower:
            self.follower.stop()
        if self.engine:
            self.engine.close()
        self.status.update(state="stopped", waiting_for_admission=False, **self.stats)
        self.status.stop(state="stopped")
