"""Workflows: single-turn, multi-turn agent-environment episodes, or user classes by dotted path."""

from __future__ import annotations

from typing import Any

from rftbus.producers.workflows.base import RolloutContext, Sample, Workflow

__all__ = ["RolloutContext", "Sample", "Workflow", "load_workflow"]

_cache: dict[str, Workflow] = {}


def load_workflow(kind: str) -> Workflow:
    """single_turn | multi_turn | an entry point in `rftbus.workflows` | a dotted path to a class."""
    if kind not in _cache:
        cls: Any
        if kind == "single_turn":
            from rftbus.producers.workflows.single_turn import SingleTurn
            cls = SingleTurn
        elif kind == "multi_turn":
            from rftbus.producers.workflows.multi_turn import MultiTurn
            cls = MultiTurn
        else:
            from rftbus.producers.plugins import load_object
            cls = load_object(kind, group="rftbus.workflows", what="workflow")
        wf = cls() if isinstance(cls, type) else cls
        if not hasattr(wf, "run"):
            raise TypeError(f"workflow {kind!r} has no run(task, n, ctx) method")
        _cache[kind] = wf
    return _cache[kind]
