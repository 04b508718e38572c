"""`rftbus chaos --every-event`: the every-event sweep (every_event.py) on its own broker, with progress, a table,
`every_event.json` and a plot (`every_event.png`: seconds per kill index, red where the outputs differed)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from rich.console import Console

from rftbus.apps.chaos.every_event import Case, Sweep, sweep
from rftbus.apps.chaos.plan import free_port_pair, with_overrides
from rftbus.ground.config import Config
from rftbus.ground.figures import save_png


def sweep_config(base: Config) -> Config:
    """A fresh state folder `<state_dir>/chaos-every-event` with its own broker port (the base folder's jars)."""
    from rftbus.ground.broker import embedded
    from rftbus.ground.errors import RftbusError

    state = base.state_dir / "chaos-every-event"
    if state.exists():
        pid = embedded.running_pid(with_overrides(base, {"state_dir": str(state)}))
        if pid is not None:
            raise RftbusError(f"another every-event sweep is using {state} (its broker, pid {pid}, is running)")
        shutil.rmtree(state)
    state.mkdir(parents=True)
    libs = base.broker.libs_dir or base.state_dir / "kafka" / f"libs-{base.broker.kafka_version}"
    return with_overrides(base, {"state_dir": str(state), "kafka.bootstrap_servers": None,
                                 "broker.port": free_port_pair(base.broker.host), "broker.controller_port": None,
                                 "broker.libs_dir": str(libs), "broker.nodes": 1, "run.acls": False})


def run(base: Config, console: Console, indices: list[int] | None = None, stride: int = 1) -> Sweep:
    """Broker up, the sweep (every index, or `indices`, or every `stride`-th), broker down; the report written."""
    from rftbus.ground.broker import embedded

    cfg = sweep_config(base)
    console.print(f"every-event sweep: state in {cfg.state_dir}; starting its own Kafka broker ...")
    embedded.start(cfg, console)
    try:
        def progress(c: Case, n: int) -> None:
            mark = "[green]ok[/]" if not c.problems else f"[red]{len(c.problems)} problem(s)[/]"
            console.print(f"  kill at event {c.kill_at:>3} ({c.last_event or 'none'}): {mark} in {c.seconds:.0f} s")
            for p in c.problems[:5]:
                console.print(f"      {p}")

        result = sweep(cfg, Path(cfg.state_dir) / "cases", indices, stride=stride, progress=progress)
    finally:
        embedded.stop(cfg)
    report(result, Path(cfg.state_dir), console)
    return result


def report(result: Sweep, out: Path, console: Console) -> None:
    b = result.baseline
    failed = result.failed
    killed = sum(c.killed for c in result.cases)
    console.print(f"every-event: {len(result.cases)} kill(s) of {b.events} events ({killed} landed a SIGKILL), "
                  f"{sum(b.outputs.values())} outputs each; {len(failed)} case(s) differed from the run without a kill")
    doc = {"events": b.events, "outputs": sum(b.outputs.values()), "baseline_s": round(b.seconds, 1),
           "cases": [{"kill_at": c.kill_at, "event": c.last_event, "killed": c.killed, "seconds": round(c.seconds, 1),
                      "problems": c.problems} for c in result.cases]}
    (out / "every_event.json").write_text(json.dumps(doc, indent=1))
    plot(result, out / "every_event.png")
    console.print(f"every-event: report {out / 'every_event.json'}, plot {out / 'every_event.png'}")


def plot(result: Sweep, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3))
    xs = [c.kill_at for c in result.cases]
    ax.bar(xs, [c.seconds for c in result.cases], color=["tab:red" if c.problems else "tab:green"
                                                         for c in result.cases])
    ax.axhline(result.baseline.seconds, color="grey", linestyle="--", label="no kill")
    ax.set_xlabel("SIGKILL at event index (read, table change, send, commit)")
    ax.set_ylabel("seconds to settle")
    ax.set_title(f"streams worker killed at {len(xs)} event indices: {len(result.failed)} differed")
    ax.legend()
    fig.tight_layout()
    save_png(fig, path, dpi=80)
    plt.close(fig)
