"""The headers every streams output carries (outputs.py writes them, the checkpoint's recovery scan reads them).

`rftbus-src` (the input record), `rftbus-in` (its partition), `rftbus-n` / `rftbus-k` (how many outputs it has,
and which this is), `rftbus-latest` (the weight version its decision used); the rest mark internal records.
"""

from __future__ import annotations

from typing import Any

H_KIND = "rftbus-kind"
H_SRC = "rftbus-src"
H_IN = "rftbus-in"
H_N = "rftbus-n"
H_K = "rftbus-k"
H_LATEST = "rftbus-latest"
H_T0 = "rftbus-t0"  # ms timestamp of the raw record (latency accounting)
H_EXP = "rftbus-exp"  # internal join records: the experience a record is about
H_SAMPLE = "rftbus-sample"  # internal join records: that experience's index in its group
H_FBID = "rftbus-fb"  # internal join records: the feedback_id (a retry of the same feedback is not a duplicate)
H_INPUT = "rftbus-input"  # table changelog records: topic/partition/offset of the input that made the change
H_RESEND = "rftbus-resend"  # internal join records: a grade sent again (it may have landed already)
H_HELD = "rftbus-held"  # live table changelog records: the raw record of a group waiting for grades (rftbus/streams/published.py)


def header(headers: Any, name: str) -> bytes | None:
    if not headers:
        return None
    items = headers.items() if isinstance(headers, dict) else headers
    for k, v in items:
        if k == name:
            return v
    return None
