"""One arm of a benchmark that compares whole runs: `rftbus run` on a config of its own (its own state folder, and so
its own embedded broker), with progress every 30 s, and the run's own summary as the result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rftbus.ground.config import Config, write_config
from rftbus.ground.errors import RftbusError
from rftbus.ground.status import read_statuses, trainer_step
from rftbus.ground.figures import save_png


def _child_env() -> dict[str, str]:
    """The written config is complete; RFTBUS_* variables would override it (env beats YAML)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("RFTBUS_")}


def run_arm(cfg: Config, arm: str, say: Callable[[str], None]) -> dict:
    """One whole run; its summary (the run's own JSON)."""
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    path = write_config(cfg, cfg.state_dir / "bench.yaml")
    summary = cfg.state_dir / "summary.json"
    summary.unlink(missing_ok=True)
    t0 = time.monotonic()
    with (cfg.state_dir / "bench-run.log").open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "rftbus", "--config", str(path), "run", "--summary-json",
                                 str(summary)], stdout=log, stderr=subprocess.STDOUT, env=_child_env())
        try:
            last = 0.0
            while proc.poll() is None:
                if time.monotonic() - last >= 30:
                    last = time.monotonic()
                    say(f"  {arm}: {last - t0:5.0f} s, trainer step {trainer_step(read_statuses(cfg.state_dir))}")
                time.sleep(2.0)
        except KeyboardInterrupt:
            proc.terminate()
            proc.wait(180)
            raise
    if proc.returncode != 0 or not summary.exists():
        raise RftbusError(f"arm {arm}: `rftbus run` exited {proc.returncode}; see {cfg.state_dir / 'bench-run.log'}")
    return json.loads(summary.read_text())


def round_robin(arms: list[str], repeats: int, root: Path, config_of: Callable[[str, Path], Config],
                figures: Callable[[dict], dict], minutes: float, say: Callable[[str], None]) -> dict[str, list[dict]]:
    """Every arm `repeats` times, round-robin (a, b, a, b, ...: the machine's drift falls on every arm alike), each a
    whole run (`run_arm`) under `root` (`root/run-<r>` with repeats); each run's summary through `figures`, by arm.
    `config_of(arm, folder)`: the arm's config, its state folder under `folder`."""
    runs: dict[str, list[dict]] = {a: [] for a in arms}
    for r in range(repeats):
        for arm in arms:
            name = arm if repeats == 1 else f"{arm}-{r + 1}"
            cfg = config_of(arm, root if repeats == 1 else root / f"run-{r + 1}")
            say(f"arm {name}: {minutes:g} min (state {cfg.state_dir})")
            runs[arm].append(figures(run_arm(cfg, name, say)))
    return runs


def plot_evals(arms: dict[str, dict], path: Path, title: str) -> None:
    """Held-out eval against minutes, one line per arm (`arm_figures`' eval_points and gain); an arm pooled over
    repeats (its "runs") draws one line per run in the arm's colour, labelled once with the mean gain."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (arm, a) in enumerate(arms.items()):
        label = f"{arm} (gain {a['gain']:+.3f})" if a["gain"] is not None else arm
        runs = a.get("runs") or [a]
        if len(runs) > 1:
            label = f"{arm} (mean gain {a['gain']:+.3f}, {len(runs)} runs)" if a["gain"] is not None else arm
        for j, r in enumerate(runs):
            pts = r["eval_points"]
            ax.plot([p["seconds"] / 60 for p in pts], [p["reward"] for p in pts], marker="o", ms=3, color=f"C{i}",
                    alpha=1.0 if len(runs) == 1 else 0.6, label=label if j == 0 else None)
    ax.set_xlabel("minutes")
    ax.set_ylabel("held-out eval reward")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_png(fig, path, dpi=110)
    plt.close(fig)


def books_reconcile(arms: dict[str, dict]) -> bool:
    """Every arm's run reconciled: nothing lost, nothing trained twice (`arm_figures`' reconciles, lost, duplicated)."""
    return all(bool(a["reconciles"]) and not a["lost"] and not a["duplicated"] for a in arms.values())


def save(doc: dict, arms: dict[str, dict], out: Path, name: str, title: str) -> tuple[Path, Path]:
    """`out`/<name>.json (the document) and `out`/<name>.png (eval against time per arm)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    plot_evals(arms, out / f"{name}.png", title)
    return path, out / f"{name}.png"

