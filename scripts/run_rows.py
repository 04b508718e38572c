"""One markdown table row per `rftbus run --summary-json` file: what docs/BENCHMARKS.md's run tables show.

    python scripts/run_rows.py docs/runs/19-reverse-T1.json ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def row(path: Path) -> str:
    s = json.loads(path.read_text())
    best = (s.get("eval_best") or {}).get("reward")
    final = s.get("eval_reward_final")
    ev = f"{final:.3f}" + (f" ({best:.3f})" if best is not None and best > final + 1e-9 else "")
    first, last = s.get("step_rate_first_third") or 0.0, s.get("step_rate_last_third") or 0.0
    ratio = f"{last / first:.2f} ({first:.2f} → {last:.2f})" if first else "–"
    at = (s.get("first_eval_at_s") or {}).get("0.2")
    cells = [path.stem, ev, s.get("stop_reason", ""), f"{100 * s['zero_variance_share_of_produced']:.1f} %",
             f"{100 * s['stale_share_of_curated']:.2f} %", ratio, f"{s['first_step_after_broker_s']:.2f} s",
             f"{s['broker_ready_s']:.1f} s", f"{at:.1f} s" if at is not None else "–",
             f"{s['experiences_lost']} lost, {s['duplicated']} dup, reconcile {s['counts_reconcile']}"]
    return "| " + " | ".join(str(c) for c in cells) + " |"


if __name__ == "__main__":
    print("| run | eval final (best) | stop | zero-variance share of produced | stale share of curated | "
          "steps/s last ÷ first third | first step after the broker | broker answered | first eval ≥ 0.2 | books |")
    print("|---" * 10 + "|")
    for p in sys.argv[1:]:
        print(row(Path(p)))
