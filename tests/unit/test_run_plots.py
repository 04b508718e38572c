"""The run's plots (rftbus/apps/run/plots.py) are scaled to their data: rewards in [0, 1] on [0, 1], a reward of one's
own past it in full. No broker."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from rftbus.apps.run.plots import plot_eval, scale_y  # noqa: E402


def _ylim(ys):
    fig, ax = plt.subplots()
    scale_y(ax, ys)
    lo, hi = ax.get_ylim()
    plt.close(fig)
    return lo, hi


def test_rewards_in_the_unit_interval_keep_it_and_others_are_shown_whole():
    lo, hi = _ylim([0.1, 0.9])
    assert -0.05 < lo < 0 and 1 < hi < 1.05
    lo, hi = _ylim([-1.0, 0.5, 3.0])
    assert lo < -1.0 and hi > 3.0 and hi < 3.2


def test_plot_eval_writes_both_plots_for_a_reward_past_one(tmp_path):
    pts = [{"seconds": 10.0 * i, "version": i, "reward": 0.5 * i} for i in range(6)]  # up to 2.5
    written = plot_eval(pts, tmp_path)
    assert [p.name for p in written] == ["eval_vs_time.png", "eval_vs_version.png"]
    assert all(p.stat().st_size > 1000 for p in written)
