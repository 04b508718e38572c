"""`rftbus bench async` through the real CLI on the session broker (small budget), plus its arithmetic."""

from __future__ import annotations

import json

import pytest

from rftbus.apps.bench.async_speedup import _period
from tests.conftest import rftbus_cli


def test_period_is_the_steady_state_slope():
    # steps 1..5 at t = 0, 10, 12, 14, 16: warmup 2 starts the window at step 2 -> 2 s per step
    assert _period([0.0, 10.0, 12.0, 14.0, 16.0], warmup=2) == pytest.approx(2.0)


@pytest.mark.timeout(900)  # the CLI's own limit: two runs of up to 5 minutes each; ~250-290 s on a loaded machine
def test_bench_async_runs_both_modes_and_reports(broker, tmp_path):
    png = tmp_path / "async.png"
    out = rftbus_cli(broker, "bench", "async", "--steps", "5", "--warmup", "2", "--hidden-size", "64",
                     "--layers", "1", "--max-new-tokens", "6", "--minutes", "5", "--plot", str(png), "--json",
                     timeout=900)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    for key in ("speedup", "efficiency", "ideal_speedup", "G_s", "T_s", "period_eta0_s", "period_eta2_s"):
        assert r[key] > 0, (key, r)
    assert 1.0 <= r["ideal_speedup"] <= 2.0
    assert r["efficiency"] == pytest.approx(r["speedup"] / r["ideal_speedup"], rel=0.01)
    # η = 0 is synchronous: the explorer never generates ahead of the trainer's newest version.
    assert r["staleness_mean_eta0"] == 0.0
    assert 0.0 <= r["staleness_mean_eta2"] <= 2.0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
