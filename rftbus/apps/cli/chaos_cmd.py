"""`rftbus chaos`: the main job under fault injection and load, then a reconciliation by experience id."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from rftbus.apps.cli.context import state


def chaos(
    ctx: typer.Context,
    config: Path = typer.Argument(None, help="Config of the attacked run (default: the global --config)."),
    budget: str = typer.Option("full", "--budget", help="full (make chaos, ~15 min) | ci (a few minutes)."),
    rounds: int = typer.Option(None, "--rounds", min=0, help="Rounds of kill -9 over every process kind."),
    minutes: float = typer.Option(None, "--minutes", min=0.5, help="No new fault starts after this."),
    seed: int = typer.Option(None, "--seed", help="Seed of the poison and burst records."),
    nodes: int = typer.Option(1, "--nodes", help="3: the run's Kafka is a three-node cluster that the run itself "
                              "supervises, and the broker restart becomes five kills of the node leading the loop's "
                              "partitions, three 30 s freezes (SIGSTOP) of the trainer's group coordinator and the "
                              "weights leader, and a rolling restart (stall and ISR recovery measured)."),
    as_json: bool = typer.Option(False, "--json", help="Print the whole result as JSON instead of tables."),
    every_event: bool = typer.Option(False, "--every-event", help="Instead: the streams worker on a scripted input, "
                                     "killed with SIGKILL at every event index in turn (each read, table change, send "
                                     "and commit) and restarted; each time the outputs must equal the run without a "
                                     "kill. ~15 s a case."),
    at: list[int] = typer.Option(None, "--at", min=1, help="--every-event: only these event indices."),
    stride: int = typer.Option(1, "--stride", min=1, help="--every-event: every n-th event index."),
) -> None:
    """Run `rftbus run` on its own broker (under <state_dir>/chaos), kill -9 each process kind in turn,
    restart the broker, poison every input topic, burst above steady state; then drain and reconcile.
    Ends with `chaos: N faults injected, L lost, D duplicated`; exit 1 unless L = D = 0 and every fault
    recovered."""
    if every_event:
        from rftbus.apps.chaos.every_event_run import run

        st = state(ctx)
        if config is not None:
            st.config_path = config
        if run(st.config(), st.console, indices=at or None, stride=stride).failed:
            raise typer.Exit(1)
        return
    from rftbus.apps.chaos.driver import ChaosDriver
    from rftbus.apps.chaos.plan import attacked_config, get_plan
    from rftbus.apps.chaos.report import print_result
    from rftbus.apps.chaos.settle import available

    st = state(ctx)
    if config is not None:
        st.config_path = config
    plan = get_plan(budget, nodes=nodes, kill_rounds=rounds, max_minutes=minutes, seed=seed)
    base = st.config()
    cfg = attacked_config(base, plan, serve=available("rftbus.producers.serve.service"))
    console = st.err if as_json else st.console
    console.print(f"chaos ({plan.name}, {plan.nodes} Kafka node(s)): {plan.kill_rounds} kill round(s), "
                  f"{plan.broker_restarts} broker restart(s), {plan.leader_kills} leader kill(s), "
                  f"{plan.coordinator_freezes + plan.leader_freezes} node freeze(s), "
                  f"{plan.rolling_restarts} rolling restart(s), "
                  f"burst of {plan.burst_groups} groups, faults for up to {plan.max_minutes:g} min; "
                  f"state in {cfg.state_dir}")
    res = ChaosDriver(cfg, plan, console).run()
    doc = res.to_json()
    (cfg.state_dir / "chaos.json").write_text(json.dumps(doc, indent=1, default=str))
    if as_json:
        print(json.dumps(doc, indent=1, default=str))
    else:
        print_result(res, console)
    if not res.passed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(chaos)
