"""Draining the loop before the tally, so "in flight" shrinks to nothing and the books can close.

Order: stop what makes new experiences (serve, explorers: SIGTERM, a clean stop the supervisor does
not restart), then wait until streams have settled every raw record (lag 0, no open group, no live
experience waiting for feedback), then until the trainer has taken every curated record it can
(lag 0 on the curated lanes, or no movement while it waits for a batch that cannot fill).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil
from confluent_kafka import KafkaException

from rftbus.apps.chaos.faults import children
from rftbus.ground.config import Config
from rftbus.ground.kafka.clients import make_admin
from rftbus.ground.kafka.committed import CommittedOffsets
from rftbus.ground.kafka.inspect import group_lag
from rftbus.ground.status import read_statuses


@dataclass
class DrainReport:
    producers_stopped: bool = False
    streams_idle: bool = False
    trainer_idle: bool = False
    trainer_lag_left: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.producers_stopped and self.streams_idle and self.trainer_idle

    def to_json(self) -> dict:
        return {**self.__dict__, "complete": self.complete}


def lag(admin, committed: CommittedOffsets, group: str, topics: list[str]) -> int:
    return group_lag(admin, committed, group, topics).lag


def stop_producers(run_pid: int, timeout_s: float = 90.0, quiet_s: float = 8.0) -> bool:
    """SIGTERM serve and explorers (they finish the group in hand, flush, commit, exit 0), until none
    has been running for `quiet_s`: one that dies of the signal instead (caught mid-start) is restarted
    by the supervisor, and that one is stopped too."""
    deadline = time.monotonic() + timeout_s
    quiet_since = None
    while time.monotonic() < deadline:
        procs = [p for kind in ("serve", "explorer") for p in children(run_pid)[kind]]
        if not procs:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since >= quiet_s:
                return True
            time.sleep(0.5)
            continue
        quiet_since = None
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        psutil.wait_procs(procs, timeout=max(1.0, deadline - time.monotonic()))
    return False


def _streams_settled(state_dir) -> bool:
    sts = [s for s in read_statuses(state_dir, "streams") if s.get("pid") and psutil.pid_exists(s["pid"])]
    # feedback that grades nothing yet is settled only by its orphan_feedback rejection, at the feedback TTL
    return bool(sts) and all(s.get("held_groups", 1) == 0 and s.get("pending_feedback", 1) == 0
                             and s.get("unmatched_feedback", 1) == 0 for s in sts)


def drain(cfg: Config, run_pid: int, timeout_s: float, tick: Callable[[str], None] = lambda s: None,
          trainer_quiet_s: float = 20.0) -> DrainReport:
    rep = DrainReport()
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    admin = make_admin(cfg)
    t = cfg.topics
    tick("stopping explorers and serve")
    rep.producers_stopped = stop_producers(run_pid)
    if not rep.producers_stopped:
        rep.notes.append("explorers or serve still running 90 s after SIGTERM")
    with CommittedOffsets(cfg) as committed:  # one reader per group for the whole drain, not one per poll
        settled_in_a_row = 0
        while time.monotonic() < deadline:
            try:
                raw_lag = lag(admin, committed, cfg.streams.app_id, [t.raw.name, t.feedback.name])
            except KafkaException as e:  # a lag read failing (broker busy) is retried until the deadline
                rep.notes.append(f"streams lag unreadable once: {e}")
                time.sleep(2)
                continue
            settled = raw_lag == 0 and _streams_settled(cfg.state_dir)
            tick(f"waiting for streams: lag {raw_lag} on raw + feedback")
            settled_in_a_row = settled_in_a_row + 1 if settled else 0
            if settled_in_a_row >= 2:
                rep.streams_idle = True
                break
            time.sleep(2)
        last, since = None, time.monotonic()
        while rep.streams_idle and time.monotonic() < deadline:
            try:
                left = lag(admin, committed, cfg.trainer.group_id, [t.curated.name, t.curated_priority.name])
            except KafkaException as e:
                rep.notes.append(f"trainer lag unreadable once: {e}")
                time.sleep(2)
                continue
            rep.trainer_lag_left = left
            tick(f"waiting for the trainer: lag {left} on the curated lanes")
            if left == 0:
                rep.trainer_idle = True
                break
            if left != last:
                last, since = left, time.monotonic()
            elif time.monotonic() - since > trainer_quiet_s:
                rep.trainer_idle = True
                rep.notes.append(f"trainer lag stayed at {left} for {trainer_quiet_s:g} s (a batch that cannot fill, "
                                 "or rejections not yet checkpointed); the final checkpoint accounts for them")
                break
            time.sleep(2)
    rep.seconds = time.monotonic() - t0
    return rep
