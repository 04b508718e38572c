"""`rftbus bench peer`: rftbus against a single-process peer (TRL's GRPOTrainer + PEFT) on the same config.

For each of `--runs` rounds, one after the other on this machine (never side by side): TRL for `--minutes`
(peer_trl.py: the same weights, prompts, rewards, stop ids and recipe), then `rftbus run` of the same config
for `--minutes` in a state folder of its own (every version kept, the run's own eval reduced to v0 and the last,
no early stop). Then every snapshot of both is scored with the same held-out eval (peer_eval.py) and the
curves are printed, written as JSON and plotted (eval against wall time, both sides, every round).
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

from rftbus.bench.context import state
from rftbus.config import Config, plain_data, write_config


def _rftbus_config(cfg: Config, state_dir: Path, minutes: float) -> Config:
    """The config `rftbus run` gets: its own state folder, every version kept, no early stop, eval of v0 and the
    last version only (both sides are scored afterwards, the same way)."""
    data = plain_data(cfg)
    data["state_dir"] = str(state_dir)
    data["trainer"]["keep_versions"] = 1_000_000
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
    from rftbus.status import read_statuses

    st = next((s for s in read_statuses(state_dir, "trainer")), None)
    if st is None:
        return "starting"
    return f"trainer step {st.get('step') or 0}, v{st.get('version') or 0} at {time.time() - t0:.0f} s"


def run_trl(config_path: Path, out: Path, minutes: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    log = out / "trl.log"
    t0 = time.time()
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "rftbus.bench.peer_trl", "--config", str(config_path),
                                 "--out", str(out), "--minutes", str(minutes), "--t0", repr(t0)],
                                stdout=f, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        rc = _follow(proc, "TRL", t0 + minutes * 60, lambda: _last_line(log, "trl step"))
    if rc != 0:
        raise typer.BadParameter(f"the TRL run failed (exit {rc}); its log: {log}")


def run_rftbus(cfg: Config, state_dir: Path, minutes: float) -> float:
    """Runs `rftbus run`; returns its start time (epoch s)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = write_config(_rftbus_config(cfg, state_dir, minutes), state_dir / "bench-config.yaml")
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
    runs: int = typer.Option(1, "--runs", min=1, help="Rounds (TRL then rftbus each)."),
    only: str = typer.Option("both", "--only", help="both, trl or rftbus."),
    most: int = typer.Option(40, "--most", min=2, help="Snapshots scored per side and round, evenly spread."),
    lift: float = typer.Option(0.30, "--lift", help="Report the time to base eval + this."),
    out: Path | None = typer.Option(None, "--out", help="Folder for peer.json and peer.png (default: "
                                    "<state_dir>/bench-peer)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """rftbus vs TRL's GRPOTrainer on the same config: held-out eval against wall time, both sides."""
    from rftbus.bench.peer_eval import Scorer, rftbus_snapshots, side_result, thin, trl_snapshots
    from rftbus.bench.peer_plot import plot_peer
    from rftbus.run.summary import shown
    from rftbus.status import run_started

    if only not in ("both", "trl", "rftbus"):
        raise typer.BadParameter("--only is both, trl or rftbus")
    cfg = state(ctx).config()
    if only != "rftbus":
        try:
            import trl  # noqa: F401
        except ImportError:
            raise typer.BadParameter("TRL is not installed: pip install 'rftbus[bench]'") from None
    work = (out or cfg.state_dir / "bench-peer").absolute()
    work.mkdir(parents=True, exist_ok=True)
    config_path = write_config(cfg, work / "config.yaml")
    sides = [s for s in ("trl", "rftbus") if only in ("both", s)]
    for r in range(runs):
        for side in sides:
            typer.echo(f"round {r + 1}/{runs}: {side} for {minutes:g} minutes ...", err=True)
            if side == "trl":
                run_trl(config_path, work / f"trl-{r}", minutes)
            else:
                run_rftbus(cfg, work / f"rftbus-{r}", minutes)
    typer.echo("scoring every side's snapshots on the held-out split ...", err=True)
    scorer = Scorer(cfg)
    base = scorer.base()
    marks = [m * 60.0 for m in (2.5, 5, 7.5, 10, 15) if m <= minutes]
    result: dict[str, Any] = {"config": str(state(ctx).config_path or ""), "minutes": minutes, "base_eval": base,
                              "lift": lift, "cores": len(os.sched_getaffinity(0)), "rounds": []}
    for r in range(runs):
        rnd: dict[str, Any] = {}
        for side in sides:
            if side == "trl":
                folder = work / f"trl-{r}"
                snaps = trl_snapshots(folder)
                steps = [s.seconds for s in snaps]
                score = scorer.trl
            else:
                folder = work / f"rftbus-{r}"
                started = run_started(folder) or 0.0
                snaps = rftbus_snapshots(folder, cfg.model.name, started)
                steps = _steps_rftbus(folder)
                score = scorer.rftbus
            curve = [(0.0, base)]
            for s in thin(snaps, most):
                curve.append((s.seconds, score(s.path)))
                typer.echo(f"  round {r + 1} {side} {s.label} at {s.seconds:.0f} s: {curve[-1][1]:.3f}", err=True)
            rnd[side] = side_result(curve, base, steps, marks, lift)
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
            typer.echo(f"round {r + 1} {side:6s}: target at {res[key]} s; {at}; {res['steps']} steps, first at "
                       f"{res['first_step_s']} s, median {res['median_step_s']} s a step")
