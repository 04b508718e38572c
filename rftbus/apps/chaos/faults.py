"""The process faults: kill -9 a child of `rftbus run` by kind, wait for the supervisor to bring it back,
and kill -9 the broker itself and start it again on the same data folder.

Children are found as the run's own child processes (their argv names the subcommand), not through
status files, so a kill always hits the live process; readiness is read from the status files the
children write (a restarted child writes its new pid there once it is working again).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

from rftbus.ground.config import Config
from rftbus.ground.status import read_statuses
from rftbus.ground.status import trainer_step as status_trainer_step

KINDS = ("explorer", "streams", "trainer", "analytics", "serve")
SUBCOMMAND_KIND = {"explore": "explorer", "streams": "streams", "train": "trainer", "analytics": "analytics",
                   "serve": "serve"}
STATUS_ROLE = {"explorer": "explorer", "streams": "streams", "trainer": "trainer", "analytics": "analytics",
               "serve": "serve"}


@dataclass
class Fault:
    """One injected fault and what became of it."""

    kind: str  # kill:<process kind> | broker_restart | poison:<topic key> | burst
    detail: str
    at_s: float  # seconds since the chaos run started
    recovered_s: float | None = None  # how long until the system worked again (None: not measured)
    ok: bool = True
    notes: list[str] = field(default_factory=list)
    metrics: dict[str, float | None] = field(default_factory=dict)  # a cluster fault's stall and ISR recovery

    def to_json(self) -> dict:
        return {"kind": self.kind, "detail": self.detail, "at_s": round(self.at_s, 1),
                "recovered_s": None if self.recovered_s is None else round(self.recovered_s, 1),
                "ok": self.ok, "notes": self.notes, **({"metrics": self.metrics} if self.metrics else {})}


def kind_of(argv: list[str]) -> str | None:
    """`python -m rftbus --config X <subcommand> ...` -> the process kind."""
    if "--config" not in argv:
        return None
    i = argv.index("--config") + 2
    return SUBCOMMAND_KIND.get(argv[i]) if i < len(argv) else None


def children(run_pid: int) -> dict[str, list[psutil.Process]]:
    """The run's live children by kind (zombies of killed ones are not live)."""
    out: dict[str, list[psutil.Process]] = {k: [] for k in KINDS}
    try:
        kids = psutil.Process(run_pid).children()
    except psutil.NoSuchProcess:
        return out
    for p in kids:
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            kind = kind_of(p.cmdline())
        except psutil.Error:
            continue
        if kind:
            out[kind].append(p)
    return out


def kill9(proc: psutil.Process) -> None:
    """SIGKILL the child's whole process group (each child is a session leader: its sandboxes and
    helpers die with it, as on a machine failure)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            proc.kill()
        except psutil.Error:
            pass


def is_ready(kind: str, status: dict | None) -> bool:
    """A restarted child is working again once its status file (with its new pid) says so."""
    if status is None:
        return False
    state = status.get("state")
    if kind == "streams":
        return bool(status.get("assigned"))
    if kind == "explorer":
        return state in ("running", "waiting")
    if kind == "trainer":
        return state in ("training", "waiting")
    return state not in ("starting", "stopped", "failed")


def status_of(state_dir, kind: str, pid: int) -> dict | None:
    for st in read_statuses(state_dir, STATUS_ROLE[kind]):
        if st.get("pid") == pid:
            return st
    return None


def wait_back(run_pid: int, state_dir, kind: str, old_pids: set[int], timeout_s: float,
              still_running: Callable[[], bool] = lambda: True, no_status_grace_s: float = 20.0) -> int | None:
    """The new pid of `kind` once it is ready, or None at the deadline. A kind that writes no status
    file counts as ready after `no_status_grace_s` alive."""
    deadline = time.monotonic() + timeout_s
    first_seen: dict[int, float] = {}
    while time.monotonic() < deadline and still_running():
        for p in children(run_pid)[kind]:
            if p.pid in old_pids:
                continue
            first_seen.setdefault(p.pid, time.monotonic())
            st = status_of(state_dir, kind, p.pid)
            if is_ready(kind, st):
                return p.pid
            if (st is None and not read_statuses(state_dir, STATUS_ROLE[kind])
                    and time.monotonic() - first_seen[p.pid] > no_status_grace_s):
                return p.pid
        time.sleep(0.5)
    return None


def trainer_step(state_dir) -> int:
    return status_trainer_step(read_statuses(state_dir, "trainer"))


def wait_trainer_step(state_dir, beyond: int, timeout_s: float, still_running: Callable[[], bool] = lambda: True) -> bool:
    """True once the trainer reports a step past `beyond` (the loop turns again after a fault)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and still_running():
        if trainer_step(state_dir) > beyond:
            return True
        time.sleep(0.5)
    return False


def diagnosis(cfg: Config) -> str:
    """Who waits for whom, when a fault did not recover: statuses and consumer lags."""
    from confluent_kafka import KafkaException

    from rftbus.ground.kafka.clients import make_admin
    from rftbus.ground.kafka.committed import CommittedOffsets
    from rftbus.ground.kafka.inspect import groups_info

    keys = ("state", "waiting_reason", "step", "groups_produced", "raw_in", "held_groups",
            "pending_feedback", "pending_units", "lag")
    parts = [f"{s.get('role')}-{s.get('id')}: " + ", ".join(f"{k}={s[k]}" for k in keys if s.get(k) is not None)
             for s in read_statuses(cfg.state_dir)]
    try:
        with CommittedOffsets(cfg) as committed:
            parts += [f"group {g.group_id}: lag {g.lag} {dict((k, v) for k, v in g.partitions.items() if v)}"
                      for g in groups_info(make_admin(cfg), committed, timeout=10)]
    except (KafkaException, TimeoutError) as e:
        parts.append(f"lags unreadable: {e}")
    return "; ".join(parts)


# ---- the broker ----------------------------------------------------------------------------------
def kill_broker(broker_cfg: Config, timeout_s: float = 30.0) -> int:
    """SIGKILL the embedded broker of `broker_cfg` (no controlled shutdown) and wait until it is gone."""
    from rftbus.ground.broker import embedded
    from rftbus.ground.errors import RftbusError

    pid = embedded.running_pid(broker_cfg)
    if pid is None:
        raise RftbusError(f"no embedded broker is running for {broker_cfg.state_dir}")
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                try:
                    os.waitpid(pid, os.WNOHANG)  # ours (the driver started it): reap it
                except ChildProcessError:
                    pass
                return pid
        except psutil.NoSuchProcess:
            return pid
        time.sleep(0.1)
    raise RftbusError(f"the broker (pid {pid}) did not die within {timeout_s:g}s of SIGKILL")


def start_broker(broker_cfg: Config, timeout_s: float = 90.0) -> int:
    """Start the broker again; while its port is still held (a client's self-connect to a port in the
    ephemeral range, a socket closing), retry until `timeout_s`."""
    from rftbus.ground.broker import embedded

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            pid = embedded.start(broker_cfg).pid
            assert pid is not None  # a started broker has a process
            return pid
        except embedded.BrokerError as e:
            if "already in use" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(1.0)
