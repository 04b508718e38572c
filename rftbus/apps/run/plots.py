"""PNG plots of a run: held-out eval reward against wall time and against weight version, trainer steps,
and the live reward of served answers per minute."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never a display
import matplotlib.pyplot as plt  # noqa: E402
from rftbus.ground.figures import save_png


def plot_eval(points: list[dict], out_dir: Path, title: str = "held-out eval reward") -> list[Path]:
    """`points`: dicts with `seconds`, `version`, `reward`. Writes eval_vs_time.png and eval_vs_version.png."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if not points:
        return []
    pts = sorted(points, key=lambda p: p["seconds"])
    written = []
    for x_key, x_label, name in (("seconds", "wall time (s)", "eval_vs_time.png"),
                                 ("version", "weight version", "eval_vs_version.png")):
        fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
        xs = [p[x_key] for p in pts]
        ys = [p["reward"] for p in pts]
        ax.plot(xs, ys, marker="o", linewidth=1.5)
        ax.set_xlabel(x_label)
        ax.set_ylabel("mean eval reward")
        scale_y(ax, ys)
        written.append(_save(fig, ax, title, out_dir / name))
    return written


def plot_steps(timeline: list[list[float]], out_dir: Path, title: str = "trainer steps") -> list[Path]:
    """`timeline`: [seconds since start, step] pairs. Writes steps_vs_time.png (a flat stretch is starvation)."""
    if len(timeline) < 2:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    ax.plot([t for t, _ in timeline], [s for _, s in timeline], linewidth=1.5)
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("trainer step")
    return [_save(fig, ax, title, out_dir / "steps_vs_time.png")]


def plot_live(curve: list[dict], out_dir: Path, title: str) -> list[Path]:
    """live_reward.png: the served answers' mean score per minute (rftbus.apps.simulate.live_reward.per_minute)
    and the exact-match share; the minute a run stopped in is partial and left out."""
    curve = [b for b in curve if b.get("whole", True)] or curve
    if not curve:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    xs = [b["minute"] for b in curve]
    ax.plot(xs, [b["reward"] for b in curve], marker="o", linewidth=1.5, label="live reward (taskset score)")
    ax.plot(xs, [b["exact"] for b in curve], marker=".", linewidth=1, alpha=0.7, label="exact answers")
    ax.set_xlabel("minute of the run")
    ax.set_ylabel("mean over the answers served that minute")
    scale_y(ax, [b["reward"] for b in curve] + [b["exact"] for b in curve])
    ax.legend(loc="upper left")
    return [_save(fig, ax, title, out_dir / "live_reward.png")]


def plot_gate(curve: list[dict], evals: list[dict], timeline: list[dict], started: float, out_dir: Path,
              title: str, candidate_evals: list[dict] | None = None) -> list[Path]:
    """gate.png: what users were served (live reward per minute) beside the held-out eval of the newest version,
    with each promote (green) and rollback (red) of the promotion gate where it happened."""
    curve = [b for b in curve if b.get("whole", True)] or curve
    if not curve:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7.2, 4.2), dpi=110)
    ax.plot([b["minute"] for b in curve], [b["reward"] for b in curve], marker="o", linewidth=1.5,
            label="live reward of the answers served")
    if evals:
        ax.plot([e["seconds"] / 60 for e in evals], [e["reward"] for e in evals], marker=".", linewidth=1,
                alpha=0.8, label="held-out eval of the newest version")
    by: dict[str, list[dict]] = {}
    for p in candidate_evals or []:
        by.setdefault(p.get("lineage", ""), []).append(p)
    for lineage, points in sorted(by.items()):  # each candidate's eval when it went on canary
        ax.scatter([p["seconds"] / 60 for p in points], [p["reward"] for p in points], marker="x", s=30,
                   label=f"eval of a candidate{' of ' + lineage if lineage else ''} ({len(points)})")
    lineages = sorted({d.get("lineage", "") for d in timeline})
    for kind, color in (("promote", "tab:green"), ("rollback", "tab:red")):
        for lineage in lineages:  # another trainer's versions (run.trainers) dashed
            xs = [(d["t"] - started) / 60 for d in timeline if d["decision"] == kind and d.get("lineage", "") == lineage]
            whose = f" {lineage}" if lineage else (" (first trainer)" if len(lineages) > 1 else "")
            for i, x in enumerate(xs):
                ax.axvline(x, color=color, alpha=0.35, linewidth=1, linestyle="--" if lineage else "-",
                           label=f"{kind}{whose} ({len(xs)})" if i == 0 else None)
    ax.set_xlabel("minute of the run")
    ax.set_ylabel("mean reward")
    scale_y(ax, [b["reward"] for b in curve] + [e["reward"] for e in evals] + [p["reward"] for p in candidate_evals or []])
    ax.legend(loc="upper left", fontsize=8)
    return [_save(fig, ax, title, out_dir / "gate.png")]


def scale_y(ax, ys: list[float]) -> None:
    """The y axis over [0, 1] where the rewards lie in it (runs compare at a glance), else over the data: a
    reward of your own may run from -1 or up to 3, and a fixed [0, 1] cut it off."""
    lo, hi = min([0.0, *ys]), max([1.0, *ys])
    pad = 0.02 * (hi - lo)
    ax.set_ylim(lo - pad, hi + pad)


def _save(fig, ax, title: str, path: Path) -> Path:
    ax.grid(alpha=0.3)
    ax.set_title(title)
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)
    return path
