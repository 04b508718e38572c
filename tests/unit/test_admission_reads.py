"""Admission reads the lags off the explorer's loop (#46): only the first reading is waited for; a later one
that hangs (a frozen coordinator) or fails leaves the explorer on its last figure plus its own groups.

The lag reads are replaced by a function here: what is tested is the bookkeeping around them (which figure
is used while a read is out, and what is counted when it comes back). The reads against real brokers, and a
frozen coordinator on three real nodes, are in tests/integration (test_explorer.py, test_cluster.py)."""

from __future__ import annotations

import threading
import time

import pytest

from rftbus.ground.config import load_config
from rftbus.ground.kafka.inspect import Lag
from rftbus.producers.admission import Admission, AdmissionUnavailable


def _admission(read):
    cfg = load_config(overrides={"explorer": {"admission_refresh_s": 0.01}, "rl": {"max_staleness": 1,
                                                                                   "batch_groups": 4}}, environ={})
    adm = Admission(cfg, admin=None)  # type: ignore[arg-type]
    adm._read = read  # type: ignore[method-assign]
    return adm


def _wait(cond, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline
        time.sleep(0.005)


def test_a_hanging_lag_read_does_not_hold_the_explorer():
    release, calls = threading.Event(), []

    def read():
        calls.append(time.monotonic())
        if len(calls) > 1:
            release.wait(10)  # a coordinator that does not answer
        return Lag(lag=2, done=0, end=2), Lag(lag=1, done=0, end=1)

    adm = _admission(read)
    assert adm.pending() == 3 and adm.reads == 1  # the first reading is waited for
    time.sleep(0.02)
    t0 = time.monotonic()
    assert adm.pending() == 3  # the next one starts in the background; the last figure is used meanwhile
    _wait(lambda: len(calls) == 2)
    for _ in range(4):  # our own groups made while the read is out count at once ...
        assert adm.blocked(adm.pending()) is None
        adm.produced_group()
    assert adm.pending() == 7 and adm.blocked(adm.pending()) is None
    adm.produced_group()  # ... so the explorer stops at the bound, (η+1)·B = 8, on its own count
    assert adm.pending() == 8 and adm.blocked(adm.pending()) is not None
    assert time.monotonic() - t0 < 1.0 and adm.reads == 1
    release.set()
    _wait(lambda: adm.pending() is not None and adm.reads == 2)
    # the lags were read before those five groups were acknowledged and cannot have seen them: they still count
    assert adm.pending() == 8
    adm.close()


def test_a_failed_read_keeps_the_last_figure_and_the_first_failure_is_an_error():
    answers: list = [AdmissionUnavailable("no coordinator")]

    def read():
        a = answers.pop(0) if answers else (Lag(lag=5, done=0, end=5), Lag(lag=0, done=0, end=0))
        if isinstance(a, Exception):
            raise a
        return a

    adm = _admission(read)
    with pytest.raises(AdmissionUnavailable):  # nothing read yet: the explorer waits and says why
        adm.pending()
    assert adm.pending() == 5 and adm.reads == 1
    answers.append(AdmissionUnavailable("request timed out"))
    time.sleep(0.02)
    adm.pending()
    _wait(lambda: (adm.pending(), adm.failed_reads)[1] == 1)
    assert adm.last_error == "request timed out" and adm.pending() == 5  # the last figure, not zero
    adm.produced_group()
    assert adm.pending() == 6
    adm.close()
