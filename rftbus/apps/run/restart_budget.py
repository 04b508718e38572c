"""How many restarts a supervised process gets: N within a sliding window of T seconds, as systemd's
StartLimitBurst / StartLimitIntervalSec (#37).

A budget for the whole run made a long run give up on a stage (or on the broker) after its fourth death,
however far apart the deaths were and however well each restart went. What a budget should catch is a
crash loop: a process that dies again as soon as it is started. Deaths minutes apart refill the budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RestartBudget:
    burst: int  # restarts allowed within the window
    window_s: float
    times: list[float] = field(default_factory=list)  # monotonic times of the restarts still in the window

    def recent(self, now: float) -> int:
        """Restarts within the window ending now."""
        self.times = [t for t in self.times if now - t < self.window_s]
        return len(self.times)

    def allows(self, now: float) -> bool:
        return self.recent(now) < self.burst

    def spend(self, now: float) -> None:
        self.times.append(now)

    def refills_at(self, now: float) -> float:
        """When the next restart is allowed again (now, if it is)."""
        if self.allows(now):
            return now
        return self.times[-self.burst] + self.window_s if self.burst else float("inf")

    def describe(self) -> str:
        return f"{self.burst} restarts within {self.window_s / 60:g} min"
