"""Episodes: an agent's calls tied by a session id, graded once and credited to every call.

A session id comes with a call (the `X-Rftbus-Session-Id` header, or the `/sessions/{id}/v1` base URL); each
recorded call carries it (group metadata `session_id`, `session_turn`). One feedback on the session becomes one
Feedback per experience of its calls, so the streams' join, late feedback and expiry work as for a lone answer
(an episode never graded expires as `episode_no_feedback`). Credit is `same` (each call gets the episode's grade)
or `discounted` (call t of T gets grade * discount^(T-1-t): the calls nearest the outcome get the most).

The calls of a session are remembered in this process: feedback for a session must reach the serve process that
recorded it, or list the experience ids itself. A session belongs to the client that opened it (its token's
identity, or its address where the inference scope is open): another client's call on it is refused, so nobody
joins, exhausts or evicts an episode that is not theirs (issue #42). Budgets are per client: each keeps its last
serve.max_sessions sessions, and evicting one never touches another client's.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from rftbus.ground.web.errors import BadRequest, Forbidden, NotFound

SESSION_HEADER = "X-Rftbus-Session-Id"


MAX_CLIENTS = 100_000  # clients with sessions remembered; past it the idlest client's sessions are forgotten


@dataclass
class Episode:
    owner: str = ""
    turns: int = 0  # turns handed out (a call that failed to record leaves a gap)
    calls: list[tuple[int, list[str]]] = field(default_factory=list)  # (turn, experience ids), recorded ones


class Sessions:
    def __init__(self, max_sessions: int, max_calls: int, max_clients: int = MAX_CLIENTS):
        self.max_sessions, self.max_calls, self.max_clients = max_sessions, max_calls, max_clients
        self._d: dict[str, Episode] = {}
        self._by_owner: OrderedDict[str, OrderedDict[str, None]] = OrderedDict()  # least recently active first
        self._lock = threading.Lock()

    def _forget(self, owner: str, session_id: str) -> None:
        self._d.pop(session_id, None)
        mine = self._by_owner.get(owner)
        if mine is not None:
            mine.pop(session_id, None)
            if not mine:
                del self._by_owner[owner]

    def _own(self, session_id: str, owner: str) -> Episode | None:
        """The session if `owner` opened it, None if nobody has; Forbidden if another client did."""
        ep = self._d.get(session_id)
        if ep is not None and ep.owner != owner:
            raise Forbidden(f"session {session_id!r} was opened by another client: use a session id of your own",
                            param="session_id", code="session_not_yours")
        return ep

    def _claim(self, session_id: str, owner: str) -> Episode:
        ep = self._own(session_id, owner)
        if ep is None:
            ep = self._d[session_id] = Episode(owner=owner)
        mine = self._by_owner.setdefault(owner, OrderedDict())
        mine[session_id] = None
        mine.move_to_end(session_id)
        self._by_owner.move_to_end(owner)
        while len(mine) > self.max_sessions:  # this client's oldest session, never another's
            self._forget(owner, next(iter(mine)))
        while len(self._by_owner) > self.max_clients:
            idle, theirs = next(iter(self._by_owner.items()))
            for sid in list(theirs):
                self._forget(idle, sid)
        return ep

    def check(self, session_id: str, owner: str) -> None:
        """Refuse a call on a session another client opened, or one past serve.max_calls_per_session, before any work."""
        with self._lock:
            ep = self._own(session_id, owner)
            if ep is not None and ep.turns >= self.max_calls:
                raise self._too_long(session_id, ep)

    def _too_long(self, session_id: str, ep: Episode) -> BadRequest:
        return BadRequest(f"session {session_id!r} has {ep.turns} calls: serve.max_calls_per_session is "
                          f"{self.max_calls} (start a new session)", param="session_id", code="session_too_long")

    def next_turn(self, session_id: str, owner: str) -> int:
        """The turn number of a call about to be recorded; refuses another client's session, and a session past
        serve.max_calls_per_session."""
        with self._lock:
            ep = self._claim(session_id, owner)
            if ep.turns >= self.max_calls:
                raise self._too_long(session_id, ep)
            ep.turns += 1
            return ep.turns - 1

    def recorded(self, session_id: str, turn: int, experience_ids: list[str]) -> None:
        with self._lock:
            ep = self._d.get(session_id)
            if ep is not None:
                ep.calls.append((turn, list(experience_ids)))
                ep.calls.sort()

    def calls(self, session_id: str) -> list[tuple[int, list[str]]]:
        with self._lock:
            ep = self._d.get(session_id)
            if ep is None or not ep.calls:
                raise NotFound(f"session {session_id!r} has no calls recorded by this server recently (it keeps "
                               f"each client's last serve.max_sessions sessions)", param="session_id",
                               code="session_not_found")
            return list(ep.calls)

