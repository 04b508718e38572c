"""What a run did, from evidence: the topics, the consumer groups' committed offsets, the live table and
the trainer's lineage and final checkpoint (rftbus.apps.run.ledger), tallied per experience
(rftbus.apps.run.tally, the same tally `rftbus chaos` uses).

Every experience produced to the raw topic is trained, rejected (any reason), in flight (a raw record
streams has not read, a live group it holds for feedback, a curated record behind the trainer's
checkpoint) or lost (nothing of the above, though a stage moved past it). In flight is what the logs
show as not yet consumed, never a difference, so a loss cannot hide in it: `lost` is reported, and
`ok` is false when it is not zero, when anything was trained twice, or when a stage is dead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median
from pathlib import Path

from rftbus.ground.config import Config
from rftbus.apps.run.durations import by_generation_time
from rftbus.apps.run.ledger import read_ledger
from rftbus.apps.run.tally import tally
from rftbus.streams.checkpoint.deliveries import read_quarantine


def shown(path: str | Path) -> str:
    """A path as the summary shows it: relative to the working directory when under it, so a summary kept in
    a repository (docs/runs/) names `.rftbus/<run>/...`, not the folder of the machine it ran on."""
    p = Path(path).absolute()
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


KEYS = ("raw", "curated", "curated_priority", "rejected", "weights")  # what the tally reads (not tasks, expert, ...)


@dataclass
class Reconciliation:
    produced: int = 0
    trained: int = 0
    rejected: int = 0
    in_flight: int = 0
    lost: int = 0
    duplicated: int = 0
    other_lost: int = 0  # weight versions never published, lineage steps missing
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    tasks_rejected_by_reason: dict[str, int] = field(default_factory=dict)  # explorer: task failed, no experience
    examples: list[str] = field(default_factory=list)  # the first lost / duplicated experiences, named
    trainer_steps: int = 0
    max_staleness_trained: int = 0
    trained_past_eta: int = 0  # answers trained staler than η: late grades, under the correction (rftbus/trainer/losses/m2.py)
    trained_past_eta_p50: float | None = None  # their median staleness (versions)
    rollouts_by_generation_time: list[dict] = field(default_factory=list)  # rftbus/apps/run/durations.py
    expert_trained: int = 0
    explorer_versions: list[int] = field(default_factory=list)  # weight versions experiences were made with
    dead: list[str] = field(default_factory=list)  # stages the supervisor gave up on
    quarantined: list[dict] = field(default_factory=list)  # outcomes streams could not write (rftbus/streams/checkpoint/deliveries.py)

    @property
    def balances(self) -> bool:
        return self.produced == self.trained + self.rejected + self.in_flight + self.lost

    @property
    def ok(self) -> bool:
        return (self.lost == self.other_lost == self.duplicated == 0 and not self.dead and not self.quarantined
                and self.balances)


def reconcile(cfg: Config, dead: list[str] | None = None, timeout_s: float = 120.0) -> Reconciliation:
    """Raises KafkaException / TimeoutError when the broker cannot be read (the caller reports it)."""
    led = read_ledger(cfg, timeout_s=timeout_s, keys=KEYS)
    t = tally(led)
    produced_ids = {i for raw in led.raw.values() for i in raw.experience_ids or []}
    task_reasons: dict[str, int] = {}
    for r in led.rejections:
        if r.source is not None and r.source[0] == cfg.topics.tasks.name:
            task_reasons[r.reason] = task_reasons.get(r.reason, 0) + 1
    lineage = led.lineage
    eta = cfg.rl.max_staleness
    past_eta = sorted(st for seg in lineage for eid, st in zip(seg["experience_ids"], seg.get("staleness") or [])
                      if st > eta and eid in produced_ids)  # (a demonstration has no policy version: not counted)
    return Reconciliation(
        produced=t.produced, trained=t.trained, rejected=t.rejected, in_flight=t.in_flight + t.pending,
        lost=t.lost_experiences, duplicated=t.duplicated_total,
        other_lost=t.lost_total - t.lost["streams"] - t.lost["trainer"], rejected_by_reason=t.rejected_by_reason,
        tasks_rejected_by_reason=task_reasons, examples=t.examples,
        trainer_steps=max((seg["step"] for seg in lineage), default=0),
        max_staleness_trained=max((seg.get("staleness_max", 0) for seg in lineage), default=0),
        rollouts_by_generation_time=by_generation_time(led),
        trained_past_eta=len(past_eta), trained_past_eta_p50=float(median(past_eta)) if past_eta else None,
        expert_trained=sum(1 for seg in lineage for eid in seg["experience_ids"] if eid not in produced_ids),
        explorer_versions=sorted({raw.model_version for raw in led.raw.values() if raw.experience_ids}),
        dead=list(dead or []),
        quarantined=read_quarantine(cfg.state_dir),
    )
