"""Plot a side-by-side benchmark of two trees (the JSON lines /tmp/bench_pair-style runs write):
each line {"tree": "new"|"old", "round": r, "result": {...}}. One panel per metric, one dot per run.

    python scripts/plot_bench_pair.py docs/bench/group-record-streams.jsonl docs/img/group-record-streams.png \\
        experiences_per_s worker_cpu_ms_per_experience p99_ms
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from rftbus.ground.figures import save_png


def main(src: str, out: str, *metrics: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line, strict=False) for line in Path(src).read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("result")]
    trees = ["old", "new"]
    fig, axes = plt.subplots(1, len(metrics), figsize=(4 * len(metrics), 3.2))
    for ax, m in zip(axes if len(metrics) > 1 else [axes], metrics):
        for x, tree in enumerate(trees):
            ys = [r["result"][m] for r in rows if r["tree"] == tree and m in r["result"]]
            ax.scatter([x] * len(ys), ys, label=tree)
            if ys:
                ax.hlines(sum(ys) / len(ys), x - 0.2, x + 0.2, colors="k")
        ax.set_xticks(range(len(trees)), ["before (per-experience records)", "after (group records)"], fontsize=7)
        ax.set_title(m, fontsize=9)
        ax.set_ylim(bottom=0)
    fig.suptitle(Path(src).stem + ": runs alternated on one broker (bars: mean)", fontsize=9)
    fig.tight_layout()
    save_png(fig, out, dpi=110)
    print(out)


if __name__ == "__main__":
    main(*sys.argv[1:])
