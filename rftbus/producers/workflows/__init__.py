"""Workflows: single-turn, multi-turn agent-environment episodes, or user classes by dotted path."""

from __future__ import annotations

from typing import Any

from rftbus.producers.workflows.base import RolloutContext, Sample, Workflow

__all__ = ["RolloutContext", "Sample", "Workflow", "load_workflow", "task_may_run", "task_problem"]

BUILTIN = ("single_turn", "multi_turn")


def task_may_run(name: str, configured: str, trusted: list[str] | tuple[str, ...] = ()) -> bool:
    """Whether a *task* may name workflow `name`: a built-in, an installed `rftbus.workflows` entry point, the
    one the operator configured (explorer.workflow.kind) or one of the operator's `explorer.task_workflows`.
    Never any other dotted path: a task is data from the bus, and importing a module it names runs that
    module's code unsandboxed in the explorer (#36)."""
    if name in BUILTIN or name == configured or name in trusted:
        return True
    from importlib.metadata import entry_points

    return any(ep.name == name for ep in entry_points(group="rftbus.workflows"))

_cache: dict[str, Workflow] = {}


def task_problem(task: Any, ex: Any) -> tuple[str, str] | None:
    """(reason, detail) when a task asks for more work than the explorer config (`ex`) bounds, else None.
    Checked before anything tokenizes the task: a 10 MB prompt stalled the only explorer 21.7 s in the tokenizer
    before its length in tokens was known (#42)."""
    size = len(task.prompt) + sum(len(v) for m in (task.messages or []) for v in m.values())
    if size > ex.max_prompt_chars:
        return "prompt_too_long", (f"task {task.task_id[:80]} has {size} characters of prompt; "
                                   f"explorer.max_prompt_chars is {ex.max_prompt_chars}")
    if task.n_samples is not None and not 1 <= task.n_samples <= ex.max_n_samples:
        return "n_samples_out_of_bounds", (f"task {task.task_id[:80]} asks for n_samples {task.n_samples}; "
                                           f"explorer.max_n_samples allows 1..{ex.max_n_samples}")
    if task.workflow and not task_may_run(task.workflow, ex.workflow.kind, ex.task_workflows):
        return "unknown_workflow", (f"task {task.task_id[:80]} names workflow {task.workflow[:200]!r}: a task may "
                                    "name single_turn, multi_turn, an installed rftbus.workflows entry point, "
                                    f"explorer.workflow.kind ({ex.workflow.kind!r}) or one of "
                                    "explorer.task_workflows, never another module to import")
    return None


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
            from rftbus.ground.plugins import load_object
            cls = load_object(kind, group="rftbus.workflows", what="workflow")
        wf = cls() if isinstance(cls, type) else cls
        if not hasattr(wf, "run"):
            raise TypeError(f"workflow {kind!r} has no run(task, n, ctx) method")
        _cache[kind] = wf
    return _cache[kind]
