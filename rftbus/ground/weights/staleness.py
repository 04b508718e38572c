"""The staleness rule, in one place: an experience made with weights v may train the step that will
publish s+1 only if s - v <= η (s = the latest published version, η = rl.max_staleness). An answer whose
reward came back as feedback (live traffic, human grades) has a bound of its own, rl.max_feedback_staleness: a
grade can come hours after the answer, and training it late (corrected, rftbus/trainer/losses/m2.py) beats dropping it.
Explorer rollouts past η train the same way up to rl.max_rollout_staleness when it is set (else they are stale).

The streams apply it when they curate a group (with the version they have seen published), the trainer
when it takes a batch (with the version it is training), admission in the explorers by construction."""

from __future__ import annotations


def staleness(latest: int, version: int) -> int:
    """How many versions behind ``latest`` an experience made with ``version`` is."""
    return latest - version


GRADED_SOURCES = frozenset({"live", "human", "trace"})  # rewards from feedback (schemas.Source values)


def bound(rl, source: object) -> int:
    """The staleness bound of a group from `source` (a schemas.Source or its value) under RLConfig `rl`: what may
    train at all (rows past η train corrected). Demonstrations (expert) keep η: they have no behaviour policy."""
    name = getattr(source, "value", source)
    if name in GRADED_SOURCES:
        return max(rl.max_feedback_staleness, rl.max_staleness)
    if name == "explorer" and rl.max_rollout_staleness is not None:
        return max(rl.max_rollout_staleness, rl.max_staleness)
    return rl.max_staleness


def is_stale(version: int, latest: int, max_staleness: int) -> bool:
    return staleness(latest, version) > max_staleness


def stale_detail(version: int, latest: int, max_staleness: int) -> str:
    return f"model_version {version}, latest published {latest}, max_staleness {max_staleness}"
