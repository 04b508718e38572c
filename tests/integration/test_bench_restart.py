"""`rftbus bench restart` on the session broker, small: the worker killed -9 with live groups held comes back in
both modes (rocksdb kept, and removed), every held group still held after each restart, the figures plotted."""

from __future__ import annotations

import json

from tests.conftest import rftbus_cli


def test_bench_restart_measures_both_modes_and_loses_no_held_group(broker, tmp_path):
    out = rftbus_cli(broker, "bench", "restart", "--groups", "300", "--rounds", "1", "--tokens", "16",
                     "--out", str(tmp_path), "--json", timeout=420)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout)
    assert [row["mode"] for row in r["rounds"]] == ["kept", "rebuilt"]
    assert all(row["ready_s"] > 0 for row in r["rounds"])
    assert r["held_released"] == 0, r  # a held group released (no_feedback) or curated again after a restart
    from PIL import Image

    assert Image.open(tmp_path / "restart.png").size[0] > 400  # a plot was drawn (a small palette PNG: figures.py)
    assert json.loads((tmp_path / "restart.json").read_text())["groups_held"] == 300
