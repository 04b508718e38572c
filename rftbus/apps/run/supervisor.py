"""Supervised child processes: a crashed child is reported with its cause and restarted, within limits.

A crash's cause is the last error line its log shows (the exception of a Python traceback, a fatal
signal), so a give-up says why, not only that (#18). Children are rftbus commands (`rftbus explore`, `rftbus streams`, ...) in their own process groups,
so Ctrl-C reaches only the supervisor, which then stops them in order with SIGTERM (clean stop),
escalating to SIGKILL for any that do not exit in time.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from rftbus.apps.run.restart_budget import RestartBudget

STOPPED = (-signal.SIGTERM, -signal.SIGINT)  # exit codes of a child that a stop signal ended
ERROR_LINE = re.compile(r"^(?:\[rank\d+\]: )?((?:[\w.]+(?:Error|Exception|Interrupt|Exit)\b|Fatal Python error|error: ).*)")


def crash_cause(log: Path | None, code: int, tail_bytes: int = 64 * 1024, since: int = 0) -> str:
    """The last error line the child wrote to its log since it started (byte `since`: the log is shared by
    its restarts, and a kill -9 writes nothing, so an older run's error must not be named), else its exit."""
    how = f"signal {-code}" if code < 0 else f"exit code {code}"
    if log is None or not log.exists():
        return how
    with open(log, "rb") as f:
        f.seek(max(since, f.seek(0, os.SEEK_END) - tail_bytes))
        lines = f.read().decode(errors="replace").splitlines()
    errors = [m.group(1).strip() for m in map(ERROR_LINE.match, lines) if m]
    return f"{how}: {errors[-1][:300]}" if errors else how


@dataclass
class ChildSpec:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    max_restarts: int = 3  # within restart_window_s: a crash loop is given up on, deaths far apart are not
    log: Path | None = None
    optional: bool = False  # a helper (the studio): given up on, it is reported, but the run goes on and is not failed
    restart_window_s: float = 600.0
    # The child starts with SIGTERM blocked, pending until it unblocks it (`python -m rftbus` does, once its
    # handler is in): a stop that comes while the interpreter itself starts is then a clean stop, not a
    # death by the signal's default action. Only for commands that unblock it: others would ignore SIGTERM.
    term_held: bool = False


@dataclass
class Child:
    spec: ChildSpec
    proc: subprocess.Popen | None = None
    restarts: int = 0  # in the whole run (the budget counts those within its window)
    budget: RestartBudget | None = None
    started_at: float = 0.0
    gave_up: bool = False
    log_from: int = 0  # where this start's output begins in the (appended) log
    restart_at: float | None = None  # monotonic time of a scheduled restart (backoff without blocking)
    exit_codes: list[int] = field(default_factory=list)
    causes: list[str] = field(default_factory=list)  # one per crash, from the log

    @property
    def cause(self) -> str:
        return self.causes[-1] if self.causes else ""

    def __post_init__(self) -> None:
        if self.budget is None:
            self.budget = RestartBudget(self.spec.max_restarts, self.spec.restart_window_s)


@dataclass
class Event:
    child: str
    kind: str  # "started" | "exited" | "crashed" | "restarted" | "gave_up"
    detail: str = ""


class Supervisor:
    def __init__(self, specs: list[ChildSpec], backoff_s: float = 1.0):
        self.children = {s.name: Child(s) for s in specs}
        self.backoff_s = backoff_s
        # the environment children start with, as it is now: what the parent sets for itself later (the eval's
        # CUDA_VISIBLE_DEVICES for run.eval_device) is not the children's, nor their restarts'
        self.env = dict(os.environ)

    def _spawn(self, child: Child) -> subprocess.Popen:
        spec = child.spec
        out = open(spec.log, "ab") if spec.log else None
        child.log_from = out.tell() if out is not None else 0
        # The mask of the thread that forks is the child's across exec (this thread's, restored at once).
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM}) if spec.term_held else None
        try:
            child.proc = subprocess.Popen(
                spec.argv, env={**self.env, **spec.env}, stdout=out or subprocess.DEVNULL, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        finally:
            if held is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
            if out is not None:
                out.close()
        child.started_at = time.monotonic()
        return child.proc

    def start(self) -> list[Event]:
        events = []
        for child in self.children.values():
            proc = self._spawn(child)
            events.append(Event(child.spec.name, "started", f"pid {proc.pid}"))
        return events

    def poll(self) -> list[Event]:
        """Check every child; restart crashed ones (after a backoff) until their restart budget is spent."""
        events = []
        now = time.monotonic()
        for child in self.children.values():
            if child.gave_up:
                continue
            if child.restart_at is not None:
                if now >= child.restart_at:
                    child.restart_at = None
                    child.restarts += 1
                    assert child.budget is not None  # (set in __post_init__)
                    child.budget.spend(now)
                    proc = self._spawn(child)
                    events.append(Event(child.spec.name, "restarted", f"pid {proc.pid} (restart {child.restarts})"))
                continue
            if child.proc is None:
                continue
            code = child.proc.poll()
            if code is None:
                continue
            child.exit_codes.append(code)
            child.proc = None
            if code == 0 or code in STOPPED:
                # Asked to stop (by the operator, or a drain) is not a crash, even when the signal came
                # before the child could install its handler; restarting it would fight whoever asked.
                events.append(Event(child.spec.name, "exited", "clean exit" if code == 0 else f"stopped by signal {-code}"))
                continue
            cause = crash_cause(child.spec.log, code, since=child.log_from)
            child.causes.append(cause)
            events.append(Event(child.spec.name, "crashed", cause))
            assert child.budget is not None
            recent = child.budget.recent(now)
            if not child.budget.allows(now):
                child.gave_up = True
                events.append(Event(child.spec.name, "gave_up", f"after {child.restarts} restarts ({recent} within "
                                    f"{child.budget.window_s / 60:g} min); last crash: {cause}"))
            else:  # backoff doubles with the recent restarts only: a death long after the last one waits 1 s
                child.restart_at = now + min(self.backoff_s * (2 ** recent), 10.0)
        return events

    def gave_up(self) -> dict[str, str]:
        """Stages (not optional helpers) given up on -> the cause of their last crash."""
        return {n: c.cause for n, c in self.children.items() if c.gave_up and not c.spec.optional}

    def alive(self) -> list[str]:
        return [n for n, c in self.children.items() if c.proc is not None and c.proc.poll() is None]

    def stop(self, order: list[str] | None = None, timeout: float = 30.0,
             leave: set[str] | None = None) -> dict[str, int | None]:
        """SIGTERM each child (in `order`, then the rest, but not those to `leave` running), wait, SIGKILL
        stragglers; exit codes."""
        names = list(order or []) + [n for n in self.children if n not in (order or [])]
        names = [n for n in names if n not in (leave or set())]
        codes: dict[str, int | None] = {}
        for name in names:
            child = self.children[name]
            if child.proc is None or child.proc.poll() is not None:
                codes[name] = child.proc.returncode if child.proc else None
                continue
            try:
                os.killpg(child.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                codes[name] = child.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(child.proc.pid, signal.SIGKILL)
                codes[name] = child.proc.wait(10)
        return codes
