"""rftbus/streams/store.py on a real rocksdb (Faust's store over rocksdict): a change is read at once but reaches the disk
only once its input is committed and its changelog record acknowledged, with that record's offset beside it."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import faust
from faust.streams import _current_event
from faust.types import TP

from rftbus.streams.state import CheckpointedTable
from rftbus.streams.store import CommittedStore


@contextlib.contextmanager
def handling(topic: str, partition: int, offset: int):
    event = SimpleNamespace(message=SimpleNamespace(topic=topic, partition=partition, offset=offset))
    token = _current_event.set(lambda: event)  # (Faust keeps a weak reference: a callable)
    try:
        yield
    finally:
        _current_event.reset(token)


def _store(tmp_path) -> CommittedStore:
    app = faust.App("rftbus-store-test", store="rocksdb://", datadir=str(tmp_path), Table=CheckpointedTable)
    table = app.Table("live", partitions=2, key_type=bytes, value_type=bytes)
    store = table.data
    assert isinstance(store, CommittedStore)
    for p in (0, 1):
        store._db_for_partition(p)
    changelog = table.changelog_topic_name
    app.assignor.assigned_actives = lambda: {TP(changelog, 0), TP(changelog, 1)}
    return store


def test_a_change_waits_in_memory_until_its_input_is_committed(tmp_path):
    store = _store(tmp_path)
    db = store._dbs[0]
    changelog = TP(store.table.changelog_topic_name, 0)
    with handling("raw", 0, 5):
        store._set(b"g1", b"WAITING")
        assert store._get(b"g1") == b"WAITING" and store._contains(b"g1")
    assert db.get(b"g1") is None  # not on disk: a kill now leaves the disk as of the committed inputs
    store.changelog_acked(changelog, 100)
    assert store.committed({TP("raw", 0): 5}) == 0  # raw 5 is the next to read: not committed yet
    assert store.committed({TP("raw", 0): 6}) == 1
    assert db.get(b"g1") == b"WAITING" and db.get(store.offset_key) == b"100"
    assert store.overlay[0] == {}


def test_writes_go_in_order_and_stop_at_the_first_that_may_not(tmp_path):
    store = _store(tmp_path)
    db, changelog = store._dbs[0], TP(store.table.changelog_topic_name, 0)
    with handling("raw", 0, 1):
        store._set(b"a", b"1")
    with handling("joined", 0, 7):
        store._del(b"a")  # released on a grade
    with handling("raw", 0, 2):
        store._set(b"b", b"2")
    for off in (10, 11, 12):
        store.changelog_acked(changelog, off)
    assert store._get(b"a") is None and not store._contains(b"a")
    assert store.committed({TP("raw", 0): 3}) == 1  # `a` set; its delete waits for joined 7, and `b` behind it
    assert db.get(b"a") == b"1" and db.get(b"b") is None and db.get(store.offset_key) == b"10"
    assert store._get(b"a") is None  # the overlay still has the delete
    assert dict(store._iteritems()) == {b"b": b"2"}
    assert store.committed({TP("joined", 0): 8}) == 2
    assert db.get(b"a") is None and db.get(b"b") == b"2" and db.get(store.offset_key) == b"12"
    assert dict(store._iteritems()) == {b"b": b"2"} and store._size() == 1


def test_a_change_whose_changelog_record_is_not_acknowledged_is_not_written(tmp_path):
    store = _store(tmp_path)
    with handling("raw", 1, 0):
        store._set(b"x", b"1")
    assert store.committed({TP("raw", 1): 1}) == 0  # its changelog record may never land: the disk must not have it
    store.changelog_acked(TP(store.table.changelog_topic_name, 1), 3)
    assert store.committed({}) == 1 and store._dbs[1].get(b"x") == b"1"


def test_a_revoked_partition_drops_what_waited(tmp_path):
    store = _store(tmp_path)
    with handling("raw", 0, 0):
        store._set(b"x", b"1")
    store.revoke_partitions(store.table, {TP(store.table.changelog_topic_name, 0)})
    assert 0 not in store.overlay and 0 not in store.queue
