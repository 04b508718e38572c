"""The outcome of one chaos run: faults, poison, load, drain, tally, and the one closing line."""

from __future__ import annotations

from dataclasses import dataclass, field

from rftbus.apps.chaos.drain import DrainReport
from rftbus.apps.chaos.faults import Fault
from rftbus.apps.chaos.load import LoadReport
from rftbus.apps.chaos.plan import ChaosPlan
from rftbus.apps.chaos.poison import Poison
from rftbus.apps.chaos.reconcile import Tally


@dataclass
class ChaosResult:
    plan: ChaosPlan
    faults: list[Fault] = field(default_factory=list)
    poisons: list[Poison] = field(default_factory=list)
    load: list[LoadReport] = field(default_factory=list)
    drain: DrainReport | None = None
    tally: Tally | None = None
    run_exit: int | None = None
    run_summary: dict = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    failover: dict = field(default_factory=dict)  # (nodes 3) the longest stall after a freeze vs a kill
    failures: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def injected(self) -> int:
        return len(self.faults)

    @property
    def lost(self) -> int:
        return self.tally.lost_total if self.tally else 0

    @property
    def duplicated(self) -> int:
        return self.tally.duplicated_total if self.tally else 0

    @property
    def passed(self) -> bool:
        return self.tally is not None and self.lost == 0 and self.duplicated == 0 and not self.failures

    def closing_line(self) -> str:
        return f"chaos: {self.injected} faults injected, {self.lost} lost, {self.duplicated} duplicated"

    def to_json(self) -> dict:
        return {"plan": self.plan.to_json(), "faults": [f.to_json() for f in self.faults],
                "poison": [p.to_json() for p in self.poisons], "load": [r.to_json() for r in self.load],
                "drain": self.drain.to_json() if self.drain else None,
                "tally": self.tally.to_json() if self.tally else None, "run_exit": self.run_exit,
                "run_summary": self.run_summary, "skipped": self.skipped, "failover": self.failover, "failures": self.failures,
                "wall_s": round(self.wall_s, 1), "injected": self.injected, "lost": self.lost,
                "duplicated": self.duplicated, "passed": self.passed, "closing_line": self.closing_line()}
