"""`rftbus bench broker` on real Kafka nodes: both settings started, loaded and measured, the figures plotted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rftbus.ground.config import BrokerConfig
from tests.conftest import JARS, _free_pair


def test_bench_broker_measures_both_settings_on_real_nodes(tmp_path):
    port = _free_pair()
    out = subprocess.run([str(Path(sys.executable).parent / "rftbus"), "--state-dir", str(tmp_path), "bench", "broker",
                          "--rounds", "1", "--messages", "500", "--idle", "5", "--port", str(port), "--json",
                          "--plot", str(tmp_path / "broker.png")],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "RFTBUS_BROKER__LIBS_DIR": str(JARS)})
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout)
    assert set(r["rounds"]) == {"stock", "rftbus"} and all(len(v) == 1 for v in r["rounds"].values())
    assert r["settings"]["rftbus"]["jvm_opts"] == BrokerConfig().jvm_opts != r["settings"]["stock"]["jvm_opts"]
    for rs in r["rounds"].values():
        m = rs[0]
        assert m["start_cpu_s"] > 0 and m["burst_cpu_s"] > 0 and m["burst_s"] > 0 and 0 <= m["idle_core_share"] < 2, m
    assert (tmp_path / "broker.png").stat().st_size > 10_000
