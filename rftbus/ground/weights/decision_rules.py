"""Whether a record on the decisions topic is one the gate could have written: checked by every reader before it
is believed (serve routing by it, the trainer's garbage collection, the evaluator, the gate reading its own
state back after a restart, the run's summary).

Topic ACLs keep other writers off the topic (`rftbus run` turns them on: docs/USAGE.md, "Topic ACLs"); this keeps
a record that got on it anyway from steering what users are served (issue #63: forged decisions sent new sessions
to old versions, set canary shares outside [0, 1] and applied hundreds of rollbacks). A decision is believed only
if it names this run's gate (`gate.id`) and a lineage the config knows, its versions are not negative, its share
is a finite number in [0, 1] that matches whether it has a candidate, and it is a move the gate makes from the
state the decisions before it left: the first promotes a seed; a canary puts a version newer than any its lineage
tried (and not more than `trainer.max_version_jump` newer) beside the same serving version; a promote, rollback or
hold is about the candidate on canary. A refused record is counted and reported, never applied; a repeat (a
producer's retry) is skipped silently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rftbus.ground.config import Config
from rftbus.ground.models.lineage import label
from rftbus.ground.schemas import GateDecision

KINDS = ("promote", "canary", "rollback", "hold")
CLOCK_SLACK_MS = 60_000  # a decision may be dated this much before the one before it (a restarted gate's clock)


@dataclass
class DecisionBook:
    """The decisions believed so far, and the rule the next one must pass (`accept`)."""

    gate: str
    lineages: frozenset[str]
    max_jump: int
    serving: tuple[str, int] | None = None
    candidate: tuple[str, int] | None = None
    tried: dict[str, int] = field(default_factory=dict)  # lineage -> its newest version canaried or served
    last_ms: int = 0
    ids: set[str] = field(default_factory=set)
    refused: int = 0

    @classmethod
    def of(cls, cfg: Config) -> DecisionBook:
        return cls(cfg.gate.id, cfg.lineages, cfg.trainer.max_version_jump)

    def accept(self, d: GateDecision) -> tuple[bool, str]:
        """(believed, why not): a repeat is (False, ""); a refusal is counted."""
        if d.decision_id in self.ids:
            return False, ""
        why = self.refusal(d)
        if why is not None:
            self.refused += 1
            return False, f"decision {d.decision_id[:120]!r} refused: {why}"
        self._apply(d)
        return True, ""

    def refusal(self, d: GateDecision) -> str | None:
        if d.gate != self.gate:
            return f"written by {d.gate[:60]!r}, not by this run's gate (gate.id {self.gate!r})"
        if d.decision not in KINDS:
            return f"decision {d.decision[:40]!r} is none of {', '.join(KINDS)}"
        for name in {d.lineage, d.serving_lineage} - self.lineages:
            return f"lineage {name[:40]!r} is not one this config trains (run.trainers)"
        if min(d.version, d.serving, d.candidate if d.candidate is not None else 0) < 0:
            return "a negative version"
        share = d.canary_share
        if not math.isfinite(share) or not 0.0 <= share <= 1.0:
            return f"canary_share {share} is not in [0, 1]"
        if (d.candidate is None) != (share == 0.0):
            return f"canary_share {share} with candidate {d.candidate}: a share needs a candidate and a candidate a share"
        if d.created_at < self.last_ms - CLOCK_SLACK_MS:
            return f"dated {d.created_at}, before the decision before it ({self.last_ms})"
        return self._move(d)

    def _move(self, d: GateDecision) -> str | None:
        """Why `d` is not a move the gate makes from the state so far, or None."""
        ref, serving = (d.lineage, d.version), (d.serving_lineage, d.serving)
        cand = (d.lineage, d.candidate) if d.candidate is not None else None
        if self.serving is None:
            if d.decision != "promote" or serving != ref or cand is not None:
                return "the first decision promotes the version that serves first, with no candidate"
            return None
        now = label(*self.serving)
        if d.decision == "canary":
            if serving != self.serving:
                return f"a canary beside {label(*serving)}, but {now} serves"
            if cand != ref:
                return "a canary whose candidate is not its version"
            tried = self.tried.get(d.lineage, 0)
            if d.version <= tried:
                return f"{label(*ref)} is not newer than {label(d.lineage, tried)}, already tried"
            if d.version > tried + self.max_jump:
                return (f"{label(*ref)} is more than trainer.max_version_jump ({self.max_jump}) ahead of "
                        f"{label(d.lineage, tried)}")
            return None
        if self.candidate != ref:
            on = label(*self.candidate) if self.candidate else "no version"
            return f"a {d.decision} of {label(*ref)}, but {on} is on canary"
        if d.decision == "promote" and (serving != ref or cand is not None):
            return "a promote serves its version, with no candidate after it"
        if d.decision == "rollback" and (serving != self.serving or cand is not None):
            return f"a rollback keeps {now} serving, with no candidate after it"
        if d.decision == "hold" and (serving != self.serving or cand != ref):
            return f"a hold keeps {now} serving and {label(*ref)} on canary"
        return None

    def _apply(self, d: GateDecision) -> None:
        self.ids.add(d.decision_id)
        self.last_ms = max(self.last_ms, d.created_at)
        self.serving = (d.serving_lineage, d.serving)
        self.candidate = (d.lineage, d.candidate) if d.candidate is not None else None
        for lin, v in (self.serving, self.candidate or self.serving, (d.lineage, d.version)):
            if d.decision != "hold":
                self.tried[lin] = max(self.tried.get(lin, 0), v)
