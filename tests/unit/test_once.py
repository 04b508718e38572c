"""rftbus/ground/once.py: a cached folder is made by one process however many ask at once, and never again once its
marker is there. No broker."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

from rftbus.ground.once import once


def _make(folder: Path, log: Path) -> None:
    with open(log, "a") as f:
        f.write("made\n")
    time.sleep(0.3)  # (long enough for the others to wait on the lock)
    tmp = folder.with_name(folder.name + ".tmp")
    tmp.mkdir()
    (tmp / "done").write_text("1")
    tmp.rename(folder)


def _ask(folder: str, log: str) -> None:
    once(Path(folder), "done", lambda: _make(Path(folder), Path(log)))


def test_four_processes_at_once_make_the_folder_once(tmp_path):
    folder, log = tmp_path / "cache" / "thing", tmp_path / "log"
    procs = [multiprocessing.get_context("fork").Process(target=_ask, args=(str(folder), str(log))) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert [p.exitcode for p in procs] == [0] * 4
    assert log.read_text() == "made\n" and (folder / "done").is_file()
    once(folder, "done", lambda: (_ for _ in ()).throw(AssertionError("made again")))
