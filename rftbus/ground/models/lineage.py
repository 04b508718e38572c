"""Weight lineages: the versions one trainer makes (several trainers may train on the same stream, each its own
consumer group, and the promotion gate chooses among their versions).

The run's first trainer has the empty lineage: its weights are keyed by the model name alone, as they always were.
Another trainer (`trainer.lineage`, e.g. `lr-high`) publishes under `<model>@<lineage>` on the weights topic and in
the store, so its version numbers never collide with the first one's; the gate's decisions name the lineage beside
the version (`GateDecision.lineage`), and serve names the adapter `<lineage>:v<N>`.
"""

from __future__ import annotations

import re

PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}$"  # it becomes a path, a consumer group and an adapter name
_SEP = "@"


def check_lineage(name: str) -> str:
    if name and not re.match(PATTERN, name):
        raise ValueError(f"lineage {name!r}: lower-case letters, digits, '-' and '_' (at most 32), or empty for "
                         f"the first trainer")
    return name


def weights_key(model: str, lineage: str) -> str:
    """The WeightVersion key (and store folder) of `lineage`'s versions of `model`."""
    return f"{model}{_SEP}{lineage}" if lineage else model


def lineage_of(key: str, model: str) -> str | None:
    """The lineage a weights key belongs to, or None when it is not `model`'s."""
    if key == model:
        return ""
    if key.startswith(model + _SEP):
        return key[len(model) + 1:]
    return None


def label(lineage: str, version: int) -> str:
    """How a version is named to people and to the serving engine: `v12`, or `lr-high:v12`."""
    return f"{lineage}:v{version}" if lineage else f"v{version}"


def trainer_stage(lineage: str) -> str:
    """The stage a lineage's trainer names on its rejections: `trainer`, or `trainer@<lineage>` (another trainer's
    books: the run's reconciliation of the first trainer leaves them out)."""
    return f"trainer{_SEP}{lineage}" if lineage else "trainer"


def is_further_trainer_stage(stage: str) -> bool:
    return stage.startswith(f"trainer{_SEP}")
