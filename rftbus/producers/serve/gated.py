"""Serving behind the promotion gate (gate.enabled): which version answers a call, by the gate's decisions.

The one decisions follower (rftbus/ground/weights/decisions.py) hands it every decision about this model the decision
rules believe, in order; it keeps what they say now: the serving (last promoted) version, the candidate on canary and
its share. Each version that serves is loaded as a named adapter (`v<N>`, or `<lineage>:v<N>` for another
trainer's: rftbus/ground/models/lineage.py; from the weight store through the one weights follower, one per lineage) and
served by name, so the engine's own newest-version swapping is off.

At start the decisions so far are folded first and only what they leave serving is loaded (issue #63: a serve
killed mid-run replayed every decision and blocked on the first promoted version, whose file the trainer had long
collected): the latest promoted version whose weights load serves, newest first. A decision whose weights do not
load within DECISION_WAIT_S (its record may still be on its way: the gate can read it first) is given up, reported
and counted, and what served before goes on serving; a later decision is never blocked behind it.

A session keeps the version it started with (and the decision that let it serve) for its whole life: pins are kept
per client (its last serve.max_sessions sessions, so one client's new sessions never evict another's pin); a new
session goes to the candidate with probability `canary_share`, by a hash of its id (the same session id always
lands the same way for one candidate); a call outside a session is a session of one. A version that no longer
serves stays loaded while sessions are pinned to it, at most MAX_RETIRED of them (the oldest is unloaded first,
and its sessions are told to start a new one: a pinned session never changes version). Every answer's record
names its version's decision and lineage (metadata `gate_decision`, `gate_lineage`).
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from rftbus.ground.config import Config
from rftbus.ground.errors import RftbusError
from rftbus.ground.models.lineage import label, weights_key
from rftbus.producers.serve.sessions import MAX_CLIENTS
from rftbus.ground.schemas import GateDecision
from rftbus.ground.weights.decisions import DecisionFollower
from rftbus.ground.weights.follower import WeightFollower

DECISION_WAIT_S = 30.0  # how long a decision's weights may take to load before serve gives the decision up
MAX_RETIRED = 8  # versions no longer serving or on canary kept loaded for the sessions pinned to them


class NotServing(RftbusError):
    """No version has been promoted yet (the gate has not written its first decision)."""


class SessionRetired(RftbusError):
    """The version a session is pinned to was unloaded (more than MAX_RETIRED versions were retired since)."""


@dataclass(frozen=True)
class Route:
    adapter: str  # the generator's adapter name
    version: int
    decision: str  # the decision id that lets this version serve
    arm: str  # serving | canary
    lineage: str = ""  # whose version it is ("" the first trainer's)


@dataclass(frozen=True)
class Pick:
    """A version the decisions so far name, with the decision that lets it serve."""

    lineage: str
    version: int
    decision: str


def lands_on_canary(session_id: str, candidate: str, share: float) -> bool:
    """`candidate`: the candidate's label (a new candidate draws its sessions afresh)."""
    digest = hashlib.sha256(f"{candidate}:{session_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


class GatedVersions:
    """`route(session_id, client)`: the version a call is answered with; `add_adapter(name, payload, version)` and
    `remove_adapter(name)` are the generator's."""

    def __init__(self, cfg: Config, add_adapter: Callable, report: Callable[[str], None], max_sessions: int,
                 remove_adapter: Callable[[str], object] = lambda name: None, max_clients: int = MAX_CLIENTS):
        self.cfg, self.add_adapter, self.remove_adapter, self.report = cfg, add_adapter, remove_adapter, report
        self.model = cfg.model.name
        self.weights = {"": WeightFollower(cfg, report=report, prefetch=False)}  # lineage -> its follower
        self.follower = DecisionFollower(cfg, self._fold, report, on_caught_up=self._caught_up)
        self.serving: Route | None = None
        self.canary: Route | None = None
        self.share = 0.0
        self.decisions = 0  # believed (the follower refuses the others: follower.book.refused)
        self.given_up = 0  # decisions whose weights did not load
        self.max_sessions, self.max_clients = max_sessions, max_clients
        self.pins: OrderedDict[str, OrderedDict[str, Route]] = OrderedDict()  # client -> its sessions' routes
        self.loaded: set[tuple[str, int]] = set()
        self.retired: OrderedDict[str, None] = OrderedDict()  # unloaded when more than MAX_RETIRED, oldest first
        self._want_serving: Pick | None = None  # what the decisions so far say
        self._want_canary: Pick | None = None
        self._want_share = 0.0
        self._promoted: list[Pick] = []  # every promoted version, in order (a restart falls back along it)
        self._live = False  # caught up with the decisions: each one is loaded as it comes
        self._lock = threading.Lock()
        self._stop = self.follower.stopping
        self.ready = threading.Event()  # a version serves

    def start(self) -> GatedVersions:
        self.weights[""].start()
        self.follower.start()
        return self

    def stop(self) -> None:
        self.follower.stop()
        for w in self.weights.values():
            w.stop()

    def route(self, session_id: str | None, client: str = "") -> Route:
        with self._lock:
            mine = self.pins.get(client)
            if session_id is not None and mine is not None and session_id in mine:
                r = mine[session_id]
                mine.move_to_end(session_id)
                self.pins.move_to_end(client)
                if (r.lineage, r.version) not in self.loaded:
                    raise SessionRetired(f"session {session_id!r} was served by {r.adapter}, which is no longer "
                                         f"loaded (more than {MAX_RETIRED} versions were retired since): start a new "
                                         f"session")
                return r
            if self.serving is None:
                raise NotServing("no version serves yet: the promotion gate has not promoted one (is `rftbus gate` "
                                 "running?)")
            key = session_id if session_id is not None else str(random.random())
            r = self.canary if self.canary is not None and lands_on_canary(key, self.canary.adapter, self.share) \
                else self.serving
            if session_id is not None:
                self._pin(client, session_id, r)
            return r

    def _pin(self, client: str, session_id: str, r: Route) -> None:
        mine = self.pins.setdefault(client, OrderedDict())
        mine[session_id] = r
        self.pins.move_to_end(client)
        while len(mine) > self.max_sessions:  # this client's oldest session, never another client's
            mine.popitem(last=False)
        while len(self.pins) > self.max_clients:  # the idlest client's pins
            self.pins.popitem(last=False)

    def stats(self) -> dict:
        with self._lock:
            return {"gate_serving": self.serving.version if self.serving else None,
                    "gate_serving_lineage": self.serving.lineage if self.serving else None,
                    "gate_candidate": self.canary.version if self.canary else None,
                    "gate_candidate_lineage": self.canary.lineage if self.canary else None,
                    "gate_decisions": self.decisions, "gate_decisions_refused": self.follower.book.refused,
                    "gate_decisions_given_up": self.given_up, "gate_caught_up": self._live,
                    "gate_adapters_loaded": len(self.loaded)}

    def _follower(self, lineage: str) -> WeightFollower:
        if lineage not in self.weights:  # another trainer's versions (a lineage the decision rules know)
            self.weights[lineage] = WeightFollower(self.cfg, report=self.report, prefetch=False,
                                                   model=weights_key(self.model, lineage)).start()
        return self.weights[lineage]

    def _route_of(self, p: Pick, arm: str, wait_s: float) -> Route:
        """`p` loaded (once: the store may drop old files, the engine keeps it), waiting up to `wait_s` for its
        weights; RftbusError when they do not load."""
        name = label(p.lineage, p.version)
        deadline = time.monotonic() + wait_s
        said = False
        while (p.lineage, p.version) not in self.loaded:
            try:
                self.add_adapter(name, self._follower(p.lineage).load(p.version), p.version)
                self.loaded.add((p.lineage, p.version))
            except (RftbusError, OSError, ValueError) as e:
                if time.monotonic() >= deadline or self._stop.is_set():
                    raise RftbusError(f"{name}: {e}") from None
                if not said:
                    self.report(f"gate: {name} cannot be served yet ({e}); retrying for up to {wait_s:g} s")
                    said = True
                self._stop.wait(0.5)
        return Route(name, p.version, p.decision, arm, p.lineage)

    # -- the decisions ---------------------------------------------------------------------------------------
    def _fold(self, d: GateDecision) -> None:
        """One believed decision into what should serve; loaded at once when caught up (else at catch-up)."""
        if d.decision == "promote":
            self._want_serving = Pick(d.serving_lineage, d.serving, d.decision_id)
            self._promoted.append(self._want_serving)
            del self._promoted[:-64]
        if d.candidate is None:
            self._want_canary = None
        elif d.decision == "canary":
            self._want_canary = Pick(d.lineage, d.candidate, d.decision_id)
        self._want_share = d.canary_share
        self.decisions += 1
        if self._live:
            self._load(f"{d.decision} {label(d.lineage, d.version)}")

    def _caught_up(self) -> None:
        self._live = True
        self._load(f"{self.decisions} decision(s) read at start")

    def _load(self, why: str) -> None:
        want = self._want_serving
        if want is None:
            return
        serving = None
        for i, p in enumerate([want, *[q for q in reversed(self._promoted) if q != want]]):
            try:
                serving = self._route_of(p, "serving", DECISION_WAIT_S if i == 0 else 0.0)
                break
            except RftbusError as e:
                self.report(f"gate: {why}: serving {label(p.lineage, p.version)} given up ({e})"
                            + ("; the version promoted before it is tried" if self.serving is None else ""))
                if i == 0:
                    self.given_up += 1
                if self.serving is not None:
                    serving = self.serving  # a live decision that does not load: what serves goes on serving
                    break
        if serving is None:
            self.report("gate: no promoted version's weights load: not serving yet")
            return
        canary = None
        if self._want_canary is not None:
            try:
                canary = self._route_of(self._want_canary, "canary", DECISION_WAIT_S)
            except RftbusError as e:
                self.given_up += 1
                self.report(f"gate: {why}: canary given up ({e}); no candidate on canary")
        with self._lock:
            before = {r.adapter for r in (self.serving, self.canary) if r is not None}
            self.serving = serving if self.serving is None or self.serving.adapter != serving.adapter else self.serving
            self.canary = canary if (canary is None or self.canary is None or self.canary.adapter != canary.adapter) \
                else self.canary
            self.share = self._want_share if canary is not None else 0.0
            now = {r.adapter for r in (self.serving, self.canary) if r is not None}
            for name in before - now:
                self.retired[name] = None
            for name in now:
                self.retired.pop(name, None)
            gone = self._retire()
        for name in gone:
            self.remove_adapter(name)
        self.ready.set()
        self.report(f"gate: {why}: serving {self.serving.adapter}"
                    + (f", {canary.adapter} on {self.share:.0%} of new sessions" if canary is not None else ""))

    def _retire(self) -> list[str]:
        """Unload retired versions no session is pinned to, and the oldest past MAX_RETIRED (under the lock)."""
        pinned = {r.adapter for mine in self.pins.values() for r in mine.values()}
        gone = [n for n in self.retired if n not in pinned]
        extra = [n for n in self.retired if n in pinned][:max(0, len(self.retired) - len(gone) - MAX_RETIRED)]
        for name in gone + extra:
            del self.retired[name]
            self.loaded = {(lin, v) for lin, v in self.loaded if label(lin, v) != name}
        return gone + extra
