"""The gate's state, fed by what the log says (pure: no Kafka here, so it is tested on its own).

What it is fed: served answers (a live group's samples: experience id, version and its lineage, when), their
grades (feedback turned into rewards by the streams' one rule, `rftbus.ground.grades.rules.grades`), published
versions, held-out eval points, and its own earlier decisions (`adopt`), which are the truth after a restart: a
gate that was killed reads them back and never decides again what it already decided.

A version is a `Ref`: its lineage (the trainer that made it: "" for the run's first, rftbus/ground/models/lineage.py) and
its number. Several trainers' versions are gated by the same rule, one candidate at a time.

What it decides (`look`): the first serving version (the first lineage's newest published when the gate first
starts: v0, the seed, when it starts with the run), a candidate's canary (when none is on canary: a lineage's newest
version newer than any of it tried before, the lineage whose last canary is oldest first, so no trainer starves
another), and, for the candidate, promote / rollback / hold by `rule.decide` on the answers served since its canary
began.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from rftbus.ground.config.gate import GateConfig
from rftbus.consumers.gate.rule import TEST, Arm, decide
from rftbus.ground.models.lineage import label
from rftbus.ground.schemas import GateDecision, now_ms

MAX_ANSWERS = 1_000_000  # served answers remembered for their grades (the oldest are forgotten first)
MAX_EARLY = 100_000  # grades that came before their answer (another topic, another partition)


@dataclass(frozen=True)
class Ref:
    """One version of one lineage."""

    lineage: str
    version: int

    def __str__(self) -> str:
        return label(self.lineage, self.version)


def decision_id(model: str, version: int, decision: str, look: int = 0, lineage: str = "") -> str:
    """One id per decision that must happen once (a hold per look)."""
    return (f"{model}:{label(lineage, version)}:{decision}"
            + (f":{look}" if decision == "hold" else ""))


@dataclass
class Served:
    ref: Ref
    at_ms: int
    graded: bool = False


@dataclass
class GateState:
    model: str
    rule: GateConfig
    gate: str = "gate"
    serving: Ref | None = None
    candidate: Ref | None = None
    canary_ms: int = 0  # when the candidate's canary began
    looks: int = 0  # the last look taken (k: both arms had k × min_answers graded answers)
    newest: dict[str, int] = field(default_factory=dict)  # lineage -> its newest published version
    tried: dict[str, int] = field(default_factory=dict)  # lineage -> its newest version canaried (or first served)
    last_canary: dict[str, int] = field(default_factory=dict)  # lineage -> when its last canary began (ms)
    rolled_back: set[Ref] = field(default_factory=set)
    decided: set[str] = field(default_factory=set)
    evals: dict[Ref, float] = field(default_factory=dict)
    answers: OrderedDict[str, Served] = field(default_factory=OrderedDict)
    early: OrderedDict[str, float] = field(default_factory=OrderedDict)
    arms: dict[Ref, Arm] = field(default_factory=dict)  # version -> graded answers served since the canary began

    # -- what the log says ---------------------------------------------------------------------------------
    def served(self, experience_id: str, version: int, at_ms: int, lineage: str = "") -> None:
        if experience_id in self.answers:
            return  # a record written twice (a producer's retry): one answer
        self.answers[experience_id] = Served(Ref(lineage, version), at_ms)
        while len(self.answers) > MAX_ANSWERS:
            self.answers.popitem(last=False)
        reward = self.early.pop(experience_id, None)
        if reward is not None:
            self.graded(experience_id, reward)

    def graded(self, experience_id: str, reward: float) -> bool:
        """A grade; True when it is new evidence (an answer of the serving version or the candidate served since
        the canary began, graded for the first time)."""
        a = self.answers.get(experience_id)
        if a is None:
            self.early[experience_id] = reward
            while len(self.early) > MAX_EARLY:
                self.early.popitem(last=False)
            return False
        if a.graded:
            return False  # the first grade of an answer counts (a correction later does not count twice)
        a.graded = True
        if self.candidate is None or a.at_ms < self.canary_ms or a.ref not in (self.serving, self.candidate):
            return False
        self.arms.setdefault(a.ref, Arm()).add(reward)
        return True

    def published(self, version: int, lineage: str = "") -> None:
        self.newest[lineage] = max(self.newest.get(lineage, -1), version)

    def evaluated(self, version: int, reward: float, lineage: str = "") -> None:
        self.evals[Ref(lineage, version)] = reward

    def adopt(self, d: GateDecision) -> None:
        """An earlier decision read back from topics.decisions: the state it left is the state now."""
        self.decided.add(d.decision_id)
        ref = Ref(d.lineage, d.version)
        if d.decision == "hold":
            if ref == self.candidate:
                self.looks = max(self.looks, int(d.evidence.get("look", 0)))
            return
        if d.decision == "canary":
            self._begin(ref, d.created_at)
        elif d.decision == "rollback":
            self.rolled_back.add(ref)
        self._tried(ref)
        self.serving = Ref(d.serving_lineage, d.serving)
        self._tried(self.serving)
        self.candidate = Ref(d.lineage, d.candidate) if d.candidate is not None else None
        if self.candidate is None:
            self.arms.clear()

    def _tried(self, ref: Ref) -> None:
        self.tried[ref.lineage] = max(self.tried.get(ref.lineage, 0), ref.version)

    def _begin(self, ref: Ref, at_ms: int) -> None:
        self.candidate, self.canary_ms, self.looks = ref, at_ms, 0
        self.last_canary[ref.lineage] = at_ms
        self.arms = {}

    def _next(self) -> Ref | None:
        """The next candidate: each lineage's newest version newer than what it tried (its seed, v0, is never one;
        the candidate on canary and every version rolled back were tried), the lineage whose last canary is oldest
        first."""
        ready = [Ref(lin, v) for lin, v in self.newest.items() if v > self.tried.get(lin, 0)]
        return min(ready, key=lambda r: (self.last_canary.get(r.lineage, 0), r.lineage), default=None)

    # -- what it decides -----------------------------------------------------------------------------------
    def look(self, now: int | None = None) -> list[GateDecision]:
        """The decisions the evidence calls for now (each also applied to the state)."""
        now = now_ms() if now is None else now
        made: list[GateDecision] = []

        def emit(decision: str, ref: Ref, serving: Ref, candidate: Ref | None, reason: str,
                 evidence: dict[str, float]) -> None:
            d = self._make(decision, ref, serving, candidate, reason, evidence, now)
            if self._apply(d):
                made.append(d)

        if self.serving is None:
            if "" not in self.newest:
                return made  # nothing published yet (the trainer publishes v0, the seed, first): nothing can serve
            seed = Ref("", self.newest[""])
            emit("promote", seed, seed, None, f"the first serving version: {seed}, the newest published when the "
                 f"gate started", {})
        serving = self.serving
        assert serving is not None
        if self.candidate is None:
            nxt = self._next()
            if nxt is not None:
                emit("canary", nxt, serving, nxt, f"{nxt} serves {self.rule.canary_share:.0%} of new sessions "
                     f"beside {serving}", {})
            return made
        cand = self.candidate
        s, c = self.arms.get(serving, Arm()), self.arms.get(cand, Arm())
        k = min(s.n, c.n) // self.rule.min_answers  # the look both arms have reached
        tested = self.looks < k <= self.rule.max_looks
        v = decide(s, c, self.rule, k if tested else 0, self.evals.get(serving), self.evals.get(cand))
        newer = self._next()
        if v.decision == "promote":
            emit("promote", cand, cand, None, v.reason, v.evidence)
        elif v.decision == "rollback":
            emit("rollback", cand, serving, None, v.reason, v.evidence)
        elif newer is not None and now - self.canary_ms >= self.rule.replace_after_s * 1000:
            emit("canary", newer, serving, newer, f"{newer} replaces {cand} on canary: no decision in "
                 f"{self.rule.replace_after_s:g} s ({v.reason})", v.evidence)
        elif tested:  # an inconclusive look is on the record too
            emit("hold", cand, serving, cand, v.reason, v.evidence)
        elif self.looks == 0 and now - self.canary_ms >= self.rule.hold_every_s * 1000:
            # no look yet this long (little or no traffic): said once, with what there is
            emit("hold", cand, serving, cand, v.reason, v.evidence)
        return made

    def _make(self, decision: str, ref: Ref, serving: Ref, candidate: Ref | None, reason: str,
              evidence: dict[str, float], now: int) -> GateDecision:
        look = int(evidence.get("look", 0))
        return GateDecision(decision_id=decision_id(self.model, ref.version, decision, look, ref.lineage),
                            model=self.model, decision=decision, version=ref.version, serving=serving.version,
                            candidate=candidate.version if candidate is not None else None,
                            canary_share=self.rule.canary_share if candidate is not None else 0.0, gate=self.gate,
                            reason=reason, test=TEST if evidence else "", evidence=dict(evidence), created_at=now,
                            lineage=ref.lineage, serving_lineage=serving.lineage)

    def _apply(self, d: GateDecision) -> bool:
        if d.decision_id in self.decided:
            return False
        self.adopt(d)
        return True
