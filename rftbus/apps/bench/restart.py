"""`rftbus bench restart`: how long the streams worker takes to come back after kill -9 with a large table, with its
rocksdb kept (the store holds the table as of the committed inputs, rftbus/streams/store.py) and with it removed (what an
unclean start did before: the tables were rebuilt from their changelogs), alternated in one run on one broker.

The table: `--groups` live groups held for their feedback (a 24 h TTL), each a live-table entry with its samples
and an index entry per sample in the join table. After each kill a probe group (an explorer group, curated from
raw at once) is published, the worker is started again under the same id (the same state folder) and timed to the
probe's curation (from the worker's own status file: no reader competes with it) and to its raw partitions'
assignment. The held groups must still be held: none may be released as `no_feedback` or curated meanwhile.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import typer

from rftbus.apps.bench.context import state
from rftbus.apps.bench.processes import WorkerProcess
from rftbus.apps.bench.streams import _delete_topics, _produce
from rftbus.apps.bench.synthetic import make_group
from rftbus.ground.errors import RftbusError
from rftbus.ground.kafka import registry
from rftbus.ground.kafka.clients import check_reachable
from rftbus.ground.kafka.committed import CommittedOffsets
from rftbus.ground.kafka.inspect import group_lag
from rftbus.ground.kafka.topics import create_topics
from rftbus.ground.schemas import Feedback, FeedbackKind, Source, make_codec, topic_context
from rftbus.ground.figures import save_png

KEYS = registry.keys()


def _tables(cfg: Any, wid: str) -> list[Path]:
    """The worker's rocksdb tables (under <state_dir>/streams/<worker>/<app>/tables)."""
    return [d for d in (Path(cfg.state_dir) / "streams" / wid).glob("*/tables") if d.is_dir()]


def _wait(worker: WorkerProcess, done, timeout: float, what: str) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if worker.proc.poll() is not None:
            raise RftbusError(f"the worker exited {worker.proc.returncode} while {what}: {worker.tail()}")
        st = worker.status() or {}
        if st.get("pid") == worker.proc.pid and done(st):
            return st
        time.sleep(0.1)
    raise RftbusError(f"the worker did not finish {what} in {timeout:g} s: {worker.tail()}")


def _settled(cfg: Any, admin: Any, worker: WorkerProcess, timeout: float) -> None:
    """Until the worker's group has committed every record of raw and of the join topic (its index records)."""
    topics = [cfg.topics.raw.name, registry.JOIN.name(cfg)]
    with CommittedOffsets(cfg) as committed:
        deadline = time.monotonic() + timeout
        while group_lag(admin, committed, cfg.streams.app_id, topics).lag > 0:
            if time.monotonic() > deadline or worker.proc.poll() is not None:
                raise RftbusError(f"the worker did not commit its inputs in {timeout:g} s: {worker.tail()}")
            time.sleep(0.5)


def _plot(rows: list[dict], groups: int, path: Path, modes: list[str]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2))
    for i, mode in enumerate(modes):
        ys = [r["ready_s"] for r in rows if r["mode"] == mode]
        ax.bar(i, statistics.median(ys), color={"kept": "tab:green", "rebuilt": "tab:gray"}[mode], alpha=0.7)
        ax.scatter([i] * len(ys), ys, color="black", zorder=3, s=12)
    names = {"kept": "rocksdb kept\n(now)", "rebuilt": "rebuilt from changelogs\n(before)"}
    ax.set_xticks(range(len(modes)), [names[m] for m in modes])
    ax.set_ylabel("kill -9 -> probe curated (s)")
    ax.set_title(f"streams restart with {groups:,} live groups held")
    fig.tight_layout()
    save_png(fig, path, dpi=110)
    plt.close(fig)
    return path


def rss_mb(pid: int) -> dict[str, float]:
    """A process's resident size now and at its peak (VmRSS, VmHWM), in MiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            out[{"VmRSS": "rss_mb", "VmHWM": "peak_mb"}[name]] = round(int(value.split()[0]) / 1024, 1)
    return out


def _held_groups(n: int, samples: int, tokens: int, keep: int, codec: Any, kept: list):
    """`n` live groups, made one at a time (a million do not fit in this process as objects); the first `keep`
    are appended to `kept` (to be graded after the restarts)."""
    for i in range(n):
        g = make_group(rewards=[None] * samples, response_tokens=tokens, source=Source.live, seed=i % 50,
                       group_id=uuid.uuid4().hex)
        if i < keep:
            kept.append(g)
        yield g.group_id.encode(), codec.encode(g, None)  # (make_codec(None): the same bytes for any topic)


def _grades(groups: list, codec: Any):
    for g in groups:
        for k, e in enumerate(g.samples):
            fb = Feedback(experience_id=e.experience_id, kind=FeedbackKind.reward, reward=float(k % 2))
            yield e.experience_id.encode(), codec.encode(fb, None)


def restart(
    ctx: typer.Context,
    groups: int = typer.Option(20_000, help="Live groups held in the table before the kills."),
    samples: int = typer.Option(2, help="Samples per held group."),
    tokens: int = typer.Option(64, help="Response tokens per sample."),
    rounds: int = typer.Option(2, help="Kills per mode (the modes alternate)."),
    modes: str = typer.Option("kept,rebuilt", help="kept (rocksdb kept), rebuilt (removed: the changelogs "
                              "replayed), or both, alternating."),
    grade: int = typer.Option(1000, help="After the last restart, this many held groups are graded (every "
                              "sample): each must be joined and curated once, however late."),
    out: Path = typer.Option(None, help="Folder for the JSON and the PNG (default: a new temporary folder)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Streams restart after kill -9 with a large table (rocksdb kept against rebuilt from the changelogs), the
    worker's resident size idle and holding the table, and late grades joined after the restarts."""
    st = state(ctx)
    tag = uuid.uuid4().hex[:6]
    wid = f"restart{tag}"
    chosen = [m.strip() for m in modes.split(",") if m.strip()]
    if not chosen or set(chosen) - {"kept", "rebuilt"}:
        raise typer.BadParameter(f"--modes {modes!r}: kept, rebuilt or both")
    cfg = st.config(**{f"topics.{k}.name": f"brs{tag}.{k}" for k in KEYS},
                    **{"streams.app_id": f"brs{tag}", "streams.feedback_ttl_s": 7 * 24 * 3600.0,
                       "streams.table_store": "rocksdb"})
    admin = check_reachable(cfg)
    create_topics(cfg, admin)
    say = (lambda *a: None) if as_json else st.err.print
    codec = make_codec(None)
    work = out or Path(tempfile.mkdtemp(prefix="rftbus-bench-restart-"))
    work.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    memory: dict[str, Any] = {}
    to_grade: list = []
    try:
        worker = WorkerProcess(cfg, wid, work / "worker.log")
        worker.wait_ready(120)
        time.sleep(5)
        memory["idle"] = rss_mb(worker.proc.pid)
        say(f"[dim]idle worker: {memory['idle']} ; publishing {groups:,} live groups of {samples} x {tokens} "
            "tokens ...[/]")
        t0 = time.monotonic()
        _produce(cfg, cfg.topics.raw.name, _held_groups(groups, samples, tokens, min(grade, groups), codec, to_grade))
        _wait(worker, lambda s: s.get("held", 0) >= groups, 3 * 3600, f"holding {groups} groups")
        _settled(cfg, admin, worker, 3600)  # every index record joined and committed: the tables on disk are whole
        memory["hold_s"] = round(time.monotonic() - t0, 1)
        memory["holding"] = rss_mb(worker.proc.pid)
        memory["tables_mb"] = round(sum(f.stat().st_size for d in _tables(cfg, wid) for f in d.rglob("*")
                                        if f.is_file()) / 2**20, 1)
        say(f"[dim]held and committed in {memory['hold_s']} s: {memory['holding']}, rocksdb "
            f"{memory['tables_mb']} MiB[/]")
        for k in range(rounds * len(chosen)):
            mode = chosen[k % len(chosen)]
            worker.kill()
            if mode == "rebuilt":
                for d in _tables(cfg, wid):
                    shutil.rmtree(d)
            probe = make_group(rewards=[1.0, 0.0], response_tokens=tokens, seed=k, group_id=uuid.uuid4().hex)
            _produce(cfg, cfg.topics.raw.name, [(probe.group_id.encode(), codec.encode(probe, topic_context(cfg.topics.raw.name)))])
            t0 = time.monotonic()
            worker = WorkerProcess(cfg, wid, work / "worker.log")
            _wait(worker, lambda s, raw=cfg.topics.raw.name + "/": any(a.startswith(raw) for a in s.get("assigned") or ()),
                  3600, "starting")
            assigned_s = time.monotonic() - t0
            s = _wait(worker, lambda s: s.get("curated_groups", 0) >= 1, 3600, "curating the probe")
            ready_s = time.monotonic() - t0
            lost = s.get("rejected_by_reason", {}).get("no_feedback", 0) + s.get("curated_groups", 0) - 1
            _settled(cfg, admin, worker, 3600)  # (the replayed inputs committed: their changes on disk again)
            held_now = _wait(worker, lambda s: s.get("held_groups", 0) >= groups, 3600,
                             "counting the held groups")["held_groups"]
            rows.append({"mode": mode, "assigned_s": round(assigned_s, 2), "ready_s": round(ready_s, 2),
                         "held_released": lost, "held_after": held_now, **rss_mb(worker.proc.pid)})
            say(f"  {mode:8} assigned {assigned_s:6.1f} s, probe curated {ready_s:6.1f} s after the restart; "
                f"{held_now:,} held; {rss_mb(worker.proc.pid)}")
        if to_grade:
            t0 = time.monotonic()
            _produce(cfg, cfg.topics.feedback.name, _grades(to_grade, codec))
            s = _wait(worker, lambda s: s.get("curated_groups", 0) >= 1 + len(to_grade), 3600,
                      f"joining {len(to_grade)} late grades")
            time.sleep(3)
            s = worker.status() or s
            memory["late_graded"] = {"groups": len(to_grade), "joined_groups": s.get("joined_groups"),
                                     "curated_groups": s.get("curated_groups", 0) - 1,
                                     "rejected": s.get("rejected_by_reason", {}),
                                     "join_s": round(time.monotonic() - t0, 1)}
            say(f"[dim]late grades: {memory['late_graded']}[/]")
        worker.stop(60)
    finally:
        _delete_topics(admin, f"brs{tag}")
    med = {m: statistics.median(r["ready_s"] for r in rows if r["mode"] == m) for m in chosen}
    result: dict[str, Any] = {"groups_held": groups, "samples_per_group": samples, "response_tokens": tokens,
                              "rounds": rows, "ready_s_median": med, "memory": memory,
                              "held_released": sum(r["held_released"] for r in rows)}
    if len(med) == 2:
        result["rebuilt_over_kept"] = round(med["rebuilt"] / med["kept"], 2)
    (work / "restart.json").write_text(json.dumps(result, indent=1))
    result["plot"] = str(_plot(rows, groups, work / "restart.png", chosen))
    if as_json:
        st.console.out(json.dumps(result), highlight=False)
        return
    for name, v in result.items():
        if name != "rounds":
            st.console.print(f"{name:22} {v}")
