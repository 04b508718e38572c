"""`rftbus bench late-feedback`: does a grade that comes back many versions late still teach?

Three arms, run back to back, each a whole `rftbus run` of the live-traffic config (a real chat model with LoRA
served by `rftbus serve`, simulated agents and graders, no explorers) with its own state folder and embedded broker:

- on_time: every grade comes seconds after the answer (the config's delays);
- late: half the grades (graders.late_share) are held back until the published weights are at least
  `late_versions` past the version that answered; they train under rl.max_feedback_staleness with M2PO's
  correction (rftbus/trainer/losses/m2.py);
- dropped: the same late grades, with rl.max_feedback_staleness = η: a group graded past η is rejected `stale`
  (what rftbus did before late feedback trained).

The promotion gate is off in every arm (served = newest, so "versions late" counts the model's own progress) and
the feedback TTL is longer than the run (a held grade finds its answer waiting). Each arm's gain is its held-out
eval at the end minus at the start (run.eval_n prompts, greedy). Writes late-feedback.json and a PNG of eval
against time; prints the figures and whether late_gain >= 0.9 × on_time_gain and late_gain > dropped_gain.

One eval is a greedy pass over run.eval_n prompts, so one run's gain moves by a prompt or two from run to run:
`--repeats N` runs the arms round-robin N times (on_time, late, dropped, on_time, ...: the machine's drift falls
on every arm alike) and each arm's gain is the mean of its N runs; every run's figures stay in the JSON.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import typer

from rftbus.apps.bench.arms import books_reconcile, round_robin, save
from rftbus.apps.bench.context import state
from rftbus.ground.config import Config, plain_data
from rftbus.ground.errors import RftbusError

ARMS = ("on_time", "late", "dropped")


def arm_config(base: Config, arm: str, root: Path, minutes: float, late_share: float, late_versions: int,
               eta: int) -> Config:
    """`base` as arm `arm` runs it: its own state folder (and so its own broker data), the gate off, a TTL longer
    than the run, η = `eta`; the late arms hold `late_share` of the grades back by `late_versions` versions."""
    data = plain_data(base)
    data["state_dir"] = str(root / arm)
    data["rl"]["max_staleness"] = eta
    data["rl"]["max_feedback_staleness"] = eta if arm == "dropped" else max(base.rl.max_feedback_staleness,
                                                                              4 * late_versions)
    data["gate"]["enabled"] = False
    data["streams"]["feedback_ttl_s"] = max(float(data["streams"]["feedback_ttl_s"]), 3600.0 + 120 * minutes)
    data["simulate"]["graders"]["late_share"] = 0.0 if arm == "on_time" else late_share
    data["simulate"]["graders"]["late_versions"] = late_versions
    data["run"]["max_minutes"] = minutes
    return Config.model_validate(data)


def arm_figures(s: dict) -> dict:
    """What the benchmark reports of one arm's run summary."""
    points = s.get("eval_points") or []
    start, end = s.get("eval_reward_initial"), s.get("eval_reward_final")
    fb = s.get("feedback") or {}
    tail = [p["reward"] for p in points[-2:]] if len(points) >= 3 else []
    return {
        "gain": None if start is None or end is None else round(end - start, 4),
        # (the last eval alone is one noisy draw of eval_n prompts: the mean of the last two, less the start)
        "gain_last2": round(sum(tail) / len(tail) - start, 4) if tail and start is not None else None,
        # (the eval saturates near its ceiling within the run: the mean over time says how soon an arm got there)
        "eval_mean_over_time": eval_mean_over_time(points),
        "eval_start": start, "eval_end": end,
        "eval_points": [{"seconds": p["seconds"], "version": p["version"], "reward": p["reward"]} for p in points],
        "versions": s.get("versions_published"), "trainer_steps": s.get("trainer_steps"),
        "trained": s.get("experiences_trained"), "rejected": s.get("experiences_rejected"),
        "trained_past_eta": s.get("trained_past_eta"), "trained_past_eta_p50": s.get("trained_past_eta_p50"),
        "joined_past_eta": fb.get("joined_past_eta"), "too_late": fb.get("late"),
        "held_for_versions": (s.get("simulated") or {}).get("feedback_held_for_versions"),
        "lost": s.get("experiences_lost"), "duplicated": s.get("duplicated"),
        "reconciles": s.get("counts_reconcile"), "wall_s": s.get("wall_seconds"),
    }


def eval_mean_over_time(points: list[dict]) -> float | None:
    """The held-out eval averaged over the run's time (trapezoids between eval points): the area under the curve
    divided by its length, which separates arms that end at the same ceiling but reach it at different times."""
    pts = sorted((p["seconds"], p["reward"]) for p in points)
    if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
        return None
    area = sum((t1 - t0) * (r0 + r1) / 2 for (t0, r0), (t1, r1) in zip(pts, pts[1:]))
    return round(area / (pts[-1][0] - pts[0][0]), 4)


def pooled(runs: list[dict]) -> dict:
    """One arm over its repeats: the mean of each gain and eval, every run's figures under "runs"; the books must
    reconcile in every run."""
    def mean(key: str) -> float | None:
        vals = [r[key] for r in runs if r[key] is not None]
        return round(statistics.fmean(vals), 4) if len(vals) == len(runs) else None

    p50s = [r["trained_past_eta_p50"] for r in runs if r["trained_past_eta_p50"] is not None]
    return {
        "gain": mean("gain"), "gain_last2": mean("gain_last2"), "eval_start": mean("eval_start"),
        "eval_end": mean("eval_end"), "gains": [r["gain"] for r in runs],
        "eval_mean_over_time": mean("eval_mean_over_time"),
        "trained_past_eta_p50": statistics.median(p50s) if p50s else None,
        "reconciles": all(bool(r["reconciles"]) for r in runs),
        "lost": sum(r["lost"] or 0 for r in runs), "duplicated": sum(r["duplicated"] or 0 for r in runs),
        "runs": runs,
    }


def verdict(arms: dict[str, dict]) -> dict:
    """The JSON's headline keys and the target's two checks (None where an arm did not run)."""
    g = {a: arms[a]["gain"] if a in arms else None for a in ARMS}
    on, late, dropped = g["on_time"], g["late"], g["dropped"]
    p50s = [arms["late"]["trained_past_eta_p50"]] if "late" in arms else []
    return {
        "on_time_gain": on, "late_gain": late, "dropped_gain": dropped,
        "late_versions_p50": p50s[0] if p50s else None,
        "late_keeps_0_9_of_on_time": None if on is None or late is None else late >= 0.9 * on,
        "late_beats_dropped": None if late is None or dropped is None else late > dropped,
        "books_reconcile": books_reconcile(arms),
    }


def bench_late_feedback(
    ctx: typer.Context,
    minutes: float = typer.Option(8.0, "--minutes", min=1.0, help="each arm's run.max_minutes"),
    late_share: float = typer.Option(0.5, "--late-share", min=0.0, max=1.0, help="grades held back (late arms)"),
    late_versions: int = typer.Option(10, "--late-versions", min=1, help="versions a held-back grade waits for"),
    eta: int = typer.Option(4, "--eta", min=0, help="η (rl.max_staleness) of every arm; the dropped arm's "
                            "feedback bound too"),
    arms: str = typer.Option(",".join(ARMS), "--arms", help="which arms, in order (comma-separated)"),
    repeats: int = typer.Option(1, "--repeats", min=1, help="runs per arm, round-robin; an arm's gain is their mean"),
    out: Path = typer.Option(Path("late-feedback"), "--out", help="folder for late-feedback.json and its PNG"),
    as_json: bool = typer.Option(False, "--json", help="print the JSON object only"),
) -> None:
    """Late grades: held-out gain with grades on time, half of them >= 10 versions late (trained, corrected), and
    the same late grades dropped. Run with the live-traffic config, e.g. `--config configs/live-real.yaml`."""
    st = state(ctx)
    base = st.config()
    chosen = [a.strip() for a in arms.split(",") if a.strip()]
    bad = [a for a in chosen if a not in ARMS]
    if bad or not chosen:
        raise RftbusError(f"--arms takes {', '.join(ARMS)}; got {arms!r}")
    if not (base.run.serve and base.run.simulate):
        raise RftbusError("late-feedback needs a live-traffic config (run.serve and run.simulate true), e.g. "
                          "configs/live-real.yaml")
    say = (lambda _m: None) if as_json else st.err.print
    root = base.state_dir / "bench-late-feedback"
    runs = round_robin(chosen, repeats, root, lambda arm, where: arm_config(base, arm, where, minutes, late_share,
                                                                           late_versions, eta),
                       arm_figures, minutes, say)
    results = {a: rs[0] if repeats == 1 else pooled(rs) for a, rs in runs.items()}
    head = verdict(results)
    doc = {**head, "arms": results, "minutes_per_arm": minutes, "repeats": repeats, "late_share": late_share,
           "late_versions": late_versions, "eta": eta, "model": base.model.name, "taskset": base.taskset.name,
           "eval_n": base.run.eval_n}
    saved = save(doc, results, out, "late-feedback", f"{base.model.name} on live {base.taskset.name}: half the "
                 f"grades >= {late_versions} versions late")
    if as_json:
        print(json.dumps(doc))
        return
    c = st.console
    for arm, rs in runs.items():
        for a in rs:
            c.print(f"{arm:8s} eval {a['eval_start']} -> {a['eval_end']} (gain {a['gain']}, mean over time "
                    f"{a['eval_mean_over_time']}), {a['versions']} "
                    f"versions, trained past η {a['trained_past_eta']}, rejected {a['rejected']}, lost {a['lost']}, "
                    f"duplicated {a['duplicated']}")
    c.print(f"on_time_gain {head['on_time_gain']}, late_gain {head['late_gain']}, dropped_gain "
            f"{head['dropped_gain']}, late_versions_p50 {head['late_versions_p50']}")
    c.print(f"late >= 0.9 x on time: {head['late_keeps_0_9_of_on_time']}; late > dropped: "
            f"{head['late_beats_dropped']}; books reconcile: {head['books_reconcile']}")
    c.print(f"wrote {saved[0]} and {saved[1]}")
