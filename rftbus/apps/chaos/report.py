"""Printing a chaos result: faults, the tally, what did not add up, and the one closing line."""

from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.table import Table

from rftbus.apps.chaos.result import ChaosResult


def print_result(res: ChaosResult, console: Console) -> None:
    kinds = Counter(f.kind.split(":")[0] for f in res.faults)
    faults = Table("fault", "count", "recovered (s, max)", title="faults injected")
    for kind, n in sorted(kinds.items()):
        times = [f.recovered_s for f in res.faults if f.kind.split(":")[0] == kind and f.recovered_s is not None]
        faults.add_row(kind, str(n), f"{max(times):.1f}" if times else "-")
    console.print(faults)
    cluster = [f for f in res.faults if f.metrics]
    if cluster:
        c = Table("fault", "stall (s)", "ISR whole again (s)", "leaders balanced (s)", title="cluster faults: the "
                  "longest gap between trainer steps, the time until no partition is under-replicated, and (after the "
                  "rolling restart) until every partition is led by its preferred replica")
        for cf in cluster:
            c.add_row(cf.kind, str(cf.metrics.get("stall_s")), str(cf.metrics.get("isr_recovery_s")),
                      str(cf.metrics.get("leader_balance_s", "-")))
        console.print(c)
    if res.failover:
        fo = res.failover
        console.print(f"longest trainer-step gap after a freeze {fo['freeze_stall_s']} s, after a kill "
                      f"{fo['kill_stall_s']} s: ratio {fo['ratio']} (at most 1.5)", highlight=False)
    t = res.tally
    if t is not None:
        tab = Table("", "", title="reconciliation (by experience id / position)", show_header=False)
        rows = [("experiences produced", t.produced), ("trained exactly once", t.trained),
                ("rejected with a reason", t.rejected), ("pending at the trainer's checkpoint", t.pending),
                ("in flight (never read by streams)", t.in_flight),
                ("rejections by reason", ", ".join(f"{k} {v}" for k, v in t.rejected_by_reason.items()) or "-"),
                ("demonstrations (expert lane)", ", ".join(f"{k} {v}" for k, v in sorted(t.demonstrations.items())) or "-"),
                ("weight versions", f"{t.versions.get('published')} published, newest v{t.versions.get('newest')}, "
                                    f"skipped {t.versions.get('skipped')}, twice {t.versions.get('twice')}"),
                ("lineage", f"{t.lineage.get('steps')} steps, checkpoint at step {t.lineage.get('checkpoint_step')}"),
                ("poison handled", f"{sum(1 for p in t.poison if p['ok'])}/{len(t.poison)}"),
                ("ClickHouse vs Kafka", "skipped" if t.clickhouse is None else
                 ("match" if not (t.lost.get("clickhouse") or t.duplicated.get("clickhouse")) else "DIFFER")),
                ("lost (by ledger)", dict(t.lost) or 0), ("duplicated (by ledger)", dict(t.duplicated) or 0)]
        for k, v in rows:
            tab.add_row(k, str(v))
        console.print(tab)
        for line in t.examples:
            console.print(f"  [red]{line}[/]", highlight=False)
        for p in t.poison:
            if not p["ok"]:
                console.print(f"  [yellow]poison {p['topic']} '{p['label']}': {p['outcome']}[/]", highlight=False)
        for note in t.notes:
            console.print(f"  [yellow]note:[/] {note}", highlight=False)
    for s in res.skipped:
        console.print(f"  [yellow]skipped:[/] {s}", highlight=False)
    for f in res.failures:
        console.print(f"  [red]failure:[/] {f}", highlight=False)
    console.print(f"wall time {res.wall_s / 60:.1f} min; run exit code {res.run_exit}; "
                  f"restarts {res.run_summary.get('restarts')}", highlight=False)
    console.print(res.closing_line(), highlight=False, markup=False)
