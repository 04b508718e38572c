"""`rftbus bench async`: the same workload at η = 0 (synchronous) and η = 2 (overlapped), each a real
`rftbus run` (explorer, streams worker, trainer as processes on the current broker, with their own
topics, groups and state folder so nothing else is disturbed).

Figures, all from the runs themselves:
- step period: seconds per trainer step in steady state, from the lineage timestamps of steps
  warmup..S (start-up, DeepSpeed init and the initial eval are outside it);
- G: explorer busy seconds per trainer step (generate + encode + produce of every group, including
  the groups streams filter out, ÷ steps), T: trainer busy seconds per step (train + checkpoint +
  publish), both measured in the η = 0 run where they do not overlap and so do not share the CPU;
- speedup = period(η=0) / period(η=2); ideal = (G + T) / max(G, T); efficiency = speedup / ideal.
  The η = 0 period also pays the synchronous round trips (weight sync, streams grouping, admission),
  reported as sync_overhead_s; bound_efficiency = max(G, T) / period(η=2) is the stricter figure:
  how close the overlapped pipeline gets to its slower stage.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from rftbus.apps.bench.context import state
from rftbus.ground.config import Config, plain_data, write_config
from rftbus.ground.errors import RftbusError
from rftbus.ground.kafka import registry
from rftbus.ground.kafka.clients import check_reachable
from rftbus.ground.kafka.read import read_to_end
from rftbus.ground.schemas import DecodeError, TrainerMetric, make_codec
from rftbus.ground.status import read_statuses, trainer_step
from rftbus.ground.figures import save_png

TOPIC_KEYS = registry.keys()  # every topic, renamed per mode


def _run_config(base: Config, eta: int, u: str, steps: int, minutes: float, scale: dict) -> Config:
    """A private copy of the workload: own topics, groups, model key and state folder; same broker."""
    tag = f"bench-async-{u}-eta{eta}"
    data = plain_data(base)
    data["state_dir"] = str(base.state_dir / "bench-async" / u / f"eta{eta}")
    data["kafka"]["bootstrap_servers"] = base.bootstrap_servers
    for key in TOPIC_KEYS:
        data["topics"][key]["name"] = f"{tag}.{key}"
    data["streams"]["app_id"] = f"{tag}-streams"
    data["trainer"]["group_id"] = f"{tag}-trainer"
    data["explorer"]["group_id"] = f"{tag}-explorer"
    data["trainer"]["checkpoint_dir"] = None
    data["model"]["name"] = tag
    data["rl"]["max_staleness"] = eta
    data["trainer"]["loss"] = "grpo"  # RL only: every step needs B explored groups, so G is on the path
    # Every group reaches the trainer, so each step takes exactly B groups in both modes: the same
    # workload (with filtering the share of dropped groups drifts with what each run's policy learns).
    data["streams"]["drop_zero_variance"] = False
    if scale.get("max_new_tokens"):
        data["explorer"]["sampling"]["max_new_tokens"] = scale["max_new_tokens"]
    # Fixed-length responses: otherwise G drifts with how soon each run's policy learns to stop.
    data["explorer"]["sampling"]["min_new_tokens"] = data["explorer"]["sampling"]["max_new_tokens"]
    if scale.get("hidden_size"):
        data["model"]["tiny"].update(hidden_size=scale["hidden_size"], intermediate_size=2 * scale["hidden_size"])
    if scale.get("layers"):
        data["model"]["tiny"]["num_hidden_layers"] = scale["layers"]
    B = base.rl.batch_groups
    data["run"].update({
        "explorers": 1, "streams_workers": 1, "expert": False, "expert_epochs": 1, "task_passes": 1,
        # S·B tasks are trained; the rest is slack for what is in flight; admission paces the explorer
        "tasks": 2 * (steps + 2 * (eta + 1)) * B, "max_steps": steps, "max_minutes": minutes,
        "eval_n": 8, "eval_every_versions": 10 ** 6, "analytics": False, "studio": False, "serve": False,
        "target_eval_reward": None,
    })
    return Config.model_validate(data)


def _child_env() -> dict[str, str]:
    """The written config is complete; RFTBUS_* variables would override it (env beats YAML)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("RFTBUS_")}


def _one_run(cfg: Config, steps: int, progress: Progress, label: str) -> dict:
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    cfg_path = write_config(cfg, cfg.state_dir / "bench.yaml")
    log = (cfg.state_dir / "run.log").open("w")
    task = progress.add_task(label, total=steps)
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "rftbus", "--config", str(cfg_path), "run",
                             "--summary-json", str(cfg.state_dir / "summary.json")],
                            stdout=log, stderr=subprocess.STDOUT, env=_child_env())
    try:
        while proc.poll() is None:
            step = trainer_step(read_statuses(cfg.state_dir))
            progress.update(task, completed=min(step, steps))
            time.sleep(1.0)
    except KeyboardInterrupt:
        proc.terminate()  # the job stops its children and its own broker-less state cleanly
        proc.wait(120)
        raise
    finally:
        log.close()
    progress.update(task, completed=steps)
    if proc.returncode != 0:
        raise RftbusError(f"{label}: `rftbus run` exited {proc.returncode}; see {cfg.state_dir / 'run.log'}")
    return {"wall_s": time.monotonic() - t0, **_measure(cfg, steps)}


def _measure(cfg: Config, steps: int) -> dict:
    ckpt = Path(cfg.trainer.checkpoint_dir or cfg.state_dir / "checkpoints")
    from rftbus.trainer.checkpoint import read_lineage  # (imports torch: not at every `rftbus` start)

    times = {seg["step"]: seg["time_ms"] / 1000 for seg in read_lineage(ckpt / "lineage.jsonl")}
    if len(times) < steps:
        raise RftbusError(f"the run under {cfg.state_dir} reached step {max(times, default=0)} of {steps}; "
                          "raise --minutes or check its run.log")
    dec = make_codec(cfg.schema_registry.url, cfg.schema_registry.client).deserializer(TrainerMetric)
    busy: dict[int, float] = {}
    staleness: list[float] = []
    for msg in read_to_end(cfg, cfg.topics.metrics.name):
        try:
            m = dec(msg.value(), None)
        except DecodeError:
            continue
        if m is not None and m.kind == "metric" and "busy_s" in m.values:
            busy[m.step] = m.values["busy_s"]
            staleness.append(m.values.get("staleness_mean", 0.0))
    explorer = [s for s in read_statuses(cfg.state_dir) if s.get("role") == "explorer"]
    # Per trainer step, counting filtered groups too: the generation a step really costs. Groups made
    # for a step past the last one are included, so G errs high by at most one step's share.
    g_busy = sum(s.get("busy_s", 0.0) for s in explorer)
    return {"step_times": [times[s] for s in sorted(times)], "trainer_busy_s": [busy[s] for s in sorted(busy)],
            "G_s": g_busy / len(times), "groups": sum(s.get("groups_timed", 0) for s in explorer),
            "staleness_mean": statistics.fmean(staleness) if staleness else 0.0}


def _period(step_times: list[float], warmup: int) -> float:
    t = step_times[warmup - 1:]
    return (t[-1] - t[0]) / (len(t) - 1)


def _plot(runs: dict[int, dict], warmup: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for eta, r in runs.items():
        t = [x - r["step_times"][0] for x in r["step_times"]]
        ax.plot(t, range(1, len(t) + 1), marker=".", label=f"η = {eta}: {r['period_s']:.2f} s/step")
    ax.axhline(warmup, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("seconds since the first trainer step")
    ax.set_ylabel("trainer step")
    ax.set_title("bench async: same workload, synchronous vs overlapped")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_png(fig, path, dpi=110)
    plt.close(fig)


def bench_async(
    ctx: typer.Context,
    steps: int = typer.Option(14, "--steps", min=4, help="trainer steps per run"),
    warmup: int = typer.Option(3, "--warmup", min=1, help="steps before the steady-state window starts"),
    high_eta: int = typer.Option(2, "--eta", min=1, help="the overlapped run's η (the other is 0)"),
    max_new_tokens: int = typer.Option(24, "--max-new-tokens", help="response length"),
    hidden_size: int = typer.Option(256, "--hidden-size", help="tiny model width (bigger: longer G and T)"),
    layers: int = typer.Option(4, "--layers", help="tiny model layers"),
    minutes: float = typer.Option(12.0, "--minutes", help="budget per run"),
    plot: Path = typer.Option(None, "--plot", help="also write a PNG of step vs time for both runs"),
    as_json: bool = typer.Option(False, "--json", help="print speedup, efficiency, ... as one JSON object"),
) -> None:
    """Asynchronous RL: wall-clock speedup of η=2 over η=0 and overlap efficiency (target >= 0.85)."""
    if warmup >= steps - 1:
        raise RftbusError(f"--warmup {warmup} leaves no steady-state window in --steps {steps}")
    st = state(ctx)
    base = st.config()
    check_reachable(base)  # a running broker (rftbus up); each run uses it with private topics
    u = uuid.uuid4().hex[:6]
    runs: dict[int, dict] = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("step {task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=st.err, transient=as_json) as progress:
        for eta in (0, high_eta):
            cfg = _run_config(base, eta, u, steps, minutes,
                              {"max_new_tokens": max_new_tokens, "hidden_size": hidden_size, "layers": layers})
            r = _one_run(cfg, steps, progress, f"η = {eta}")
            r["period_s"] = _period(r["step_times"], warmup)
            runs[eta] = r
    sync, over = runs[0], runs[high_eta]
    G = sync["G_s"]
    T = statistics.fmean(sync["trainer_busy_s"][warmup - 1:])
    ideal = (G + T) / max(G, T)
    speedup = sync["period_s"] / over["period_s"]
    out = {
        "speedup": round(speedup, 3), "efficiency": round(speedup / ideal, 3), "ideal_speedup": round(ideal, 3),
        "bound_efficiency": round(max(G, T) / over["period_s"], 3),
        "G_s": round(G, 3), "T_s": round(T, 3),
        "period_eta0_s": round(sync["period_s"], 3), f"period_eta{high_eta}_s": round(over["period_s"], 3),
        "sync_overhead_s": round(sync["period_s"] - (G + T), 3),
        "staleness_mean_eta0": round(sync["staleness_mean"], 3),
        f"staleness_mean_eta{high_eta}": round(over["staleness_mean"], 3),
        "groups_eta0": sync["groups"], f"groups_eta{high_eta}": over["groups"],
        "steps": steps, "warmup": warmup, "max_new_tokens": max_new_tokens, "hidden_size": hidden_size, "layers": layers, "batch_groups": base.rl.batch_groups, "group_size": base.rl.group_size,
        "wall_eta0_s": round(sync["wall_s"], 1), f"wall_eta{high_eta}_s": round(over["wall_s"], 1),
    }
    if plot:
        _plot(runs, warmup, plot)
        out["plot"] = str(plot)
    if as_json:
        print(json.dumps(out))
        return
    c = st.console
    c.print(f"G (generation per step) {G:.2f} s, T (training per step) {T:.2f} s -> ideal speedup {ideal:.2f}x")
    c.print(f"η=0: {sync['period_s']:.2f} s/step ({out['sync_overhead_s']:+.2f} s beyond G+T); "
            f"η={high_eta}: {over['period_s']:.2f} s/step, mean staleness {over['staleness_mean']:.2f}")
    c.print(f"speedup {speedup:.2f}x, overlap efficiency {speedup / ideal:.2f} (target >= 0.85); "
            f"η={high_eta} runs at {out['bound_efficiency']:.2f} of its slower stage's pace")
