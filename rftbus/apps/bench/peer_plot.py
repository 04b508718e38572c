"""The plot of `rftbus bench peer`: held-out eval against wall time, rftbus and TRL, every round."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never a display
import matplotlib.pyplot as plt  # noqa: E402
from rftbus.ground.figures import save_png

COLORS = {"rftbus": "tab:blue", "trl": "tab:orange", "rftbus-fixed": "tab:blue", "trl-fixed": "tab:orange"}
NAMES = {"rftbus": "rftbus run", "trl": "TRL GRPOTrainer, rftbus's batch", "rftbus-fixed": "rftbus run, B·n a step",
         "trl-fixed": "TRL GRPOTrainer, B·n a step"}


def plot_peer(result: dict[str, Any], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7.0, 4.2), dpi=110)
    seen = set()
    for rnd in result["rounds"]:
        for side, res in rnd.items():
            xs = [p[0] for p in res["curve"]]
            ys = [p[1] for p in res["curve"]]
            ax.step(xs, ys, where="post", color=COLORS.get(side), alpha=0.8, linewidth=1.4,
                    linestyle="--" if side.endswith("-fixed") else "-",
                    label=NAMES.get(side, side) if side not in seen else None)
            seen.add(side)
    target = result["base_eval"] + result["lift"]
    ax.axhline(target, color="grey", linestyle="--", linewidth=1, label=f"base + {result['lift']:.2f}")
    ax.set_xlabel("wall time since the command started (s)")
    ax.set_ylabel("held-out eval reward")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{Path(result.get('config') or 'config').name}: rftbus vs TRL at {result.get('batch', 'the configured')} "
                 f"batch, {len(result['rounds'])} round(s), {result['cores']} cores", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_png(fig, path)
    plt.close(fig)
    return path
