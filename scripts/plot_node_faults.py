"""Plot the trainer's stall per node fault of a `rftbus chaos --nodes 3` result (docs/RELIABILITY.md, #37).

usage: python scripts/plot_node_faults.py RESULT.json OUT.png   (RESULT: <state_dir>/chaos/chaos.json or a
trimmed copy with `node_faults`)
       python scripts/plot_node_faults.py --runs OUT.png RESULT.json ...   (per run: its longest kill and its
longest freeze, with the 1.5x bound)
"""

from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from rftbus.ground.figures import save_png

KINDS = {"leader_kill": ("kill -9", "tab:red"), "coordinator_freeze": ("SIGSTOP coordinator", "tab:blue"),
         "leader_freeze": ("SIGSTOP weights leader", "tab:purple"), "rolling_restart": ("rolling restart", "tab:gray")}


def main(src: str, out: str) -> None:
    d = json.load(open(src))
    faults = _faults(d)
    fig, ax = plt.subplots(figsize=(7, 3.2), dpi=90)
    seen = set()
    for i, f in enumerate(faults):
        label, color = KINDS[f["kind"]]
        ax.bar(i, f["metrics"]["stall_s"], color=color, label=None if label in seen else label)
        seen.add(label)
    ax.set_xticks(range(len(faults)), [f"{f['at_s'] / 60:.1f}" for f in faults])
    ax.set_xlabel("minute of the chaos run")
    ax.set_ylabel("longest gap between trainer steps (s)")
    ax.set_title(d.get("closing_line", ""), fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(fig, out)


def _faults(d: dict) -> list[dict]:
    return d.get("node_faults") or [f for f in d["faults"] if f["kind"] in KINDS]


def runs(out: str, srcs: list[str]) -> None:
    """Each run's longest kill -9 and longest freeze side by side, the ratio above them."""
    fig, ax = plt.subplots(figsize=(7, 3.2), dpi=90)
    for i, src in enumerate(srcs):
        faults = _faults(json.load(open(src)))
        kill = max((f["metrics"]["stall_s"] for f in faults if f["kind"] == "leader_kill"), default=0.0)
        freeze = max((f["metrics"]["stall_s"] for f in faults if f["kind"].endswith("_freeze")), default=0.0)
        ax.bar(i - 0.2, kill, 0.4, color="tab:red", label="longest kill -9" if i == 0 else None)
        ax.bar(i + 0.2, freeze, 0.4, color="tab:blue", label="longest SIGSTOP, 30 s" if i == 0 else None)
        ax.plot([i + 0.02, i + 0.38], [1.5 * kill] * 2, color="black", lw=1, label="1.5x the kill" if i == 0 else None)
        ax.text(i, max(kill * 1.5, freeze) * 1.15, f"{freeze / kill:.2f}" if kill else "-", ha="center", fontsize=8)
    names = [src.rsplit("nodes3-", 1)[-1].split("-", 1)[0].upper() for src in srcs]
    ax.set_xticks(range(len(srcs)), names)
    ax.set_xlabel("run (docs/runs/46-chaos-ci-nodes3-*.json); above: freeze / kill")
    ax.set_ylabel("longest gap between trainer steps (s)")
    ax.set_yscale("log")  # kills took 1-51 s over the runs
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    save_png(fig, out)


if __name__ == "__main__":
    if sys.argv[1] == "--runs":
        runs(sys.argv[2], sys.argv[3:])
    else:
        main(*sys.argv[1:3])
