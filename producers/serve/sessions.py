"""Episodes: an agent's calls tied by a session id, graded once and credited to every call.

A session id comes with a call (the `X-Rftbus-Session-Id` header, or the `/sessions/{id}/v1` base URL); each
recorded call carries it (group metadata `session_id`, `session_turn`). One feedback on the session becomes one
Feedback per experience of its calls, so the streams' join, late feedback and expiry work as for a lone answer
(an episode never graded expires as `episode_no_feedback`). Credit is `same` (each call gets the episode's grade)
or `discounted` (call t of T gets grade * discount^(T-1-t): the calls nearest the outcome get the most).

The calls of a session are remembered in this process (the last serve.max_sessions sessions): feedback for a
session must reach the serve process that recorded it, or list the experience ids itself.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from rftbus.producers.serve.errors import BadRequest, NotFound

SESSION_HEADER = "X-Rftbus-Session-Id"


@dataclass
class Episode:
    turns: int = 0  # turns handed out (a call that failed to record leaves a gap)
    calls: list[tuple[int, list[str]]] = field(default_factory=list)  # (turn, experience ids), recorded ones


class Sessions:
    def __init__(self, max_sessions: int, max_calls: int):
        self.max_sessions, self.max_calls = max_sessions, max_calls
        self._d: OrderedDict[str, Episode] = OrderedDict()
        self._lock = threading.Lock()

    def next_turn(self, session_id: str) -> int:
        """The turn number of a call about to be recorded; refuses a session past serve.max_calls_per_session."""
        with self._lock:
            ep = self._d.pop(session_id, None) or Episode()
            self._d[session_id] = ep  # most recently used last
            while len(self._d) > self.max_sessions:
                self._d.popitem(last=False)
            if ep.turns >= self.max_calls:
                raise BadRequest(f"session {session_id!r} has {ep.turns} calls: serve.max_calls_per_session is "
                                 f"{self.max_calls} (start a new session)", param="session_id",
                                 code="session_too_long")
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
                               f"the last serve.max_sessions sessions)", param="session_id", code="session_not_found")
            return list(ep.calls)


def credit(value: float, turns: int, index: int, mode: str, discount: float) -> float:
    """The share of an episode's grade that call `index` of `turns` gets."""
    return value if mode == "same" else value * discount ** (turns - 1 - index)
