"""`rftbus bench explore`: the explorer's bus overhead (encode + produce per experience) against
generation time, measured in one run of a real explorer on throwaway topics."""

from __future__ import annotations

import json
import time
import uuid

import typer

from rftbus.apps.bench.context import state
from rftbus.ground.kafka.clients import check_reachable, make_producer
from rftbus.ground.kafka.topics import create_topics


def explore(
    ctx: typer.Context,
    tasks: int = typer.Option(32, "--tasks", min=1, help="Tasks (groups) to roll out."),
    n: int = typer.Option(8, "--n", min=1, help="Samples per group."),
    max_new_tokens: int = typer.Option(16, "--max-new-tokens", min=1),
    admission: bool = typer.Option(False, "--admission/--no-admission", help="Also time admission checks (lag reads)."),
    batch_tasks: int | None = typer.Option(None, "--batch-tasks", min=1,
                                           help="Tasks per engine call (explorer.batch_tasks; default: the config's)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Roll out TASKS groups with the configured engine; report bus time ÷ generation time."""
    st = state(ctx)
    u = uuid.uuid4().hex[:8]
    keys = ("tasks", "raw", "rejected", "expert", "weights")
    cfg = st.config(**{f"topics.{k}.name": f"bench-explore-{k}-{u}" for k in keys},
                    **{"explorer.group_id": f"bench-explore-{u}", "explorer.max_tasks": tasks, "rl.group_size": n,
                       "explorer.sampling.max_new_tokens": max_new_tokens, "explorer.admission": admission,
                       "explorer.id": f"bench-{u}", "rl.batch_groups": 10 ** 6,
                       **({"explorer.batch_tasks": batch_tasks} if batch_tasks else {})})
    admin = check_reachable(cfg)
    create_topics(cfg, admin)
    from rftbus.producers.explorer import Explorer
    from rftbus.ground.schemas import make_codec, topic_context
    from rftbus.ground.tasksets import get_taskset

    try:
        codec, producer = make_codec(None), make_producer(cfg)
        for task in get_taskset(cfg.taskset.name, **cfg.taskset.params).tasks("train", tasks, seed=int(time.time())):
            producer.produce(cfg.topics.tasks.name, key=task.task_id, value=codec.encode(task, topic_context(cfg.topics.tasks.name)))
        producer.flush(30)
        explorer = Explorer(cfg, report=lambda s: None)
        with st.err.status(f"rolling out {tasks} groups of {n} ..."):
            t0 = time.perf_counter()
            explorer.run()
            wall = time.perf_counter() - t0
    finally:
        admin.delete_topics([cfg.topics.all()[k].name for k in keys])
    t = explorer.t
    bus = t.encode_s + t.produce_s
    out = {
        "engine": cfg.explorer.engine.kind, "model": cfg.model.path or "tiny", "groups": t.groups,
        "experiences": t.experiences, "n": n, "max_new_tokens": max_new_tokens,
        "generation_s": round(t.generate_s, 4), "encode_s": round(t.encode_s, 4), "produce_s": round(t.produce_s, 4),
        "bus_s": round(bus, 4), "overhead_fraction": bus / t.generate_s if t.generate_s else None,
        "bus_us_per_experience": 1e6 * bus / max(t.experiences, 1),
        "generation_ms_per_experience": 1e3 * t.generate_s / max(t.experiences, 1),
        "commit_s": round(t.commit_s, 4), "admission_s": round(t.admission_s, 4),
        "loop_overhead_fraction": (bus + t.commit_s + t.admission_s) / t.generate_s if t.generate_s else None,
        "wall_s": round(wall, 3), "batch_tasks": cfg.explorer.batch_tasks,
        "experiences_per_s": round(t.experiences / wall, 1) if wall else None,
    }
    if as_json:
        st.console.out(json.dumps(out), highlight=False)
        return
    st.console.print(f"{t.experiences} experiences in {t.groups} groups ({out['experiences_per_s']}/s, "
                     f"{cfg.explorer.batch_tasks} tasks per engine call): generation {t.generate_s:.3f}s, "
                     f"bus (encode {t.encode_s * 1e3:.1f} ms + produce {t.produce_s * 1e3:.1f} ms) = "
                     f"{out['bus_us_per_experience']:.0f} µs/experience, overhead {out['overhead_fraction']:.4f} "
                     f"(target < 0.01); with commits + admission {out['loop_overhead_fraction']:.4f}")
