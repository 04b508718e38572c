"""Plot the trainer's stall per node fault of a `rftbus chaos --nodes 3` result (docs/RELIABILITY.md, #37).

usage: python scripts/plot_node_faults.py RESULT.json OUT.png   (RESULT: <state_dir>/chaos/chaos.json or a
trimmed copy with `node_faults`)
"""

from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

KINDS = {"leader_kill": ("kill -9", "tab:red"), "coordinator_freeze": ("SIGSTOP coordinator", "tab:blue"),
         "leader_freeze": ("SIGSTOP weights leader", "tab:purple"), "rolling_restart": ("rolling restart", "tab:gray")}


def main(src: str, out: str) -> None:
    d = json.load(open(src))
    faults = d.get("node_faults") or [f for f in d["faults"] if f["kind"] in KINDS]
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
    fig.savefig(out)


if __name__ == "__main__":
    main(*sys.argv[1:3])
