"""What a tracker is given: the run's metadata once, then points; one file per tracker implements it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

# TrainerMetric kinds a tracker gets, and the prefix their values are logged under. Left out: "trained" (lineage:
# one value per experience id) and "task_pass_rate" (one per task): analytics holds those.
KINDS = {"metric": "train", "eval": "eval", "streams": "streams"}


@dataclass(frozen=True, slots=True)
class Point:
    """One record's values: `step` is the trainer's step (for eval and streams: the newest step seen so far, so a
    tracker's x axis is the same for every curve), `version` the weight version, `at` its time (epoch s)."""

    prefix: str
    step: int
    version: int
    values: dict[str, float]
    at: float

    def named(self) -> dict[str, float]:
        return {f"{self.prefix}/{k}": v for k, v in self.values.items()}


class Tracker(Protocol):
    name: str

    def start(self, run_name: str, params: dict[str, Any]) -> None:
        """Open the run and record its metadata (the config, flattened)."""

    def log(self, point: Point) -> None: ...

    def close(self) -> None: ...


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config as dotted keys with scalar values (lists as text): what trackers take as parameters."""
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    key = prefix[:-1]
    if isinstance(data, (str, int, float, bool)) or data is None:
        return {key: data}
    return {key: str(data)}
