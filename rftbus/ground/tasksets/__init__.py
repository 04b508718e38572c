"""Built-in toy tasksets with verifiable, partial-credit rewards and held-out eval splits.

They let the whole loop learn on a laptop CPU with the tiny model; `get_taskset(name)` finds one.
"""

from rftbus.ground.tasksets.base import BuiltinTaskset, get_taskset, stable_task_id, taskset_names

__all__ = ["BuiltinTaskset", "get_taskset", "stable_task_id", "taskset_names"]
