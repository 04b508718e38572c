"""Serving behind the promotion gate (gate.enabled): which version answers a call, by the gate's decisions.

The one decisions follower (rftbus/weights/decisions.py) hands it every decision about this model, in order; it
keeps what they say now: the serving (last promoted) version, the candidate on canary and its share. Each version that serves
is loaded as a named adapter (`v<N>`, or `<lineage>:v<N>` for another trainer's: rftbus/models/lineage.py; from the
weight store through the one weights follower, one per lineage) and served by name,
so the engine's own newest-version swapping is off. A session keeps the version it started with (and the decision
that let it serve) for its whole life; a new session goes to the candidate with probability `canary_share`, by a
hash of its id (the same session id always lands the same way for one candidate); a call outside a session is a
session of one. Every answer's record names its version's decision and lineage (metadata `gate_decision`,
`gate_lineage`).
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from rftbus.config import Config
from rftbus.errors import RftbusError
from rftbus.models.lineage import label, weights_key
from rftbus.schemas import GateDecision
from rftbus.weights.decisions import DecisionFollower
from rftbus.weights.follower import WeightFollower


class NotServing(RftbusError):
    """No version has been promoted yet (the gate has not written its first decision)."""


@dataclass(frozen=True)
class Route:
    adapter: str  # the generator's adapter name
    version: int
    decision: str  # the decision id that lets this version serve
    arm: str  # serving | canary
    lineage: str = ""  # whose version it is ("" the first trainer's)


def lands_on_canary(session_id: str, candidate: str, share: float) -> bool:
    """`candidate`: the candidate's label (a new candidate draws its sessions afresh)."""
    digest = hashlib.sha256(f"{candidate}:{session_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


class GatedVersions:
    """`route(session_id)`: the version a call is answered with; `add_adapter(name, payload, version)` is the
    generator's."""

    def __init__(self, cfg: Config, add_adapter: Callable, report: Callable[[str], None], max_sessions: int):
        self.cfg, self.add_adapter, self.report = cfg, add_adapter, report
        self.model = cfg.model.name
        self.weights = {"": WeightFollower(cfg, report=report, prefetch=False)}  # lineage -> its follower
        self.follower = DecisionFollower(cfg, self._apply, report)
        self.serving: Route | None = None
        self.canary: Route | None = None
        self.share = 0.0
        self.decisions = 0
        self.sessions: OrderedDict[str, Route] = OrderedDict()  # session id -> its route, oldest first
        self.max_sessions = max_sessions
        self.loaded: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        self._stop = self.follower.stopping
        self.ready = threading.Event()  # a version serves

    def start(self) -> GatedVersions:
        self.weights[""].start()
        self.follower.start()  # a decision whose version's record is not read yet waits for it (_apply)
        return self

    def stop(self) -> None:
        self.follower.stop()
        for w in self.weights.values():
            w.stop()

    def route(self, session_id: str | None) -> Route:
        with self._lock:
            if session_id is not None and session_id in self.sessions:
                self.sessions.move_to_end(session_id)
                return self.sessions[session_id]
            if self.serving is None:
                raise NotServing("no version serves yet: the promotion gate has not promoted one (is `rftbus gate` "
                                 "running?)")
            key = session_id if session_id is not None else str(random.random())
            r = self.canary if self.canary is not None and lands_on_canary(key, self.canary.adapter, self.share) \
                else self.serving
            if session_id is not None:
                self.sessions[session_id] = r
                while len(self.sessions) > self.max_sessions:
                    self.sessions.popitem(last=False)
            return r

    def stats(self) -> dict:
        with self._lock:
            return {"gate_serving": self.serving.version if self.serving else None,
                    "gate_serving_lineage": self.serving.lineage if self.serving else None,
                    "gate_candidate": self.canary.version if self.canary else None,
                    "gate_candidate_lineage": self.canary.lineage if self.canary else None,
                    "gate_decisions": self.decisions}

    def _follower(self, lineage: str) -> WeightFollower:
        if lineage not in self.weights:  # another trainer's versions: followed from its first decision on
            self.weights[lineage] = WeightFollower(self.cfg, report=self.report, prefetch=False,
                                                   model=weights_key(self.model, lineage)).start()
        return self.weights[lineage]

    def _route_of(self, lineage: str, version: int, decision: str, arm: str) -> Route:
        name = label(lineage, version)
        if (lineage, version) not in self.loaded:  # loaded once: the store may drop old files, the engine keeps it
            self.add_adapter(name, self._follower(lineage).load(version), version)
            self.loaded.add((lineage, version))
        return Route(name, version, decision, arm, lineage)

    def _apply(self, d: GateDecision) -> None:
        """One decision: load what now serves, then switch new sessions to it (sessions keep theirs). Weights that
        cannot be loaded yet (their record may still be on its way: the gate can read it first) are retried:
        decisions apply in order, a later one never jumps an earlier one."""
        said = False
        while not self._stop.is_set():
            try:
                serving = self._route_of(d.serving_lineage, d.serving, d.decision_id if d.decision == "promote" else
                                         (self.serving.decision if self.serving else d.decision_id), "serving")
                canary = self._route_of(d.lineage, d.candidate, d.decision_id if d.decision == "canary" else
                                        (self.canary.decision if self.canary else d.decision_id), "canary") \
                    if d.candidate is not None else None
                break
            except RftbusError as e:
                if not said:
                    self.report(f"gate decision {d.decision_id}: its weights cannot be served yet ({e}); serving as "
                                f"before, retrying")
                    said = True
                self._stop.wait(0.5)
        else:
            return
        with self._lock:
            if self.serving is None or self.serving.adapter != serving.adapter:
                self.serving = serving
            self.canary = canary if (canary is None or self.canary is None or self.canary.adapter != canary.adapter) \
                else self.canary
            self.share = d.canary_share
            self.decisions += 1
        self.ready.set()
        self.report(f"gate: {d.decision} {label(d.lineage, d.version)}: serving {serving.adapter}"
                    + (f", {canary.adapter} on {d.canary_share:.0%} of new sessions" if canary is not None else ""))
