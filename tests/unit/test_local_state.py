"""streams/local_state.py: the worker's tables on disk survive a clean stop only. After a kill -9 rocksdb can hold a
change whose changelog record never landed (a live group's DONE marker without the release's rejection: one
experience lost in a fresh-clone suite), so an unclean start removes them and Faust rebuilds them from the
changelogs."""

from __future__ import annotations

from rftbus.streams.local_state import mark_clean, open_local_state


def test_tables_on_disk_are_kept_after_a_clean_stop_and_removed_after_a_kill(tmp_path):
    assert open_local_state(tmp_path)  # a first start: no tables
    tables = tmp_path / "v1" / "tables"
    (tables / "live-0.db").mkdir(parents=True)
    (tables / "live-0.db" / "000001.log").write_text("a DONE marker")
    mark_clean(tmp_path)
    assert open_local_state(tmp_path) and (tables / "live-0.db" / "000001.log").exists()  # clean stop: kept
    assert not (tmp_path / "clean-stop").exists()  # a kill from now on leaves no marker
    assert not open_local_state(tmp_path) and not tables.exists()  # killed: rebuilt from the changelogs
    assert open_local_state(tmp_path)  # nothing left to distrust
