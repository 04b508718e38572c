"""`rftbus bench ...`: benchmarks whose figures go to docs/BENCHMARKS.md.

Each benchmark lives in its own module of rftbus.apps.bench (outside every runtime path) and is registered
here with one line.
"""

from __future__ import annotations

import typer

app = typer.Typer(help="Benchmarks (figures in docs/BENCHMARKS.md); each has --json.", no_args_is_help=True)

from rftbus.apps.bench import async_speedup, broker, engines, explore, judge, late_feedback, peer, prefill, restart, serve, sizes, stale_rollouts, step, streams, studio, sync, synthesis, verifiers  # noqa: E402  (after `app` exists)

app.command("async")(async_speedup.bench_async)
app.command("broker")(broker.broker)
app.command("explore")(explore.explore)
app.command("engines")(engines.engines)
app.command("streams")(streams.streams)
app.command("restart")(restart.restart)
app.command("sizes")(sizes.sizes)
app.command("sync")(sync.sync)
app.command("serve")(serve.bench_serve)
app.command("studio")(studio.bench_studio)
app.command("verifiers")(verifiers.verifiers)
app.command("judge")(judge.judge)
app.command("step")(step.step)
app.command("peer")(peer.peer)
app.command("prefill")(prefill.prefill)
app.command("late-feedback")(late_feedback.bench_late_feedback)
app.command("synthesis")(synthesis.bench_synthesis)
app.command("stale-rollouts")(stale_rollouts.bench_stale_rollouts)
