"""The ids a traced model call gets (streams/traces/episodes.py), shared with whoever grades it by trace id (serve's
/v1/feedback `trace_id`): the call that is its trace's root is `otel-<trace id>`, a nested call
`otel-<trace id>-<span id>`. Derived from the trace, so a span exported twice is the same experience."""

from __future__ import annotations

import re

PREFIX = "otel-"
TRACE_ID = re.compile(r"^[0-9a-f]{32}$")


def episode_id(trace_id: str, span_id: str | None = None) -> str:
    """The experience (and group) id of a traced call: the trace's for its root call, else trace and span."""
    return f"{PREFIX}{trace_id}" if span_id is None else f"{PREFIX}{trace_id}-{span_id}"
