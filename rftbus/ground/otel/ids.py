"""The ids a traced model call gets (rftbus/streams/traces/episodes.py): `otel-<trace id>-<span id>`. Derived from the
trace, so a span exported twice is the same experience; a grade of the whole trace reaches every call of it through
the traces stage (rftbus/streams/traces/stage.py)."""

from __future__ import annotations

import re

PREFIX = "otel-"
TRACE_ID = re.compile(r"^[0-9a-f]{32}$")


def episode_id(trace_id: str, span_id: str) -> str:
    """The experience (and group) id of a traced call."""
    return f"{PREFIX}{trace_id}-{span_id}"
