"""The tables' recovery rule (rftbus/streams/state.py): a changelog record whose input will be read again is not recovered."""

from __future__ import annotations

from types import SimpleNamespace

from rftbus.streams.headers import H_INPUT
from rftbus.streams.state import ReadFromCache, recoverable, replayed


def _event(pos: str | None, headers_as_dict: bool = False):
    headers = [] if pos is None else [(H_INPUT, pos.encode())]
    return SimpleNamespace(message=SimpleNamespace(headers=dict(headers) if headers_as_dict else headers), pos=pos)


def test_a_change_at_or_past_the_committed_offset_is_replayed():
    committed = {("rc.raw", 0): 10, ("rc.joined", 1): 0}
    read_from = lambda t, p: committed[(t, p)]  # noqa: E731
    assert replayed(b"rc.raw/0/10", read_from)
    assert replayed(b"rc.raw/0/11", read_from)
    assert not replayed(b"rc.raw/0/9", read_from)
    assert replayed(b"rc.joined/1/0", read_from)  # nothing committed: read again from the log start


def test_recovery_keeps_committed_changes_and_those_without_an_input():
    read_from = lambda t, p: {0: 5, 1: 2}[p]  # noqa: E731
    batch = [_event("t/0/4"), _event("t/0/5"), _event(None), _event("t/1/1", headers_as_dict=True),
             _event("t/1/2", headers_as_dict=True)]
    kept, skipped = recoverable(batch, read_from)
    assert [e.pos for e in kept] == ["t/0/4", None, "t/1/1"]
    assert skipped == 2
    assert recoverable(batch, None) == (batch, 0)  # no rule set: everything (Faust's own recovery)


def test_the_broker_is_asked_once_per_input_partition_until_cleared():
    asked = []
    cache = ReadFromCache(lambda t, p: asked.append((t, p)) or 7)
    assert [cache("a", 0), cache("a", 0), cache("a", 1)] == [7, 7, 7]
    assert asked == [("a", 0), ("a", 1)]
    cache.clear()
    cache("a", 0)
    assert asked[-1] == ("a", 0) and len(asked) == 3


def test_a_waiting_group_publishes_its_raw_record_and_a_released_one_nothing():
    from rftbus.streams.headers import H_HELD
    from rftbus.streams.live import DONE, WAITING, Held, pack, published

    waiting = pack(Held(WAITING, 123, 1, "r.raw/1/42", b"1700000000000", b"\x00group\xff", {0: b"fb"}))
    assert published(waiting) == [(H_HELD, b"r.raw/1/42")]
    assert published(pack(Held(DONE, 123, 1))) == []
    assert published(None) == []  # a delete
