"""`rftbus bench synthesis`: do tasks the synthesize stage writes make learning faster on a small seed taskset?

Two arms of the same config, run back to back (round-robin with `--repeats`), each a whole `rftbus run` with its own
state folder and embedded broker, for the same wall time: `without` (synthesis off: the explorers draw the seed
tasks pass after pass) and `with` (the synthesize stage on, as the config sets it). Each arm's gain is its held-out
eval at the end minus at the start, on the taskset's own eval split (never a synthesized task: the stage refuses
any held-out problem). Writes synthesis.json (`with_gain`, `without_gain`, every run's figures and the stage's
counts) and a PNG of eval against time. Run it with `--config configs/synthesis-reverse.yaml`.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import typer

from rftbus.apps.bench.arms import books_reconcile, round_robin, save
from rftbus.apps.bench.context import state
from rftbus.apps.bench.late_feedback import eval_mean_over_time
from rftbus.ground.config import Config, plain_data
from rftbus.ground.errors import RftbusError

ARMS = ("without", "with")


def arm_config(base: Config, arm: str, root: Path, minutes: float) -> Config:
    data = plain_data(base)
    data["state_dir"] = str(root / arm)
    data["synthesis"]["enabled"] = arm == "with"
    data["run"]["max_minutes"] = minutes
    data["run"]["target_eval_reward"] = None  # both arms run the whole time
    return Config.model_validate(data)


def arm_figures(s: dict) -> dict:
    points = s.get("eval_points") or []
    start, end = s.get("eval_reward_initial"), s.get("eval_reward_final")
    syn = s.get("synthesis") or {}
    return {
        "gain": None if start is None or end is None else round(end - start, 4),
        "eval_start": start, "eval_end": end, "eval_mean_over_time": eval_mean_over_time(points),
        "eval_points": [{"seconds": p["seconds"], "version": p["version"], "reward": p["reward"]} for p in points],
        "versions": s.get("versions_published"), "trainer_steps": s.get("trainer_steps"),
        "trained": s.get("experiences_trained"), "expert_trained": s.get("expert_experiences_trained"),
        "synthesis": syn, "lost": s.get("experiences_lost"), "duplicated": s.get("duplicated"),
        "reconciles": s.get("counts_reconcile"), "wall_s": s.get("wall_seconds"),
    }


def pooled(runs: list[dict]) -> dict:
    gains = [r["gain"] for r in runs]
    ok = all(g is not None for g in gains)
    return {"gain": round(statistics.fmean(gains), 4) if ok else None, "gains": gains,
            "eval_mean_over_time": (round(statistics.fmean(r["eval_mean_over_time"] for r in runs), 4)
                                    if all(r["eval_mean_over_time"] is not None for r in runs) else None),
            "reconciles": all(bool(r["reconciles"]) for r in runs), "lost": sum(r["lost"] or 0 for r in runs),
            "duplicated": sum(r["duplicated"] or 0 for r in runs), "runs": runs}


def bench_synthesis(
    ctx: typer.Context,
    minutes: float = typer.Option(6.0, "--minutes", min=1.0, help="each arm's run.max_minutes"),
    repeats: int = typer.Option(1, "--repeats", min=1, help="runs per arm, round-robin; an arm's gain is their mean"),
    out: Path = typer.Option(Path("synthesis"), "--out", help="folder for synthesis.json and its PNG"),
    as_json: bool = typer.Option(False, "--json", help="print the JSON object only"),
) -> None:
    """Held-out gain on a small seed taskset with the synthesize stage and without it, same wall time."""
    st = state(ctx)
    base = st.config()
    if base.synthesis.synthesizer.name == "taskset" and base.taskset.path is not None:
        raise RftbusError("the built-in taskset synthesizer writes variants of a built-in taskset; this config reads "
                          "data: set synthesis.synthesizer")
    say = (lambda _m: None) if as_json else st.err.print
    root = base.state_dir / "bench-synthesis"
    runs = round_robin(list(ARMS), repeats, root, lambda arm, where: arm_config(base, arm, where, minutes),
                       arm_figures, minutes, say)
    results = {a: rs[0] if repeats == 1 else pooled(rs) for a, rs in runs.items()}
    doc = {"with_gain": results["with"]["gain"], "without_gain": results["without"]["gain"],
           "books_reconcile": books_reconcile(results), "arms": results, "minutes_per_arm": minutes,
           "repeats": repeats, "model": base.model.name, "taskset": base.taskset.name, "seed_tasks": base.run.tasks,
           "eval_n": base.run.eval_n, "synthesizer": base.synthesis.synthesizer.name}
    saved = save(doc, results, out, "synthesis", f"{base.model.name} on {base.run.tasks} {base.taskset.name} seed "
                 "tasks: with the synthesize stage and without")
    if as_json:
        print(json.dumps(doc))
        return
    c = st.console
    for arm, rs in runs.items():
        for a in rs:
            syn = a["synthesis"]
            c.print(f"{arm:8s} eval {a['eval_start']} -> {a['eval_end']} (gain {a['gain']}, mean over time "
                    f"{a['eval_mean_over_time']}), {a['versions']} versions, trained {a['trained']} "
                    f"(+{a['expert_trained']} demonstrations), synthesized {syn.get('synthesized_on_topic', 0)} "
                    f"{syn.get('by_generation', {})}, lost {a['lost']}, duplicated {a['duplicated']}")
    c.print(f"with_gain {doc['with_gain']}, without_gain {doc['without_gain']}; books reconcile "
            f"{doc['books_reconcile']}")
    c.print(f"wrote {saved[0]} and {saved[1]}")
