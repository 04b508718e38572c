"""`rftbus bench sizes`: the bus at real response lengths. For each length, in one run on the running broker:
the explorer's bus time per experience against generation with a ~25M-parameter model (`rftbus bench explore`
with that model and every response forced to the length), one streams worker's CPU per token (`rftbus bench
streams`), and each group record's size against the limits it meets (Kafka's default 1 MiB, this broker's and
the producer's message.max.bytes, streams.max_message_bytes). The longest length is not generated (too slow on a CPU), only streamed: a
record past streams.max_message_bytes is rejected `too_large`, which the row says. Samples longer than
streams.max_tokens (8192 by default) are rejected `over_length`; the streams runs here raise it to the length."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import typer

from rftbus.apps.bench.context import state
from rftbus.ground.errors import RftbusError
from rftbus.ground.figures import save_png

MODEL = {"hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 8, "num_attention_heads": 8}
KAFKA_DEFAULT = 1024 * 1024


def _bench(st, args: list[str], env: dict[str, str], timeout_s: float) -> dict:
    cmd = [str(Path(sys.executable).parent / "rftbus"), "--state-dir", str(st.config().state_dir), "bench", *args, "--json"]
    if st.config_path:
        cmd[1:1] = ["--config", str(st.config_path)]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, timeout=timeout_s)
    if out.returncode != 0:
        raise RftbusError(f"`rftbus bench {' '.join(args)}` failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _streams(st, tokens: int, n: int, budget: int, say) -> dict:
    """One worker's drain of about `budget` response tokens in groups of n (at least 8 records)."""
    exps = max(8 * n, budget // tokens // n * n)
    say(f"[dim]{tokens} tokens: streams drain of {exps} experiences ...[/]")
    # streams.max_tokens (8192 by default: longer samples are rejected over_length) raised to the length
    env = {"RFTBUS_STREAMS__MAX_TOKENS": str(tokens + 256)}
    return _bench(st, ["streams", "--experiences", str(exps), "--tokens", str(tokens), "--group", str(n),
                       "--load", str(max(1.0, exps / 20)), "--seconds", "4", "--warmup", "1"], env, 1800)


def _bus_us(cfg, tokens: int, n: int, records: int = 8) -> float:
    """The explorer's bus time per experience for a group of n at this length: encode + produce + ack, timed
    over `records` group records to a throwaway topic."""
    from confluent_kafka.admin import NewTopic

    from rftbus.apps.bench.synthetic import make_group
    from rftbus.ground.kafka.clients import make_admin, make_producer
    from rftbus.ground.kafka.topics import create_new
    from rftbus.ground.schemas import make_codec, topic_context

    topic = f"bench-sizes-{tokens}-{time.monotonic_ns() % 10**6}"
    admin = make_admin(cfg)
    create_new(admin, [NewTopic(topic, 1, 1, config={"max.message.bytes": str(16 * 1024 * 1024)})])
    codec, producer = make_codec(None), make_producer(cfg)
    groups = [make_group(rewards=[1.0, 0.0] * (n // 2), response_tokens=tokens, seed=i) for i in range(records)]
    try:
        t = time.perf_counter()
        for g in groups:
            producer.produce(topic, value=codec.encode(g, topic_context(topic)))
            producer.poll(0)
        assert producer.flush(60) == 0
        return round(1e6 * (time.perf_counter() - t) / (records * n), 1)
    finally:
        admin.delete_topics([topic])


def _record_bytes(tokens: int, n: int) -> int:
    from rftbus.apps.bench.synthetic import make_group
    from rftbus.ground.schemas import make_codec

    return len(make_codec(None).encode(make_group(rewards=[1.0, 0.0] * (n // 2), response_tokens=tokens, seed=0),
                                      None))  # (a size: bytes no topic receives)


def sizes(
    ctx: typer.Context,
    lengths: str = typer.Option("1024,8192", help="Response lengths to generate and stream (tokens)."),
    sized: str = typer.Option("32768,131072", help="Lengths streamed and sized but not generated (a CPU takes "
                              "minutes per thousand tokens): their generation time is bounded below from the "
                              "longest generated length (a decode step only gets slower as the context grows)."),
    n: int = typer.Option(4, help="Samples per group."),
    stream_tokens: int = typer.Option(4_000_000, help="Response tokens per streams drain at each length "
                                      "(at least 8 group records)."),
    out_dir: Path = typer.Option(Path("docs/runs"), help="Where the JSON and the PNG go."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Bus overhead ÷ generation and streams CPU per token at 1k-32k-token responses; record sizes to 128k."""
    st = state(ctx)
    cfg = st.config()
    say = (lambda *a: None) if as_json else st.err.print
    rows = []
    for L in [int(x) for x in lengths.split(",") if x]:
        env = {f"RFTBUS_MODEL__TINY__{k.upper()}": str(v) for k, v in MODEL.items()}
        env["RFTBUS_MODEL__TINY__MAX_POSITION_EMBEDDINGS"] = str(L + 128)
        env["RFTBUS_EXPLORER__SAMPLING__MIN_NEW_TOKENS"] = str(L)
        env["RFTBUS_EXPLORER__TASK_TIMEOUT_S"] = "36000"  # (120 s by default: a long rollout would time out)
        say(f"[dim]{L} tokens: generating one group of {n} with the ~25M model ...[/]")
        t = time.monotonic()
        ex = _bench(st, ["explore", "--tasks", "1", "--n", str(n), "--max-new-tokens", str(L)], env, 3600)
        say(f"[dim]{L} tokens: explore {time.monotonic() - t:.0f} s[/]")
        sm = _streams(st, L, n, stream_tokens, say)
        rows.append({
            "tokens": L, "n": n, "generation_ms_per_experience": round(ex["generation_ms_per_experience"], 1),
            "bus_us_per_experience": round(ex["bus_us_per_experience"], 1),
            "bus_over_generation": ex["overhead_fraction"],
            "bus_us_per_experience_synthetic": _bus_us(cfg, L, n),
            "streams_us_per_token": round(1e6 / (sm["experiences_per_s"] * L), 4),
            "record_bytes": sm["group_record_bytes"]})
    for L in [int(x) for x in sized.split(",") if x]:
        row: dict = {"tokens": L, "n": n, "record_bytes": _record_bytes(L, n)}
        row["bus_us_per_experience_synthetic"] = _bus_us(cfg, L, n)
        gen = [r for r in rows if "generation_ms_per_experience" in r]
        if gen:
            g = gen[-1]
            row["generation_ms_per_experience_at_least"] = round(g["generation_ms_per_experience"] * L / g["tokens"])
            row["bus_over_generation_at_most"] = (row["bus_us_per_experience_synthetic"] / 1000
                                                  / row["generation_ms_per_experience_at_least"])
        if row["record_bytes"] <= cfg.streams.max_message_bytes:  # through a real worker too
            sm = _streams(st, L, n, stream_tokens, say)
            row.update(streams_us_per_token=round(1e6 / (sm["experiences_per_s"] * L), 4),
                       streamed_experiences=sm["drained"])
        rows.append(row)
    limit = cfg.streams.max_message_bytes
    for r in rows:
        r["over_kafka_default_1MiB"] = r["record_bytes"] > KAFKA_DEFAULT
        if r["record_bytes"] > limit:
            r["fits"] = f"no: rejected too_large (> streams.max_message_bytes {limit})"
        else:
            r["fits"] = "yes (streamed)" if "streamed_experiences" in r else "yes (generated and streamed)"
    per_token = rows[-1]["record_bytes"] / rows[-1]["tokens"]  # bytes per response token of the group (n samples)
    result = {"model": MODEL, "rows": rows, "streams_max_message_bytes": limit,
              "largest_tokens_measured_through": max((r["tokens"] for r in rows if r["fits"].startswith("yes")), default=None),
              "largest_response_tokens_under_limit": int(limit / per_token)}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "23-bench-sizes.json").write_text(json.dumps(result, indent=1))
    _plot(rows, out_dir / "23-bench-sizes.png")
    if as_json:
        st.console.out(json.dumps(result), highlight=False)
        return
    for r in rows:
        st.console.print(json.dumps(r))


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gen = [r for r in rows if "bus_over_generation" in r]
    bound = [r for r in rows if "bus_over_generation_at_most" in r]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    a.plot([r["tokens"] for r in gen], [r["bus_over_generation"] for r in gen], "o-", label="measured")
    a.plot([r["tokens"] for r in bound], [r["bus_over_generation_at_most"] for r in bound], "v--", label="upper bound")
    a.axhline(0.01, color="r", ls="--", label="target 0.01")
    a.set(xscale="log", yscale="log", xlabel="response tokens", ylabel="bus ÷ generation", title="explorer")
    a.legend()
    b.plot([r["tokens"] for r in rows], [r["record_bytes"] / 2**20 for r in rows], "o-")
    b.axhline(1, color="gray", ls=":", label="Kafka default 1 MiB")
    b.set(xscale="log", xlabel="response tokens", ylabel="group record (MiB)", title="record size")
    b.legend()
    fig.tight_layout()
    save_png(fig, path, dpi=110)
