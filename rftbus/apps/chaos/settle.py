"""After a chaos run stopped: let the analytics sink catch up to the end of every topic, then read every log
back and reconcile it (by experience id and position) with the poison injected and ClickHouse's counts."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from rftbus.apps.chaos.reconcile import reconcile
from rftbus.apps.chaos.result import ChaosResult
from rftbus.ground.config import Config
from rftbus.apps.run.ledger import read_ledger


def available(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def analytics_catch_up(cfg: Config, res: ChaosResult, workdir: Path) -> bool:
    """True when ClickHouse can be compared (the sink is installed and read every topic to its end)."""
    if not (cfg.run.analytics and available("rftbus.consumers.analytics.sink")):
        res.skipped.append("clickhouse: rftbus.consumers.analytics.sink is not installed")
        return False
    out = subprocess.run([sys.executable, "-m", "rftbus", "--config", str(workdir / "chaos-config.yaml"),
                          "analytics", "sink", "--until-end"], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        res.failures.append(f"analytics sink --until-end exited {out.returncode}: {out.stderr.strip()[-500:]}")
    return True


def settle(cfg: Config, res: ChaosResult, workdir: Path, weights_poisoned_at: int | None,
           progress: Callable[[str], None]) -> None:
    progress("analytics sink catching up to the end of every topic ...")
    clickhouse = None
    if analytics_catch_up(cfg, res, workdir):
        from rftbus.consumers.analytics import counts

        clickhouse = counts(cfg)
    ledger = read_ledger(cfg, progress=lambda s: progress(f"reconciling: {s}"))
    res.tally = reconcile(ledger, res.poisons, clickhouse)
    if weights_poisoned_at is not None:
        # Followers must skip the weights poison and keep following: some experience made after it
        # must carry a newer version (the burst and the poison records themselves do not count).
        newest = max((r.model_version for r in ledger.raw.values()
                      if r.experience_ids and not r.explorer_id.startswith("chaos")), default=-1)
        res.tally.versions["newest_generated_after_weights_poison"] = newest
        if newest <= weights_poisoned_at:
            res.failures.append(f"no experience was generated with a version newer than v{weights_poisoned_at} "
                                "after the weights topic was poisoned: the followers stopped")
