"""`rftbus bench stale-rollouts`: explorer rollouts that arrive past η, rejected (as before) or trained corrected.

Two arms back to back, each a whole `rftbus run` of the explorer config (default configs/real-times.yaml: the real
chat model with LoRA on the times tables) with its own state folder and broker, the same η and admission:

- rejected: rl.max_rollout_staleness unset, a rollout past η is rejected `stale`;
- corrected: rl.max_rollout_staleness = --bound, a rollout up to that many versions behind trains, its rows past η
  under M2PO's second-moment mask (rftbus/trainer/losses/m2.py), as late grades do.

Per arm: the held-out gain (eval at the end minus at the start), the stale share of the produced experiences,
how many rows trained past η, and the explorers' groups in quartiles of their generation time with the share of each
that trained and that went stale (rftbus/apps/run/durations.py): whether slow tasks are starved. Writes
stale-rollouts.json and a PNG of eval against time.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from rftbus.apps.bench.arms import books_reconcile, round_robin, save
from rftbus.apps.bench.context import state
from rftbus.ground.config import Config, plain_data
from rftbus.ground.errors import RftbusError

ARMS = ("rejected", "corrected")


def arm_config(base: Config, arm: str, root: Path, minutes: float, bound: int) -> Config:
    data = plain_data(base)
    data["state_dir"] = str(root / arm)
    data["rl"]["max_rollout_staleness"] = bound if arm == "corrected" else None
    data["run"]["max_minutes"] = minutes
    data["run"]["target_eval_reward"] = None  # the same length for both arms
    return Config.model_validate(data)


def arm_figures(s: dict) -> dict:
    start, end = s.get("eval_reward_initial"), s.get("eval_reward_final")
    produced = s.get("experiences_produced") or 0
    stale = (s.get("experiences_rejected") or {}).get("stale", 0)
    return {
        "gain": None if start is None or end is None else round(end - start, 4), "eval_start": start, "eval_end": end,
        "eval_points": [{"seconds": p["seconds"], "version": p["version"], "reward": p["reward"]}
                        for p in s.get("eval_points") or []],
        "produced": produced, "trained": s.get("experiences_trained"),
        "stale_share_of_produced": round(stale / produced, 4) if produced else None,
        "trained_past_eta": s.get("trained_past_eta"), "trained_past_eta_p50": s.get("trained_past_eta_p50"),
        "by_generation_time": s.get("rollouts_by_generation_time") or [],
        "versions": s.get("versions_published"), "lost": s.get("experiences_lost"), "duplicated": s.get("duplicated"),
        "reconciles": s.get("counts_reconcile"), "wall_s": s.get("wall_seconds"),
    }


def bench_stale_rollouts(
    ctx: typer.Context,
    minutes: float = typer.Option(8.0, "--minutes", min=1.0, help="each arm's run.max_minutes"),
    bound: int = typer.Option(8, "--bound", min=1, help="the corrected arm's rl.max_rollout_staleness"),
    arms: str = typer.Option(",".join(ARMS), "--arms", help="which arms, in order (comma-separated)"),
    out: Path = typer.Option(Path("stale-rollouts"), "--out", help="folder for stale-rollouts.json and its PNG"),
    as_json: bool = typer.Option(False, "--json", help="print the JSON object only"),
) -> None:
    """Rollouts past η: rejected stale against trained corrected; gain, stale share, slow tasks' share trained.
    Run with an explorer config, e.g. `--config configs/real-times.yaml`."""
    st = state(ctx)
    base = st.config()
    chosen = [a.strip() for a in arms.split(",") if a.strip()]
    if not chosen or set(chosen) - set(ARMS):
        raise RftbusError(f"--arms takes {', '.join(ARMS)}; got {arms!r}")
    if base.run.explorers < 1:
        raise RftbusError("stale-rollouts needs explorers (run.explorers >= 1), e.g. configs/real-times.yaml")
    if bound <= base.rl.max_staleness:
        raise RftbusError(f"--bound {bound} must be past η = {base.rl.max_staleness}")
    say = (lambda _m: None) if as_json else st.err.print
    root = base.state_dir / "bench-stale-rollouts"
    runs = round_robin(chosen, 1, root, lambda arm, where: arm_config(base, arm, where, minutes, bound), arm_figures,
                       minutes, say)
    results = {arm: rs[0] for arm, rs in runs.items()}
    doc = {"arms": results, "minutes_per_arm": minutes, "eta": base.rl.max_staleness, "bound": bound,
           "model": base.model.name, "taskset": base.taskset.name, "eval_n": base.run.eval_n,
           "books_reconcile": books_reconcile(results)}
    saved = save(doc, results, out, "stale-rollouts", f"{base.model.name} on {base.taskset.name}: rollouts past "
                 f"η = {base.rl.max_staleness} rejected or trained corrected (up to {bound})")
    if as_json:
        print(json.dumps(doc))
        return
    c = st.console
    for arm, a in results.items():
        shares = ", ".join(f"Q{q['quartile']} {q['trained_share']}/{q['stale_share']}" for q in a["by_generation_time"])
        c.print(f"{arm:9s} eval {a['eval_start']} -> {a['eval_end']} (gain {a['gain']}), stale share "
                f"{a['stale_share_of_produced']}, trained past η {a['trained_past_eta']}, lost {a['lost']}, "
                f"duplicated {a['duplicated']}; by generation time (trained/stale share): {shares}")
    c.print(f"wrote {saved[0]} and {saved[1]}")
