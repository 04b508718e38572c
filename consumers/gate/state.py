"""The gate's state, fed by what the log says (pure: no Kafka here, so it is tested on its own).

What it is fed: served answers (a live group's samples: experience id, version, when), their grades (feedback
turned into rewards by the streams' one rule, `rftbus.streams.feedback.grades`), published versions, held-out
eval points, and its own earlier decisions (`adopt`), which are the truth after a restart: a gate that was
killed reads them back and never decides again what it already decided.

What it decides (`look`): the first serving version (the newest published when the gate first starts: v0, the
seed, when it starts with the run), a
candidate's canary (the newest published version newer than the serving one, when none is on canary), and, for
the candidate, promote / rollback / hold by `rule.decide` on the answers served since its canary began.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from rftbus.config.gate import GateConfig
from rftbus.consumers.gate.rule import TEST, Arm, decide
from rftbus.schemas import GateDecision, now_ms

MAX_ANSWERS = 1_000_000  # served answers remembered for their grades (the oldest are forgotten first)
MAX_EARLY = 100_000  # grades that came before their answer (another topic, another partition)


def decision_id(model: str, version: int, decision: str, look: int = 0) -> str:
    """One id per decision that must happen once (a hold per look)."""
    return f"{model}:v{version}:{decision}" + (f":{look}" if decision == "hold" else "")


@dataclass
class Served:
    version: int
    at_ms: int
    graded: bool = False


@dataclass
class GateState:
    model: str
    rule: GateConfig
    gate: str = "gate"
    serving: int | None = None
    candidate: int | None = None
    canary_ms: int = 0  # when the candidate's canary began
    looks: int = 0  # the last look taken (k: both arms had k × min_answers graded answers)
    newest: int = -1  # the newest published version
    rolled_back: set[int] = field(default_factory=set)
    decided: set[str] = field(default_factory=set)
    evals: dict[int, float] = field(default_factory=dict)
    answers: OrderedDict[str, Served] = field(default_factory=OrderedDict)
    early: OrderedDict[str, float] = field(default_factory=OrderedDict)
    arms: dict[int, Arm] = field(default_factory=dict)  # version -> graded answers served since the canary began

    # -- what the log says ---------------------------------------------------------------------------------
    def served(self, experience_id: str, version: int, at_ms: int) -> None:
        if experience_id in self.answers:
            return  # a record written twice (a producer's retry): one answer
        self.answers[experience_id] = Served(version, at_ms)
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
        if self.candidate is None or a.at_ms < self.canary_ms or a.version not in (self.serving, self.candidate):
            return False
        self.arms.setdefault(a.version, Arm()).add(reward)
        return True

    def published(self, version: int) -> None:
        self.newest = max(self.newest, version)

    def evaluated(self, version: int, reward: float) -> None:
        self.evals[version] = reward

    def adopt(self, d: GateDecision) -> None:
        """An earlier decision read back from topics.decisions: the state it left is the state now."""
        self.decided.add(d.decision_id)
        if d.decision == "hold":
            if d.version == self.candidate:
                self.looks = max(self.looks, int(d.evidence.get("look", 0)))
            return
        if d.decision == "canary":
            self._begin(d.version, d.created_at)
        elif d.decision == "rollback":
            self.rolled_back.add(d.version)
        self.serving, self.candidate = d.serving, d.candidate
        if self.candidate is None:
            self.arms.clear()

    def _begin(self, version: int, at_ms: int) -> None:
        self.candidate, self.canary_ms, self.looks = version, at_ms, 0
        self.arms = {}

    # -- what it decides -----------------------------------------------------------------------------------
    def look(self, now: int | None = None) -> list[GateDecision]:
        """The decisions the evidence calls for now (each also applied to the state)."""
        now = now_ms() if now is None else now
        out: list[GateDecision] = []
        if self.serving is None:
            if self.newest < 0:
                return []  # nothing published yet (the trainer publishes v0, the seed, first): nothing can serve
            seed = self.newest
            out.append(self._make("promote", seed, seed, None, f"the first serving version: v{seed}, the newest "
                                  f"published when the gate started", {}, now))
        if self.candidate is None:
            nxt = self.newest if self.newest > (self.serving or 0) and self.newest not in self.rolled_back else None
            if nxt is not None and self.serving is not None:
                out.append(self._make("canary", nxt, self.serving, nxt, f"v{nxt} serves {self.rule.canary_share:.0%} "
                                      f"of new sessions beside v{self.serving}", {}, now))
            return [d for d in out if self._apply(d)]
        s, c = self.arms.get(self.serving or 0, Arm()), self.arms.get(self.candidate, Arm())
        k = min(s.n, c.n) // self.rule.min_answers  # the look both arms have reached
        tested = self.looks < k <= self.rule.max_looks
        v = decide(s, c, self.rule, k if tested else 0, self.evals.get(self.serving or 0),
                   self.evals.get(self.candidate))
        if v.decision == "promote":
            out.append(self._make("promote", self.candidate, self.candidate, None, v.reason, v.evidence, now))
        elif v.decision == "rollback":
            out.append(self._make("rollback", self.candidate, self.serving or 0, None, v.reason, v.evidence, now))
        elif self.newest > self.candidate and now - self.canary_ms >= self.rule.replace_after_s * 1000:
            out.append(self._make("canary", self.newest, self.serving or 0, self.newest,
                                  f"v{self.newest} replaces v{self.candidate} on canary: no decision in "
                                  f"{self.rule.replace_after_s:g} s ({v.reason})", v.evidence, now))
        elif tested:  # an inconclusive look is on the record too
            out.append(self._make("hold", self.candidate, self.serving or 0, self.candidate, v.reason, v.evidence, now))
        elif self.looks == 0 and now - self.canary_ms >= self.rule.hold_every_s * 1000:
            # no look yet this long (little or no traffic): said once, with what there is
            out.append(self._make("hold", self.candidate, self.serving or 0, self.candidate, v.reason, v.evidence, now))
        return [d for d in out if self._apply(d)]

    def _make(self, decision: str, version: int, serving: int, candidate: int | None, reason: str,
              evidence: dict[str, float], now: int) -> GateDecision:
        look = int(evidence.get("look", 0))
        return GateDecision(decision_id=decision_id(self.model, version, decision, look), model=self.model,
                            decision=decision, version=version, serving=serving, candidate=candidate,
                            canary_share=self.rule.canary_share if candidate is not None else 0.0, gate=self.gate,
                            reason=reason, test=TEST if evidence else "", evidence=dict(evidence), created_at=now)

    def _apply(self, d: GateDecision) -> bool:
        if d.decision_id in self.decided:
            return False
        self.adopt(d)
        return True
