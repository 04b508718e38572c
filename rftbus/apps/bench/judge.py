"""`rftbus bench judge`: judge_llm's throughput at each concurrency, side by side in one run.

Grades the same answers pointwise (one chat completions call each) against one OpenAI-compatible endpoint at
every `--concurrency` in turn, and once in `group` mode (one call per group of `--group`). Without `--url` it
starts `rftbus serve` in this process on the configured model (the tiny model by default: a stand-in judge whose
grades are noise; what is measured is the client's overlap of requests) and the running broker.
"""

from __future__ import annotations

import json
import time

import typer

from rftbus.apps.bench.context import state


def _run(judge, tasks, answers, group: int) -> tuple[float, int]:
    from rftbus.ground.rewards.aio import resolve
    from rftbus.ground.rewards.base import Response

    t0 = time.perf_counter()
    for i, task in enumerate(tasks):
        resolve(judge.score_group(task, [Response(a) for a in answers[i * group:(i + 1) * group]]))
    return time.perf_counter() - t0, judge.calls


def judge(
    ctx: typer.Context,
    url: str | None = typer.Option(None, help="an OpenAI-compatible /v1 base URL; unset: serve the configured model here"),
    model: str | None = typer.Option(None, help="the judge model's name (default: model.name)"),
    token: str = typer.Option("EMPTY", help="the endpoint's bearer token", envvar="RFTBUS_JUDGE_TOKEN"),
    answers: int = typer.Option(64, help="answers graded per measurement"),
    group: int = typer.Option(8, help="answers per group (task)"),
    concurrency: str = typer.Option("1,16", help="pointwise max_concurrency values, in order"),
    max_tokens: int = typer.Option(4, help="tokens a grade may take"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON line"),
) -> None:
    """Answers graded per second by judge_llm, pointwise at each concurrency and in group mode."""
    from rftbus.ground.rewards.judge_llm import LLMJudge
    from rftbus.ground.schemas import Task

    st = state(ctx)
    cfg = st.config()
    server = None
    if url is None:
        from rftbus.producers.serve.server import BackgroundServer

        server = BackgroundServer(cfg).start()
        url, token = f"{server.url}/v1", (cfg.serve.inference_tokens[0].get_secret_value()
                                          if cfg.serve.inference_tokens else token)
    name = model or cfg.model.name
    tasks = [Task(taskset="bench", prompt=f"{i}+{i}=", answer=str(2 * i)) for i in range(answers // group)]
    texts = [str(i % 19) for i in range(len(tasks) * group)]
    rows: list[dict[str, float | int | str]] = []
    try:
        for c in (int(x) for x in concurrency.split(",")):
            j = LLMJudge(url, name, api_key=token, max_concurrency=c, template="{response}=", max_tokens=max_tokens)
            _run(j, tasks[:1], texts, group)  # warm: the client's connections, the server's first call
            j.calls = 0
            dt, calls = _run(j, tasks, texts, group)
            rows.append({"mode": "pointwise", "concurrency": c, "answers": len(texts), "calls": calls, "seconds": round(dt, 3),
                         "answers_per_s": round(len(texts) / dt, 2)})
        j = LLMJudge(url, name, api_key=token, mode="group", template="{answers}\nGrade {n}:", max_tokens=8 * group)
        _run(j, tasks[:1], texts, group)
        j.calls = 0
        dt, calls = _run(j, tasks, texts, group)
        rows.append({"mode": "group", "concurrency": 1, "answers": len(texts), "calls": calls, "seconds": round(dt, 3),
                     "answers_per_s": round(len(texts) / dt, 2)})
    finally:
        if server is not None:
            server.stop()
    base = float(rows[0]["answers_per_s"])
    for r in rows:
        r["vs_first"] = round(float(r["answers_per_s"]) / base, 2)
    if json_out:
        print(json.dumps({"url": url, "model": name, "rows": rows}))
        return
    for r in rows:
        print(f"{r['mode']:9s} concurrency {r['concurrency']:3d}: {r['answers']} answers in {r['calls']} calls, "
              f"{r['seconds']:.2f} s, {r['answers_per_s']:.1f} answers/s ({r['vs_first']:.2f}x)")
