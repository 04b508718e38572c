"""`rftbus bench sync`: weight-sync latency, from a WeightVersion acknowledged on the weights topic to
every follower having generated with it, beside the floor of writing + reading that checkpoint.

Followers are separate processes (rftbus/apps/bench/sync_follower.py): `explorer` uses the explorer's own
WeightFollower + transformers engine, `minimal` a bare poll → load_weights → load_state_dict →
generate. The bench uses its own weights topic and store folder, so it never disturbs a real run.
"""

from __future__ import annotations

from typing import Any

import json
import queue
import statistics
import subprocess
import sys
import threading
import time
import uuid

import typer
from rich.progress import Progress

from rftbus.apps.bench.context import state
from rftbus.ground.config import write_config
from rftbus.ground.errors import RftbusError


def _model_folder(cfg, name: str) -> str:
    """A preset's (converted) folder, or the folder given."""
    from rftbus.ground.models.source import PRESETS, model_folder

    if name in PRESETS:
        folder = model_folder(cfg.model.model_copy(update={"name": name, "path": None, "gguf_file": None}))
        assert folder is not None
        return folder
    return name


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def _reader(proc: subprocess.Popen, idx: int, out: queue.Queue) -> None:
    assert proc.stdout is not None  # (started with stdout=PIPE)
    for line in proc.stdout:
        try:
            out.put((idx, json.loads(line)))
        except json.JSONDecodeError:
            continue


def sync(
    ctx: typer.Context,
    followers: int = typer.Option(2, "--followers", min=1, help="follower processes (explorers)"),
    versions: int = typer.Option(20, "--versions", min=2, help="weight versions to publish"),
    kind: str = typer.Option("explorer", "--kind", help="explorer (the explorer's WeightFollower + engine) | minimal"),
    hidden_size: int = typer.Option(None, "--hidden-size", help="tiny model width (bigger = bigger checkpoint)"),
    layers: int = typer.Option(None, "--layers", help="tiny model layers"),
    model_name: str = typer.Option(None, "--model", help="a pretrained model instead of the tiny one: a preset "
                                   "name (smollm2-135m-instruct) or a Hugging Face folder"),
    lora: int = typer.Option(0, "--lora", min=0, help="publish LoRA adapter versions of this rank (attention "
                             "projections) instead of full weights; 0 = full weights"),
    gap_s: float = typer.Option(0.3, "--gap", help="seconds between versions"),
    as_json: bool = typer.Option(False, "--json", help="print p50_s, p99_s, floor_s, ... as JSON"),
) -> None:
    """Weight-sync latency p50/p99 vs. the checkpoint write+read floor (target: p50 <= 2x floor)."""
    import torch

    from rftbus.ground.kafka.clients import check_reachable, make_producer
    from rftbus.ground.kafka.topics import create_topics
    from rftbus.ground.models.loading import load_policy, load_tokenizer
    from rftbus.ground.models.config import LoraSpec
    from rftbus.ground.models.lora import version_payload, wrap
    from rftbus.ground.schemas import WeightVersion, make_codec, topic_context
    from rftbus.ground.weights import WeightStore, load_weights

    if kind not in ("explorer", "minimal"):
        raise RftbusError(f"--kind must be explorer or minimal, not {kind!r}")
    st = state(ctx)
    u = uuid.uuid4().hex[:8]
    folder = _model_folder(st.config(), model_name) if model_name else None
    cfg = st.config(**{"topics.weights.name": f"bench-sync-weights-{u}", "model.name": f"bench-{u}",
                       "model.path": folder, "model.tiny.hidden_size": hidden_size, "model.tiny.intermediate_size":
                       2 * hidden_size if hidden_size else None, "model.tiny.num_hidden_layers": layers})
    admin = check_reachable(cfg)
    create_topics(cfg, admin)
    work = cfg.state_dir / "bench-sync" / u
    work.mkdir(parents=True, exist_ok=True)
    # the followers believe only records in the configured store (rftbus/ground/weights/admit.py)
    cfg = cfg.model_copy(update={"trainer": cfg.trainer.model_copy(update={"store_url": str(work / "weights")})})
    cfg_path = write_config(cfg, work / "config.yaml")
    tok = load_tokenizer(cfg.model)
    model = load_policy(cfg.model, tok)
    if lora:
        model = wrap(model, LoraSpec(r=lora, alpha=2 * lora))
    full_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    store = WeightStore(str(cfg.trainer.store_url))
    producer = make_producer(cfg, **{"linger.ms": 0})
    ser = make_codec(cfg.schema_registry.url, cfg.schema_registry.client).serializer(WeightVersion)
    events: queue.Queue = queue.Queue()
    procs = [subprocess.Popen([sys.executable, "-m", "rftbus.apps.bench.sync_follower", kind, str(cfg_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for _ in range(followers)]
    for i, p in enumerate(procs):
        threading.Thread(target=_reader, args=(p, i, events), daemon=True).start()
    latencies, floors, writes, reads = [], [], [], []
    try:
        ready: set[int] = set()
        deadline = time.monotonic() + 120
        while len(ready) < followers:
            try:
                idx, ev = events.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise RftbusError("bench sync: followers did not start within 120 s") from None
            if ev.get("ready"):
                ready.add(idx)
        n_bytes = 0
        with Progress(console=st.err, transient=True) as bar:
            task = bar.add_task("publishing weight versions", total=versions)
            for v in range(1, versions + 1):
                with torch.no_grad():
                    for prm in model.parameters():
                        if prm.requires_grad:  # every weight; with LoRA the adapter's alone
                            prm.add_(torch.randn_like(prm) * 1e-3)
                t0 = time.perf_counter()
                tensors, meta = version_payload(model)
                saved = store.save(cfg.model.name, v, tensors, meta)
                t1 = time.perf_counter()
                load_weights(saved.uri, saved.sha256)  # the read half of the floor, same file, same disk
                t2 = time.perf_counter()
                n_bytes = saved.bytes
                rec = WeightVersion(model=cfg.model.name, version=v, step=v, uri=saved.uri, sha256=saved.sha256,
                                    bytes=saved.bytes, format=(meta or {}).get("rftbus.format", "safetensors"))
                producer.produce(cfg.topics.weights.name, key=cfg.model.name.encode(),
                                 value=ser(rec, topic_context(cfg.topics.weights.name)))
                producer.flush(30)
                t_pub = time.time()
                seen: dict[int, float] = {}
                while len(seen) < followers:
                    try:
                        idx, ev = events.get(timeout=30)
                    except queue.Empty:
                        raise RftbusError(f"bench sync: version {v} not picked up by every follower in 30 s") from None
                    if ev.get("version") == v:
                        seen[idx] = ev["t"]
                latencies.append(max(seen.values()) - t_pub)
                writes.append(t1 - t0)
                reads.append(t2 - t1)
                floors.append(t2 - t0)
                bar.advance(task)
                time.sleep(gap_s)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    result: dict[str, Any] = {
        "kind": kind, "followers": followers, "versions": versions, "checkpoint_bytes": n_bytes,
        "model": model_name or "tiny", "lora_rank": lora, "model_bytes": full_bytes,
        "bytes_share": n_bytes / full_bytes,
        "p50_s": statistics.median(latencies), "p99_s": _pct(latencies, 0.99), "max_s": max(latencies),
        "floor_s": statistics.median(floors), "write_s": statistics.median(writes), "read_s": statistics.median(reads),
    }
    result["p50_over_floor"] = result["p50_s"] / result["floor_s"] if result["floor_s"] > 0 else float("inf")
    if as_json:
        st.console.out(json.dumps(result))
        return
    st.console.print(
        f"sync ({kind}, {result['model']}{f', LoRA r={lora}' if lora else ''}, {followers} follower(s), {versions} "
        f"versions of {n_bytes / 1e6:.2f} MB = {100 * result['bytes_share']:.2f} % of the model): "
        f"p50 {result['p50_s'] * 1e3:.1f} ms, p99 {result['p99_s'] * 1e3:.1f} ms; floor (write+read) "
        f"{result['floor_s'] * 1e3:.1f} ms -> p50 = {result['p50_over_floor']:.2f}x floor")


__all__ = ["sync"]
