"""How much chaos: named budgets (a full run for `make chaos`, a small one for CI) and the few config
overrides that make the toy run drainable and bounded.

The overrides never loosen a guarantee: they shorten timeouts (incomplete groups and unanswered live
experiences are rejected sooner, so a drain ends in seconds), raise the restart allowance (a child
killed on purpose must come back), and keep the held-out eval out of the way of the faults.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace


@dataclass(frozen=True)
class ChaosPlan:
    name: str
    kill_rounds: int  # rounds of kill -9 over every process kind (round 1 one kind at a time, later all at once)
    broker_restarts: int  # kill -9 of the broker + start on the same data folder
    burst_groups: int  # synthetic GRPO groups produced to raw at once (load above steady state)
    live_requests: int  # completions + feedback through `serve` (when it is part of the run)
    warmup_steps: int  # trainer steps before the first fault
    settle_s: float  # quiet time after a fault has recovered, before the next one
    recover_timeout_s: float  # a killed kind must be back (and the trainer stepping) within this
    drain_timeout_s: float
    max_minutes: float  # bound of the fault phase: past it, no new fault starts and the drain begins
    tasks: int | None = None  # run.tasks override (None: the config's)
    seed: int = 0
    nodes: int = 1  # 3: the run's broker is a three-node cluster, attacked by the two faults below instead
    leader_kills: int = 0  # (nodes 3) kill -9 of the node leading the loop's partitions (the run restarts it)
    rolling_restarts: int = 0  # (nodes 3) controlled restart of every node in turn
    coordinator_freezes: int = 0  # (nodes 3) SIGSTOP of the node coordinating the trainer's group for freeze_s
    leader_freezes: int = 0  # (nodes 3) SIGSTOP of the node leading the weights partition for freeze_s
    freeze_s: float = 30.0

    def to_json(self) -> dict:
        return asdict(self)


PLANS = {
    "full": ChaosPlan("full", kill_rounds=3, broker_restarts=1, burst_groups=400, live_requests=40,
                      warmup_steps=5, settle_s=15.0, recover_timeout_s=300.0, drain_timeout_s=240.0,
                      max_minutes=9.0),
    "ci": ChaosPlan("ci", kill_rounds=1, broker_restarts=1, burst_groups=60, live_requests=8,
                    warmup_steps=2, settle_s=2.0, recover_timeout_s=240.0, drain_timeout_s=150.0,
                    max_minutes=3.0, tasks=600),
}


def get_plan(name: str, nodes: int = 1, **changes) -> ChaosPlan:
    """A named budget; with `nodes` 3 its broker restart becomes five leader kills, two freezes of the
    trainer's group coordinator, one of the weights leader and a rolling restart: eleven node faults, eight of
    them deaths the run's supervisor restarts (with its default per-node budget, #37)."""
    from rftbus.ground.errors import RftbusError

    if name not in PLANS:
        raise RftbusError(f"unknown chaos budget {name!r}; choose one of {', '.join(PLANS)}")
    plan = replace(PLANS[name], **{k: v for k, v in changes.items() if v is not None})
    if nodes == 3:
        plan = replace(plan, nodes=3, broker_restarts=0, leader_kills=5, rolling_restarts=1, coordinator_freezes=2,
                       leader_freezes=1, max_minutes=plan.max_minutes + 8)
    elif nodes != 1:
        raise RftbusError(f"--nodes is 1 or 3, not {nodes}")
    return plan


def run_overrides(plan: ChaosPlan, serve: bool) -> dict[str, object]:
    """Dotted config overrides for the attacked run (documented in docs/RELIABILITY.md)."""
    out: dict[str, object] = {
        "run.max_minutes": plan.max_minutes + 20,  # a safety net only: the driver stops the run itself
        "run.max_steps": None,
        "run.target_eval_reward": None,
        "run.max_restarts": 1000,  # children killed on purpose must come back; the driver bounds the faults
        # (the Kafka nodes keep the default per-node budget: the driver spreads their deaths within it)
        "run.eval_every_versions": 1_000_000,  # eval at start and end only
        "run.eval_n": 16,
        "run.serve": serve,
        "streams.feedback_ttl_s": 150.0,  # a live group without feedback is rejected in 150 s: the live_join fault
        # grades its answers after serve and streams came back from kill -9, ~20-30 s on two cores alone but past
        # 60 s beside two other whole runs (7 of 8 grades came after a 60 s TTL; within the ci drain's 150 s)
    }
    if plan.tasks is not None:
        out["run.tasks"] = plan.tasks
    if plan.nodes == 3:
        # Demonstrations for the whole fault phase: with the ci plan's 600 tasks, 32 passes last the toy trainer
        # ~300 steps, and the node faults begin at about that step; after it the trainer stepped only on the RL
        # groups that pass the streams' filters, 15-40 s apart with no fault at all, and each fault's measured
        # stall was mostly that gap (docs/RELIABILITY.md, the runs of #46).
        out["run.expert_epochs"] = 128
    return out


def with_overrides(cfg, dotted: dict[str, object]):
    """A copy of `cfg` with dotted keys set (validated like any config)."""
    from rftbus.ground.config import Config

    data = cfg.model_dump()
    for key, value in dotted.items():
        node = data
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return Config.model_validate(data)


def ephemeral_low() -> int:
    try:
        return int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port_pair(host: str = "127.0.0.1", n: int = 2) -> int:
    """A port p with p + 1 .. p + n - 1 also free (the embedded broker's listener and controller; a
    cluster's two per node), below the ephemeral range: while the broker is down, a client reconnecting to a
    port inside that range can be handed the very same port as its source and connect to itself, and the
    restart finds it taken."""
    import random
    import socket

    top = max(ephemeral_low() - n, 12000)
    for _ in range(200):
        p = random.randint(10000, top)
        try:
            for port in range(p, p + n):
                with socket.socket() as s:
                    s.bind((host, port))
        except OSError:
            continue
        return p
    from rftbus.ground.errors import RftbusError

    raise RftbusError("no free port pair for the chaos run's broker")


def attacked_config(base, plan: ChaosPlan, serve: bool):
    """The chaos run's config: the user's config + the overrides above, in a fresh state folder under
    the base one (`<state_dir>/chaos`), with its own broker ports (reusing the base folder's broker jars)."""
    import shutil

    from rftbus.ground.broker import embedded
    from rftbus.ground.errors import RftbusError

    state = base.state_dir / "chaos"
    if state.exists():
        previous = with_overrides(base, {"state_dir": str(state)})
        pid = embedded.running_pid(previous)
        if pid is not None:
            raise RftbusError(f"another chaos run is using {state} (its broker, pid {pid}, is running); "
                              "wait for it or stop it first")
        shutil.rmtree(state)
    state.mkdir(parents=True)
    libs = base.broker.libs_dir or base.state_dir / "kafka" / f"libs-{base.broker.kafka_version}"
    port = free_port_pair(base.broker.host, 2 * plan.nodes)
    return with_overrides(base, {
        **run_overrides(plan, serve), "state_dir": str(state), "kafka.bootstrap_servers": None,
        "broker.port": port, "broker.controller_port": None, "broker.libs_dir": str(libs), "broker.nodes": plan.nodes,
        "serve.port": free_port_pair(base.serve.host),
    })
