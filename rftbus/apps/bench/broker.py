"""`rftbus bench broker`: the embedded Kafka node's own CPU, with rftbus's lean settings against Kafka's stock
ones, side by side in one run (rounds alternate the two, each on a fresh node and folder).

Why it matters: on a two-core machine every CPU-second the broker spends is one the trainer and the explorers
do not get, and most of a node's time is idle (nothing to fetch). Per round and setting: the CPU to start
(launch to answering), a burst (`--messages` records of 300 bytes written and read back by one group), and the
CPU of `--idle` seconds with no client connected, as a share of one core.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import typer

from rftbus.apps.bench.context import state
from rftbus.ground.config import Config
from rftbus.ground.figures import save_png

# Kafka's own defaults for what rftbus changes (rftbus/ground/broker/node_config.py and config BrokerConfig.jvm_opts)
STOCK = {"jvm_opts": ["-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"], "properties": {"metadata.max.idle.interval.ms": 500}}


def _cpu_s(pid: int) -> float:
    text = Path(f"/proc/{pid}/stat").read_text()
    f = text[text.rindex(")") + 2:].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _burst(bootstrap: str, n: int) -> float:
    """Write n records and read them back in one group; the seconds it took."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: a dropped client cancels its own request
    admin.create_topics([NewTopic("bench", 4, 1)])["bench"].result(30)
    t0 = time.perf_counter()
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce("bench", b"x" * 300, key=str(i).encode())
        if i % 1000 == 0:
            p.poll(0)
    if p.flush(60):
        raise TimeoutError("the burst's records were not all acknowledged within 60 s")
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "auto.offset.reset": "earliest"})
    try:
        c.subscribe(["bench"])
        got, deadline = 0, time.time() + 120
        while got < n and time.time() < deadline:
            got += sum(1 for m in c.consume(1000, 1.0) if not m.error())
    finally:
        c.close()
    if got < n:
        raise TimeoutError(f"read {got} of {n} records back within 120 s")
    return time.perf_counter() - t0


def one(cfg: Config, setting: dict[str, Any], messages: int, idle_s: float) -> dict[str, float]:
    from rftbus.ground.broker import embedded

    cfg = cfg.model_copy(update={"broker": cfg.broker.model_copy(update=setting)})
    t0 = time.perf_counter()
    st = embedded.start(cfg)
    try:
        pid = st.pid
        if pid is None:
            raise RuntimeError(f"the bench node on port {cfg.broker.port} answered but wrote no pid")
        ready_s, start_cpu = time.perf_counter() - t0, _cpu_s(pid)
        burst_s = _burst(cfg.broker.bootstrap, messages)
        after_burst = _cpu_s(pid)
        time.sleep(idle_s)
        idle_cpu = _cpu_s(pid) - after_burst
    finally:
        embedded.stop(cfg)
    return {"ready_s": round(ready_s, 2), "start_cpu_s": round(start_cpu, 2), "burst_s": round(burst_s, 2),
            "burst_cpu_s": round(after_burst - start_cpu, 2), "idle_core_share": round(idle_cpu / idle_s, 4)}


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [("start_cpu_s", "CPU to start (s)"), ("burst_cpu_s", "CPU for the burst (s)"),
            ("idle_core_share", "idle: share of one core")]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
    for ax, (k, title) in zip(axes, keys):
        names = list(res["settings"])
        vals = [[r[k] for r in res["rounds"][n]] for n in names]
        ax.bar(names, [statistics.median(v) for v in vals], color=["#999999", "#2a7ab0"])
        for i, v in enumerate(vals):
            ax.scatter([i] * len(v), v, color="black", s=12, zorder=3)
        ax.set_title(title, fontsize=10)
    fig.suptitle(f"embedded Kafka {res['kafka_version']} node: Kafka's stock settings vs rftbus's "
                 f"({len(res['rounds']['stock'])} rounds, dots)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_png(fig, path, dpi=110)
    plt.close(fig)


def broker(
    ctx: typer.Context,
    rounds: int = typer.Option(3, "--rounds", min=1, help="rounds; each starts both settings once, alternating"),
    messages: int = typer.Option(20000, "--messages", min=1, help="records in each burst"),
    idle_s: float = typer.Option(30.0, "--idle", min=5, help="seconds of idle CPU measured after the burst"),
    port: int = typer.Option(19990, "--port", help="the bench node's port (and port + 1 for its controller)"),
    plot_path: Path = typer.Option(None, "--plot", help="write a PNG of the figures here"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """CPU of the embedded broker: Kafka's stock JVM and no-op interval against rftbus's defaults."""
    st = state(ctx)
    base = st.config()
    ours = {"jvm_opts": base.broker.jvm_opts, "properties": base.broker.properties}
    settings = {"stock": STOCK, "rftbus": ours}
    root = Path(tempfile.mkdtemp(prefix="rftbus-bench-broker-"))
    res: dict[str, Any] = {"kafka_version": base.broker.kafka_version, "messages": messages, "idle_s": idle_s,
                           "settings": settings, "rounds": {n: [] for n in settings}}
    libs = base.broker.libs_dir or base.state_dir / "kafka" / f"libs-{base.broker.kafka_version}"
    try:
        for r in range(rounds):
            for name, setting in (settings.items() if r % 2 == 0 else reversed(settings.items())):
                cfg = base.model_copy(update={"state_dir": root / f"{name}-{r}", "broker": base.broker.model_copy(
                    update={"port": port, "controller_port": None, "nodes": 1, "libs_dir": libs})})
                out = one(cfg, setting, messages, idle_s)
                res["rounds"][name].append(out)
                st.err.print(f"round {r + 1}/{rounds} {name:<7} {out}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    res["median"] = {n: {k: statistics.median(x[k] for x in rs) for k in rs[0]} for n, rs in res["rounds"].items()}
    if plot_path is not None:
        plot(res, plot_path)
    if as_json:
        typer.echo(json.dumps(res, indent=2))
        return
    for n, m in res["median"].items():
        typer.echo(f"{n:<7} start {m['start_cpu_s']:5.2f} CPU-s ({m['ready_s']:.1f} s)  burst {m['burst_cpu_s']:5.2f} "
                   f"CPU-s ({m['burst_s']:.2f} s)  idle {100 * m['idle_core_share']:5.1f} % of a core")
