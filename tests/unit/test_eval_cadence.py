"""When the run's evaluator scores a version (`run.eval_every_versions`): logic only, the loop's own
evals are exercised by tests/system/test_run.py through the real trainer and weights topic."""

from rftbus.apps.run.evaluator import due


def test_a_mark_passed_between_two_looks_is_scored_at_the_next_version():
    # the evaluator looks every 0.5 s and jumps to the newest version published
    looks = [3, 7, 9, 11, 12, 18, 21, 29, 30, 44, 70]
    scored = [0]
    for newest in looks:
        if due(scored[-1], newest, 10):
            scored.append(newest)
    assert scored == [0, 11, 21, 30, 44, 70]  # v10, v20, ... each passed once; none skipped, none twice
    assert not due(30, 39, 10) and due(30, 40, 10) and due(1, 1, 1) is False and due(1, 2, 1)
