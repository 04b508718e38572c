"""`rftbus bench serve`: what an agent waits for when it streams from `rftbus serve`: time to first token and
to the whole answer, p50, at several numbers of concurrent clients, each a thread with the OpenAI Python SDK.

The serve process is the real one (`rftbus --config C bench serve` starts `rftbus serve` as a subprocess, with C's model and engine), in front of
the config's Kafka (the embedded broker is started if the config's is not running, and stopped after). Every
answer is recorded on the raw topic before its last chunk, as in production (`serve.record_ack: kafka`).
"""

from __future__ import annotations

import json
import socket
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import typer

from rftbus.apps.bench.context import state
from rftbus.ground.errors import RftbusError
from rftbus.ground.figures import save_png

PROMPTS = ["Name three colours.", "What is 12 plus 30?", "Write one sentence about the sea.",
           "Give a word that rhymes with cat.", "What is the capital of France?", "Count from one to five."]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one(sdk, model: str, prompt: str, max_tokens: int) -> dict[str, float]:
    """One streamed chat completion: seconds to the first content chunk and to the end, tokens received."""
    t0 = time.perf_counter()
    first = None
    tokens = 0
    stream = sdk.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}],
                                         max_tokens=max_tokens, stream=True, stream_options={"include_usage": True},
                                         temperature=0.7)
    for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter() - t0
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    total = time.perf_counter() - t0
    return {"ttft_s": first if first is not None else total, "total_s": total, "tokens": tokens}


def level(url: str, model: str, clients: int, requests: int, max_tokens: int) -> dict[str, Any]:
    """`clients` threads, each sending `requests` streamed completions one after another."""
    import openai

    results: list[dict[str, float]] = []
    errors: list[str] = []
    lock = threading.Lock()

    def client(k: int) -> None:
        sdk = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600)
        for r in range(requests):
            try:
                res = _one(sdk, model, PROMPTS[(k + r) % len(PROMPTS)], max_tokens)
            except openai.OpenAIError as e:
                with lock:
                    errors.append(f"{type(e).__name__}: {e}")
                continue
            with lock:
                results.append(res)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if not results:
        raise RftbusError(f"no answer at {clients} clients: {errors[:3]}")
    ttft = sorted(r["ttft_s"] for r in results)
    total = sorted(r["total_s"] for r in results)
    tokens = sum(r["tokens"] for r in results)
    return {"clients": clients, "answers": len(results), "errors": len(errors), "error_examples": errors[:3],
            "ttft_p50_ms": round(statistics.median(ttft) * 1000, 1), "ttft_max_ms": round(ttft[-1] * 1000, 1),
            "total_p50_ms": round(statistics.median(total) * 1000, 1), "total_max_ms": round(total[-1] * 1000, 1),
            "tokens_per_answer": round(tokens / len(results), 1), "tokens_per_s": round(tokens / wall, 1),
            "wall_s": round(wall, 1)}


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = res["levels"]
    xs = [r["clients"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    ax.plot(xs, [r["ttft_p50_ms"] / 1000 for r in rows], marker="o", label="time to first token, p50")
    ax.plot(xs, [r["total_p50_ms"] / 1000 for r in rows], marker="s", label="whole answer, p50")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_xlabel("concurrent clients (OpenAI SDK, streaming)")
    ax.set_ylabel("seconds")
    ax.set_title(f"rftbus serve, {res['model']} on {res['device']}, {res['max_tokens']} tokens max")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_png(fig, path)
    plt.close(fig)


def bench_serve(
    ctx: typer.Context,
    clients: str = typer.Option("1,8,32", "--clients", help="concurrency levels, comma-separated"),
    requests: int = typer.Option(3, "--requests", min=1, help="streamed answers per client per level"),
    max_tokens: int = typer.Option(64, "--max-tokens", min=1),
    out_png: Path = typer.Option(None, "--plot", help="write the plot here (PNG)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Time to first token and to the whole answer (p50) of `rftbus serve` at 1, 8 and 32 streaming clients."""
    import platform

    from rftbus.apps.bench.processes import ServeProcess
    from rftbus.ground.broker import embedded
    from rftbus.ground.kafka.clients import make_admin
    from rftbus.ground.kafka.topics import create_topics

    st = state(ctx)
    cfg = st.config()
    cfg = cfg.model_copy(update={"serve": cfg.serve.model_copy(update={"host": "127.0.0.1", "port": _free_port(),
                                                                       "weights_wait_s": 0.0})})
    levels = [int(x) for x in clients.split(",") if x.strip()]
    started = cfg.kafka.bootstrap_servers is None and embedded.start(cfg, st.err).started
    proc = None
    try:
        create_topics(cfg, make_admin(cfg))
        log = Path(cfg.state_dir) / "bench-serve.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        st.err.print(f"starting rftbus serve ({cfg.model.name}) ...")
        proc = ServeProcess(cfg, log)
        proc.wait_ready(timeout=600)
        model = cfg.serve.served_model or cfg.model.name
        level(proc.url, model, 1, 1, max_tokens)  # warm-up: first-call allocations out of the figures
        rows = []
        for c in levels:
            st.err.print(f"{c} client(s) x {requests} streamed answers ...")
            rows.append(level(proc.url, model, c, requests, max_tokens))
            r = rows[-1]
            st.err.print(f"  first token p50 {r['ttft_p50_ms']:.0f} ms, whole answer p50 {r['total_p50_ms']:.0f} ms,"
                         f" {r['tokens_per_s']:.0f} tokens/s, {r['errors']} errors")
    finally:
        if proc is not None:
            proc.stop()
        if started:
            embedded.stop(cfg)
    res = {"model": cfg.model.name, "engine": (cfg.serve.engine or cfg.explorer.engine).kind,
           "device": f"{platform.machine()} CPU" if "cuda" not in str(cfg.explorer.engine.device) else "GPU",
           "max_tokens": max_tokens, "requests_per_client": requests, "max_batch": cfg.serve.max_batch,
           "record_ack": cfg.serve.record_ack, "levels": rows}
    if out_png is not None:
        plot(res, out_png)
    if as_json:
        typer.echo(json.dumps(res, indent=2))
        return
    typer.echo(f"{'clients':>7} {'answers':>7} {'first token p50':>16} {'whole p50':>10} {'tokens/s':>9}")
    for r in rows:
        typer.echo(f"{r['clients']:>7} {r['answers']:>7} {r['ttft_p50_ms']:>13.0f} ms {r['total_p50_ms']:>7.0f} ms "
                   f"{r['tokens_per_s']:>9.1f}")
