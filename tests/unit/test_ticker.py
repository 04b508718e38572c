"""run/ticker.py: a call that raises is reported and the next one still comes; stop ends the thread."""

from __future__ import annotations

import time

from rftbus.apps.run.ticker import Ticker


def test_an_error_in_one_call_is_reported_and_the_ticker_goes_on():
    calls, notes = [], []

    def fn():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a broker that did not answer")

    t = Ticker(fn, 0.01, "feed", notes.append).start()
    deadline = time.monotonic() + 5
    while len(calls) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert t.stop() and len(calls) >= 3
    assert notes == ["feed: RuntimeError: a broker that did not answer"]
