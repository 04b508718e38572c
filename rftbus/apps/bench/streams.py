"""`rftbus bench streams`: one streams worker's sustained throughput and raw->curated latency at a fixed
load, beside a plain Kafka consume->produce pass-through of the same bytes measured in the same run.
Records are whole groups (n experiences each); rates are in experiences/s."""

from __future__ import annotations

import json
import os
import pstats
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import typer
from confluent_kafka import KafkaError
from confluent_kafka.admin import NewTopic

from rftbus.apps.bench.context import state
from rftbus.ground.errors import RftbusError
from rftbus.ground.kafka import registry
from rftbus.ground.kafka.clients import check_reachable, make_consumer, make_producer
from rftbus.ground.kafka.topics import create_new, create_topics
from rftbus.ground.schemas import make_codec
from rftbus.apps.bench.processes import WorkerProcess, read_all
from rftbus.streams.headers import H_T0
from rftbus.apps.bench.synthetic import make_group
from rftbus.streams.worker import PROFILE_ENV

KEYS = registry.keys()  # every topic, renamed for this bench


def _records(n_exp: int, group: int, tokens: int) -> list[tuple[bytes, bytes]]:
    """Group records (one per `group` experiences), every group with reward variance: all of it is curated."""
    codec = make_codec(None)
    out = []
    rewards = [[1.0, 0.0, 0.5, 0.25, 0.0, 1.0, 0.75, 0.0][i % 8] for i in range(group)]
    for g in range((n_exp + group - 1) // group):
        rec = make_group(rewards=rewards, response_tokens=tokens, seed=g % 50, group_id=uuid.uuid4().hex)
        out.append((rec.group_id.encode(), codec.encode(rec, None)))  # (no registry: the same bytes for any topic)
    return out


def _produce(cfg, topic: str, recs, rate: float | None = None) -> None:
    p = make_producer(cfg)
    t0 = time.perf_counter()
    for i, (k, v) in enumerate(recs):
        while True:
            try:
                p.produce(topic, key=k, value=v)
                break
            except BufferError:
                p.poll(0.05)
        if rate:
            ahead = t0 + (i + 1) / rate - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)
        p.poll(0)
    p.flush(60)


def _baseline(cfg, recs, src: str, dst: str, group: int) -> float:
    """Consume `src` and produce every record to `dst` unchanged: what Kafka costs, nothing else."""
    admin = check_reachable(cfg)
    create_new(admin, [NewTopic(t, cfg.topics.raw.partitions, 1) for t in (src, dst)])
    _produce(cfg, src, recs)
    c = make_consumer(cfg, f"bench-base-{uuid.uuid4().hex[:6]}")
    c.subscribe([src])
    p = make_producer(cfg)
    n, t_first = 0, None
    deadline = time.monotonic() + 120
    while n < len(recs) and time.monotonic() < deadline:
        for m in c.consume(500, 1.0):
            if m.error():
                continue
            if t_first is None:
                t_first = time.perf_counter()
            while True:
                try:
                    p.produce(dst, key=m.key(), value=m.value())
                    break
                except BufferError:
                    p.poll(0.05)
            n += 1
        p.poll(0)
    p.flush(60)
    c.close()
    if t_first is None:
        raise RftbusError(f"baseline: nothing consumed from {src}")
    return (n - 1) * group / (time.perf_counter() - t_first)  # experiences/s


def _cpu_s(pid: int) -> float:
    """utime + stime of a process so far (Linux /proc; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def _drain_rate(cfg, worker: WorkerProcess, expected: int, group: int, timeout: float) -> tuple[float, int, float]:
    """Experiences/s from the outputs' own timestamps (first to last curated group record), and the worker's CPU
    time per curated experience over the drain (robust on a shared machine where wall-clock rates are not):
    the worker's status file carries its process CPU time beside its counters, both taken at one instant,
    so start-up is left out. Progress is watched through that file, so the benchmark does not compete
    with the worker for CPU."""
    first = None
    deadline = time.monotonic() + timeout
    st: dict = {}
    while time.monotonic() < deadline:
        st = worker.status() or {}
        if first is None and "cpu_s" in st:
            first = st
        if st.get("curated", 0) >= expected:
            break
        time.sleep(0.1)
    msgs = [m for r in registry.keys(curated=True) for m in read_all(cfg, getattr(cfg.topics, r).name)]
    ts = sorted(m.timestamp()[1] for m in msgs)
    if not ts:
        raise RftbusError(f"the worker curated nothing within {timeout:g} s (status: {st})")
    n = st.get("curated", 0) - (first or {}).get("curated", 0)
    cpu_ms = (st["cpu_s"] - first["cpu_s"]) * 1000 / n if first is not None and n > 0 else float("nan")
    return (len(ts) - 1) * group / max(1e-3, (ts[-1] - ts[0]) / 1000), len(ts) * group, cpu_ms


def _latency(cfg, recs, rate: float, warmup_s: float = 0.0) -> tuple[list[float], list[float]]:
    """raw -> curated latency per curated group record: (arrival at this reader, the curated record's own
    timestamp = when the worker produced it), both from the raw record's timestamp (header rftbus-t0).
    The reader asks the broker not to hold fetches (fetch.wait.max.ms) and takes whatever one poll
    returns, so it measures the pipeline, not its own batching. Records whose raw timestamp falls in the
    first `warmup_s` of the load are left out of both lists."""
    rows: list[tuple[int, float, float]] = []
    c = make_consumer(cfg, f"bench-lat-{uuid.uuid4().hex[:6]}", **{"auto.offset.reset": "latest",
                                                                    "fetch.wait.max.ms": 5})
    c.subscribe([cfg.topics.curated.name, cfg.topics.curated_priority.name])
    ready, stop = threading.Event(), threading.Event()

    def consume():
        while not stop.is_set():
            m = c.poll(0.05)
            if c.assignment():
                ready.set()
            if m is None:
                continue
            now = time.time() * 1000
            if m.error():
                if m.error().code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(m.error().str())
                continue
            t0 = dict(m.headers() or []).get(H_T0)
            if t0:
                rows.append((int(t0), now - int(t0), m.timestamp()[1] - int(t0)))

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    ready.wait(30)
    time.sleep(1.0)
    start_ms = time.time() * 1000 + warmup_s * 1000
    _produce(cfg, cfg.topics.raw.name, recs, rate)
    deadline = time.monotonic() + 30
    while len(rows) < len(recs) and time.monotonic() < deadline:
        time.sleep(0.2)
    stop.set()
    t.join(5)
    c.close()
    kept = [r for r in rows if r[0] >= start_ms]
    return [r[1] for r in kept], [r[2] for r in kept]


def _delete_topics(admin, prefix: str) -> None:
    """Delete every topic of this run (its name starts with the run's tag: rftbus's, Faust's internal ones,
    the baseline's). Best effort: a failure leaves topics behind, never fails the benchmark."""
    try:
        names = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix)]
        for fut in (admin.delete_topics(names, operation_timeout=30).values() if names else []):
            try:
                fut.result(60)
            except Exception:  # noqa: BLE001
                pass
    except Exception:  # noqa: BLE001
        pass


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def streams(
    ctx: typer.Context,
    experiences: int = typer.Option(12_000, help="Experiences preloaded for the sustained-throughput drain."),
    load: float = typer.Option(1000.0, help="Offered load (experiences/s) for the latency phase."),
    seconds: float = typer.Option(10.0, help="Length of the latency phase (measured part)."),
    warmup: float = typer.Option(2.0, help="Seconds of the offered load before the measured latency phase "
                                 "(after the drain; its records are not counted)."),
    tokens: int = typer.Option(1000, help="Response tokens per experience (each with a logprob)."),
    group: int = typer.Option(8, help="Samples per group (n)."),
    profile: bool = typer.Option(False, "--profile", help="cProfile the worker; print where its time goes."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    keep_topics: bool = typer.Option(False, "--keep-topics", help="Leave the run's topics on the broker."),
) -> None:
    """Streams throughput (one worker, realistic records) and p50/p99 raw->curated latency at a fixed load."""
    st = state(ctx)
    tag = uuid.uuid4().hex[:6]
    cfg = st.config(**{f"topics.{k}.name": f"bench{tag}.{k}" for k in KEYS}, **{"streams.app_id": f"bench{tag}"})
    admin = check_reachable(cfg)
    create_topics(cfg, admin)
    say = (lambda *a: None) if as_json else st.err.print
    try:
        say(f"[dim]building {experiences} experiences of {tokens} tokens ...[/]")
        recs = _records(experiences, group, tokens)
        size = sum(len(v) for _, v in recs) / len(recs)
        say(f"[dim]baseline: plain Kafka consume->produce of the same {len(recs)} group records ...[/]")
        base = _baseline(cfg, recs, f"bench{tag}.base.in", f"bench{tag}.base.out", group)
        say("[dim]preloading raw, starting one worker ...[/]")
        _produce(cfg, cfg.topics.raw.name, recs)
        work = Path(tempfile.mkdtemp(prefix="rftbus-bench-streams-"))
        prof = work / "worker.prof"
        w = WorkerProcess(cfg, f"bench{tag}", work / "worker.log",
                          extra_env={PROFILE_ENV: str(prof)} if profile else None)
        try:
            w.wait_ready(120)
            rate, drained, cpu_ms = _drain_rate(cfg, w, len(recs) * group, group, 600)
            say(f"[dim]drained {drained} at {rate:.0f}/s; latency phase at {load:.0f}/s for {seconds:.0f}s ...[/]")
            lat_recs = _records(int(load * (seconds + warmup)), group, tokens)
            cpu0 = _cpu_s(w.proc.pid)
            t_lat = time.monotonic()
            lat, produced = _latency(cfg, lat_recs, load / group, warmup)
            cpu_share = (_cpu_s(w.proc.pid) - cpu0) / (time.monotonic() - t_lat)
        finally:
            code = w.stop(60)
    finally:
        if not keep_topics:  # each run writes ~0.5 GB (raw, outputs, baseline copies): do not leave it behind
            _delete_topics(admin, f"bench{tag}")
    result: dict[str, Any] = {"experiences_per_s": round(rate, 1), "baseline_experiences_per_s": round(base, 1),
              "ratio_to_baseline": round(rate / base, 3), "worker_cpu_ms_per_experience": round(cpu_ms, 3),
              "p50_ms": round(_pct(lat, 0.5), 1), "p99_ms": round(_pct(lat, 0.99), 1),
              "produced_p50_ms": round(_pct(produced, 0.5), 1), "produced_p99_ms": round(_pct(produced, 0.99), 1),
              "worker_cpu_share_at_load": round(cpu_share, 3), "load_avg_1m": round(os.getloadavg()[0], 2),
              "offered_load_per_s": load, "warmup_s": warmup, "latency_samples": len(lat),
              "drained": drained, "group_record_bytes": round(size), "bytes_per_experience": round(size / group),
              "response_tokens": tokens, "group_size": group,
              "worker_exit": code, "processing_guarantee": cfg.streams.processing_guarantee}
    if profile and prof.exists():
        stats: Any = pstats.Stats(str(prof))  # (total_tt and stats are attributes its stub leaves out)
        total = stats.total_tt
        top = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:15]
        result["profile_top_tottime"] = [
            {"function": f"{Path(f[0]).name}:{f[1]}:{f[2]}", "tottime_s": round(v[2], 2),
             "share": round(v[2] / total, 3)} for f, v in top]
    if as_json:
        st.console.out(json.dumps(result), highlight=False)
        return
    for k, v in result.items():
        if k != "profile_top_tottime":
            st.console.print(f"{k:28} {v}")
    for row in result.get("profile_top_tottime", []):
        st.console.print(f"  {row['share']:6.1%} {row['tottime_s']:7.2f}s  {row['function']}")
