"""The live view of `rftbus run`: one table built from the processes' status files and Kafka lags."""

from __future__ import annotations

import time

from rich.console import Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from rftbus.ground.models.lineage import label

# Fields worth showing first when a status file has them; anything else numeric follows.
PREFERRED = ["step", "version", "model_version", "reward", "live_reward_recent", "requests", "feedback_posted",
             "joined", "feedback_join_p50_s", "feedback_join_p99_s", "loss", "staleness", "max_staleness_trained",
             "groups_produced", "experiences", "waiting_for_admission", "in", "curated", "expert", "rejected",
             "experiences_per_s", "throughput"]
SKIP = {"role", "id", "pid", "updated_at"}


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_fmt(x)}" for k, x in list(v.items())[:4])
    return str(v)


def _fields(status: dict, limit: int = 8) -> str:
    keys = [k for k in PREFERRED if k in status] + sorted(
        k for k, v in status.items() if k not in SKIP and k not in PREFERRED and isinstance(v, (int, float, bool, str)))
    return "  ".join(f"[dim]{k}[/]={escape(_fmt(status[k]))}" for k in keys[:limit])


def render(*, started: float, statuses: list[dict], lags: dict[str, int], evals: list[dict],
           events: list[str], children: dict[str, str]) -> Panel:
    now = time.time()
    procs = Table.grid(padding=(0, 1))
    procs.add_column(style="bold")
    procs.add_column()
    for st in statuses:
        age = now - st.get("updated_at", now)
        stale = f" [red](silent {age:.0f}s)[/]" if age > 10 else ""
        procs.add_row(f"{st.get('role')}-{st.get('id')}", _fields(st) + stale)
    for name, state in children.items():
        if state != "running":
            procs.add_row(name, f"[red]{escape(state)}[/]")
    lag = "  ".join(f"{k}={v}" for k, v in lags.items()) or "n/a"
    ev = "n/a"
    if evals:
        first, last = evals[0], evals[-1]
        ev = f"initial {first['reward']:.3f} → v{last['version']} {last['reward']:.3f} (best {max(e['reward'] for e in evals):.3f})"
    body = Group(
        f"[bold]elapsed[/] {now - started:.0f}s   [bold]eval[/] {ev}",
        f"[bold]lag[/] {lag}",
        procs,
        *(f"[dim]{escape(e)}[/]" for e in events[-5:]),
    )
    return Panel(body, title="rftbus run", border_style="cyan")


def progress_line(*, started: float, statuses: list[dict], lags: dict[str, int], evals: list[dict],
                  events: list[str], children: dict[str, str]) -> str:
    """One plain line for a run whose output goes to a file: elapsed, the trainer's step and version, the last
    eval, the explorers' groups, lags and any stage that is not running."""
    now = time.time()
    trainer = next((s for s in statuses if s.get("role") == "trainer"), {})
    explorers = [s for s in statuses if s.get("role") == "explorer"]
    parts = [f"[{now - started:.0f} s] step {trainer.get('step') or 0} v{trainer.get('version') or 0}"]
    if evals:
        last = evals[-1]
        parts.append(f"eval v{last['version']} {last['reward']:.3f} (initial {evals[0]['reward']:.3f}, best "
                     f"{max(e['reward'] for e in evals):.3f})")
    if explorers:
        groups = sum(int(s.get("groups_produced") or 0) for s in explorers)
        waiting = sum(1 for s in explorers if s.get("waiting_for_admission"))
        parts.append(f"explorers {groups} groups" + (f" ({waiting} waiting)" if waiting else ""))
    gate = next((s for s in statuses if s.get("role") == "gate"), None)
    if gate is not None and gate.get("serving") is not None:
        parts.append(f"serving {label(gate.get('serving_lineage') or '', gate['serving'])}"
                     + (f", {label(gate.get('candidate_lineage') or '', gate['candidate'])} on canary"
                        if gate.get("candidate") is not None else ""))
    if lags:
        parts.append("lag " + " ".join(f"{k}={v}" for k, v in lags.items()))
    down = {n: st for n, st in children.items() if st != "running"}
    if down:
        parts.append("; ".join(f"{n}: {st}" for n, st in down.items()))
    return " | ".join(parts)
