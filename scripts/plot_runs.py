"""Overlay the held-out eval of several `rftbus run`s in one PNG (eval reward vs wall time).

    python scripts/plot_runs.py --out docs/img/x.png --title T R8=.rftbus/r8 R9=.rftbus/r9 ...

Each RUN is LABEL=STATE_DIR (its run/eval.jsonl is read), LABEL=path/to/eval.jsonl or
LABEL=path/to/summary.json (its eval points; with --steps its trainer steps over time).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from rftbus.ground.figures import save_png


def read_points(where: Path) -> list[dict]:
    path = where / "run" / "eval.jsonl" if where.is_dir() else where
    if path.suffix == ".json":
        return json.loads(path.read_text())["eval_points"]
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_steps(where: Path) -> list[list[float]]:
    path = where / "run" / "summary.json" if where.is_dir() else where
    return json.loads(path.read_text())["steps_timeline"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="LABEL=STATE_DIR or LABEL=eval.jsonl")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--title", default="held-out eval reward")
    ap.add_argument("--target", type=float, help="draw a dashed line at this eval reward")
    ap.add_argument("--steps", action="store_true", help="plot the trainer's steps over time instead")
    a = ap.parse_args()
    fig, ax = plt.subplots(figsize=(7.0, 4.2), dpi=110)
    for spec in a.runs:
        label, _, where = spec.partition("=")
        if not where:
            raise SystemExit(f"{spec!r}: expected LABEL=STATE_DIR or LABEL=eval.jsonl")
        if a.steps:
            line = read_steps(Path(where))
            ax.plot([t for t, _ in line], [n for _, n in line], linewidth=1.4, label=f"{label} ({line[-1][1]} steps)")
            continue
        pts = sorted(read_points(Path(where)), key=lambda p: p["seconds"])
        ax.plot([p["seconds"] for p in pts], [p["reward"] for p in pts], marker=".", linewidth=1.4,
                label=f"{label} ({pts[-1]['reward']:.3f} at v{pts[-1]['version']})")
    if a.target is not None:
        ax.axhline(a.target, linestyle="--", color="grey", linewidth=1)
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("trainer step" if a.steps else "mean eval reward")
    ax.grid(alpha=0.3)
    ax.set_title(a.title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    save_png(fig, a.out)
    print(a.out)


if __name__ == "__main__":
    main()
