"""The staleness bound: an experience from version v may train the step that publishes s+1 only if
s - v ≤ η (s = latest published version). Whatever is over it goes to rejected, reason `stale`."""

from __future__ import annotations

from rftbus.consumers.batch_consumer import Polled


def staleness(latest: int, version: int) -> int:
    return latest - version


def split_stale(records: list[Polled], latest: int, eta: int, check_expert: bool) -> tuple[list[Polled], list[Polled]]:
    """(fresh, stale). The expert lane is exempt unless asked: demonstrations have no behaviour policy."""
    fresh, stale = [], []
    for r in records:
        exempt = r.lane == "expert" and not check_expert
        (stale if not exempt and staleness(latest, r.exp.model_version) > eta else fresh).append(r)
    return fresh, stale
