"""Bisecting a set of units to the ones that make a probe fail: the trainer's non-finite loss (rftbus/trainer/bisect.py)
and the analytics sink's refused insert (a row ClickHouse will not take must not stop the rest of its batch).

About 2·k·log2(n) probes for k culprits among n units; past `max_probes` the parts still in doubt are the
culprits. When every half passes but the whole does not (the cause is the combination) nothing is isolated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

DEFAULT_MAX_PROBES = 32


@dataclass
class Found:
    culprits: list  # the units to reject (empty: this part's loss is finite on its own)
    probes: int
    isolated: bool  # False: the loss is non-finite only for the combination, no unit is to blame


def culprits(units: Sequence[T], finite: Callable[[Sequence[T]], bool], max_probes: int = DEFAULT_MAX_PROBES) -> Found:
    """Bisect `units` (which together failed) with the probe `finite` (True: this part passes)."""
    probes = 1
    if not units or finite(units):  # this rank's part alone is fine (another rank's was not)
        return Found([], probes, True)
    out: list[T] = []
    todo: list[Sequence[T]] = [units]  # parts known to be non-finite
    while todo:
        part = todo.pop()
        if len(part) == 1 or probes + 2 > max_probes:
            out.extend(part)
            continue
        mid = len(part) // 2
        bad = []
        for half in (part[:mid], part[mid:]):
            probes += 1
            if not finite(half):
                bad.append(half)
        if not bad:  # each half is fine, together they are not
            if part is units:
                return Found([], probes, False)
            out.extend(part)
        todo.extend(bad)
    return Found(out, probes, True)
