"""A hostile user reward function for tests/integration/test_bad_input.py, loaded by dotted path like a user's own."""

from __future__ import annotations


def exploding_reward(task, response):
    """Raises on the task meant to show it; scores 0 elsewhere (it has weight 0 in the test anyway)."""
    if task.prompt == "reward_raises":
        raise RuntimeError("reward function exploded on purpose")
    return {"reward": 0.0}
