"""`rftbus bench peer`: rftbus against a single-process peer (TRL's GRPOTrainer + PEFT) on the same config.

At equal batch: rftbus's trainer steps on the groups that are ready (`trainer.step_wait_s`), so it may train on
fewer answers a step than the configured B·n TRL would be given, and smaller steps alone learn faster per second
here. `--batch matched` (the default) runs rftbus first and gives TRL the batch rftbus really trained on (answers in
the loss per step, measured, rounded to whole groups); `--batch fixed` runs both at the configured B·n (rftbus
waits for B groups a step: step_wait_s off); `--batch both` runs both pairs. For each of `--runs` rounds, one side
after the other on this machine (never side by side), each for `--minutes` (TRL: peer_trl.py, the same weights,
prompts, rewards, stop ids and recipe; rftbus: `rftbus run` in a state folder of its own, every version kept, the
run's own eval reduced to v0 and the last, no early stop). Then every snapshot of every side is scored with the
same held-out eval (peer_eval.py) and the curves are printed, written as JSON and plotted.
Needs TRL: `pip install 'rftbus[bench]'`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from rftbus.apps.bench.context import state
from rftbus.ground.config import Config, plain_data, write_config


ARMS = {"matched": ("rftbus", "trl"), "fixed": ("rftbus-fixed", "trl-fixed")}  # --batch: its pairs' sides
BATCHES = {"matched": ["matched"], "fixed": ["fixed"], "both": ["matched", "fixed"]}


def _rftbus_config(cfg: Config, state_dir: Path, minutes: float, fixed: bool = False) -> Config:
    """The config `rftbus run` gets: its own state folder, every version kept, no early stop, eval of v0 and the
    last version only (both sides are scored afterwards, the same way); `fixed`: a step waits for B groups."""
    data = plain_data(cfg)
    data["state_dir"] = str(state_dir)
    data["trainer"]["keep_versions"] = 1_000_000
    if fixed:
        data["trainer"]["step_wait_s"] = None
    run = data["run"]
    run.update(max_minutes=minutes, target_eval_reward=None, eval_every_versions=1_000_000, analytics=False,
               studio=False, serve=False)
    return Config.model_validate(data)


def _follow(proc: subprocess.Popen, what: str, deadline: float, progress: Callable[[], str]) -> int:
    """Wait for `proc`, reporting its progress every 30 s; stopped 3 minutes past its deadline."""
    last = time.time()
    while proc.poll() is None:
        time.sleep(1.0)
        if time.time() - last >= 30:
            last = time.time()
            typer.echo(f"  {what}: {progress()}", err=True)
        if time.time() > deadline + 180:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
    return int(proc.returncode)


def _last_line(log: Path, prefix: str) -> str:
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.startswith(prefix)] if log.exists() else []
    return lines[-1].strip() if lines else "starting"


def _trainer_progress(state_dir: Path, t0: float) -> str:
    from rftbus.ground.status import read_statuses

    st = next((s for s in read_statuses(state_dir, "trainer")), None)
    if st is None:
        return "starting"
    return f"trainer step {st.get('step') or 0}, v{st.get('version') or 0} at {time.time() - t0:.0f} s"


def run_trl(config_path: Path, out: Path, minutes: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    log = out / "trl.log"
    t0 = time.time()
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "rftbus.apps.bench.peer_trl", "--config", str(config_path),
                                 "--out", str(out), "--minutes", str(minutes), "--t0", repr(t0)],
                                stdout=f, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        rc = _follow(proc, "TRL", t0 + minutes * 60, lambda: _last_line(log, "trl step"))
    if rc != 0:
        raise typer.BadParameter(f"the TRL run failed (exit {rc}); its log: {log}")


def trl_config(cfg: Config, groups: int) -> Config:
    """The config TRL gets: the same, `groups` groups (of n answers) a step."""
    data = plain_data(cfg)
    data["rl"]["batch_groups"] = groups
    return Config.model_validate(data)


def matched_groups(state_dir: Path, group_size: int) -> tuple[int, float]:
    """(whole groups, answers) a step rftbus's trainer really trained on: answers in the loss over optimizer steps
    in the run's summary, rounded to whole groups (at least one)."""
    path = state_dir / "run" / "summary.json"
    if not path.exists():
        raise typer.BadParameter(f"{path} is missing: --batch matched needs the rftbus side's run first (run "
                                 "without --only, or --only rftbus before --only trl)")
    summary = json.loads(path.read_text())
    steps, trained = int(summary.get("trainer_steps") or 0), int(summary.get("experiences_trained") or 0)
    if steps <= 0:
        raise typer.BadParameter(f"the rftbus side made no trainer step ({path}): "
                                 "there is no batch to match")
    per_step = trained / steps
    return max(1, round(per_step / group_size)), per_step


def run_rftbus(cfg: Config, state_dir: Path, minutes: float, fixed: bool = False) -> float:
    """Runs `rftbus run`; returns its start time (epoch s)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = write_config(_rftbus_config(cfg, state_dir, minutes, fixed), state_dir / "bench-config.yaml")
    log = state_dir / "run.log"
    t0 = time.time()
    exe = str(Path(sys.executable).parent / "rftbus")
    with open(log, "w") as f:
        proc = subprocess.Popen([exe, "--config", str(path), "run"], stdout=f, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "160"})
        rc = _follow(proc, "rftbus", t0 + minutes * 60, lambda: _trainer_progress(state_dir, t0))
    if rc != 0:
        raise typer.BadParameter(f"`rftbus run` failed (exit {rc}); its log: {log}")
    return t0


def _steps_rftbus(state_dir: Path) -> list[float]:
    summary = json.loads((state_dir / "run" / "summary.json").read_text())
    return [float(s) for s, step in summary.get("steps_timeline", []) if step > 0]


def peer(
    ctx: typer.Context,
    minutes: float = typer.Option(10.0, "--minutes", min=0.5, help="Wall minutes each side runs."),
    runs: int = typer.Option(1, "--runs", min=1, help="Rounds (every side of every pair each)."),
    batch: str = typer.Option("matched", "--batch", help="matched: TRL at the answers a step rftbus trained on; "
                              "fixed: both at the configured B·n; both: the two pairs."),
    only: str = typer.Option("both", "--only", help="both, trl or rftbus."),
    most: int = typer.Option(40, "--most", min=2, help="Snapshots scored per side and round, evenly spread."),
    lift: float = typer.Option(0.30, "--lift", help="Report the time to base eval + this."),
    out: Path | None = typer.Option(None, "--out", help="Folder for peer.json and peer.png (default: "
                                    "<state_dir>/bench-peer)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """rftbus vs TRL's GRPOTrainer on the same config at equal batch: held-out eval against wall time."""
    from rftbus.apps.bench.peer_eval import Scorer, rftbus_snapshots, side_result, thin, trl_snapshots
    from rftbus.apps.bench.peer_plot import plot_peer
    from rftbus.apps.run.summary import shown
    from rftbus.ground.status import run_started

    if only not in ("both", "trl", "rftbus"):
        raise typer.BadParameter("--only is both, trl or rftbus")
    if batch not in BATCHES:
        raise typer.BadParameter(f"--batch is one of {', '.join(BATCHES)}, not {batch!r}")
    cfg = state(ctx).config()
    if only != "rftbus":
        try:
            import trl  # noqa: F401
        except ImportError:
            raise typer.BadParameter("TRL is not installed: pip install 'rftbus[bench]'") from None
    work = (out or cfg.state_dir / "bench-peer").absolute()
    work.mkdir(parents=True, exist_ok=True)
    n, configured = cfg.rl.group_size, cfg.rl.batch_groups
    per_step: dict[str, float] = {}  # side folder -> answers a step it trained on
    for r in range(runs):
        for kind in BATCHES[batch]:
            mine, peer_side = ARMS[kind]
            if only != "trl":
                typer.echo(f"round {r + 1}/{runs} ({kind} batch): rftbus for {minutes:g} minutes ...", err=True)
                run_rftbus(cfg, work / f"{mine}-{r}", minutes, fixed=kind == "fixed")
            if only == "rftbus":
                continue
            groups = configured
            if kind == "matched":  # the rftbus side just run, or (--only trl) one an earlier --only rftbus left
                groups, measured = matched_groups(work / f"{mine}-{r}", n)
                typer.echo(f"  rftbus trained on {measured:.1f} answers a step: TRL gets {groups} groups "
                           f"({groups * n} answers) a step", err=True)
            per_step[f"{peer_side}-{r}"] = groups * n
            path = write_config(trl_config(cfg, groups), work / f"config-{peer_side}-{r}.yaml")
            typer.echo(f"round {r + 1}/{runs} ({kind} batch): TRL at {groups * n} answers a step for {minutes:g} "
                       "minutes ...", err=True)
            run_trl(path, work / f"{peer_side}-{r}", minutes)
    typer.echo("scoring every side's snapshots on the held-out split ...", err=True)
    scorer = Scorer(cfg)
    base = scorer.base()
    marks = [m * 60.0 for m in (2.5, 5, 7.5, 10, 15) if m <= minutes]
    result: dict[str, Any] = {"config": str(state(ctx).config_path or ""), "minutes": minutes, "base_eval": base,
                              "lift": lift, "batch": batch, "group_size": n, "configured_answers_per_step":
                              configured * n, "cores": len(os.sched_getaffinity(0)), "rounds": []}
    for r in range(runs):
        rnd: dict[str, Any] = {}
        for kind in BATCHES[batch]:
            for side in ARMS[kind]:
                folder = work / f"{side}-{r}"
                if side.startswith("trl"):
                    if only == "rftbus":
                        continue
                    snaps = trl_snapshots(folder)
                    steps = [s.seconds for s in snaps]
                    score, answers = scorer.trl, per_step[f"{side}-{r}"]
                else:
                    if only == "trl":
                        continue
                    started = run_started(folder) or 0.0
                    snaps = rftbus_snapshots(folder, cfg.model.name, started)
                    steps = _steps_rftbus(folder)
                    score, answers = scorer.rftbus, matched_groups(folder, n)[1]
                curve = [(0.0, base)]
                for s in thin(snaps, most):
                    curve.append((s.seconds, score(s.path)))
                    typer.echo(f"  round {r + 1} {side} {s.label} at {s.seconds:.0f} s: {curve[-1][1]:.3f}", err=True)
                rnd[side] = {**side_result(curve, base, steps, marks, lift), "answers_per_step": round(answers, 1)}
        result["rounds"].append(rnd)
    result["plot"] = shown(plot_peer(result, work / "peer.png"))  # relative under the working directory
    (work / "peer.json").write_text(json.dumps(result, indent=2))
    if as_json:
        typer.echo(json.dumps(result))
        return
    key = f"to_base_plus_{lift:.2f}_s"
    typer.echo(f"base eval {base:.3f}; target {base + lift:.3f}; {work / 'peer.json'}")
    for r, rnd in enumerate(result["rounds"]):
        for side, res in rnd.items():
            at = ", ".join(f"{k} {v:.3f}" if v is not None else f"{k} -" for k, v in res["eval_at"].items())
            typer.echo(f"round {r + 1} {side:12s}: target at {res[key]} s; {at}; {res['steps']} steps of "
                       f"{res['answers_per_step']} answers, first at {res['first_step_s']} s, median "
                       f"{res['median_step_s']} s a step")
        for kind in BATCHES[batch]:
            mine, theirs = (rnd.get(side, {}).get(key) for side in ARMS[kind])
            if mine is not None and theirs:
                typer.echo(f"round {r + 1} {kind} batch: rftbus reaches the target in {mine / theirs:.2f}x TRL's time")
