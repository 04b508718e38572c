"""`rftbus bench peer`'s single-process side: TRL's real GRPOTrainer on the config's model, tasks, rewards and
recipe writes a snapshot per optimizer step with its wall time, and the bench's scorer reads them with the
project's eval. The rftbus side is `rftbus run` itself (tests/system). Figures: docs/BENCHMARKS.md, "rftbus vs TRL"."""

from __future__ import annotations

import json
import subprocess
import sys

from rftbus.apps.bench.peer import _rftbus_config
from rftbus.apps.bench.peer_eval import Scorer, at, crossing, thin, trl_snapshots
from rftbus.ground.config import write_config
from tests.conftest import make_config


def test_trl_peer_snapshots_every_step_and_the_scorer_reads_them(tmp_path):
    cfg = make_config(tmp_path / "state", 9, **{"rl.group_size": 4, "rl.batch_groups": 2, "run.tasks": 16,
                                                 "run.eval_n": 8, "taskset.name": "reverse",
                                                 "explorer.sampling.max_new_tokens": 4, "trainer.lr": 0.01})
    path = write_config(cfg, tmp_path / "config.yaml")
    out = tmp_path / "trl"
    # the clock starts in the script (torch and TRL import after it, 28 s beside a whole run on a loaded machine):
    # 60 s leave several tiny steps
    run = subprocess.run([sys.executable, "-m", "rftbus.apps.bench.peer_trl", "--config", str(path), "--out", str(out),
                          "--minutes", "1.0"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    snaps = trl_snapshots(out)
    assert len(snaps) >= 2, run.stdout[-2000:]
    secs = [s.seconds for s in snaps]
    assert secs == sorted(secs) and 0 < secs[0] < 60 and secs[-1] < 60 + 30  # stopped at the deadline
    assert [json.loads(x)["step"] for x in (out / "steps.jsonl").read_text().splitlines()] == list(range(1, len(snaps) + 1))
    scorer = Scorer(cfg)
    base = scorer.base()
    scores = [scorer.trl(s.path) for s in thin(snaps, 2)]
    assert all(0.0 <= x <= 1.0 for x in [base, *scores])
    assert len(thin(snaps, 2)) == 2 and thin(snaps, 2)[-1] is snaps[-1]
    curve = [(0.0, 0.1), (10.0, 0.3), (20.0, 0.6)]
    assert crossing(curve, 0.55) == 20.0 and crossing(curve, 0.9) is None and at(curve, 15.0) == 0.3


def test_the_rftbus_side_keeps_every_version_and_does_not_stop_early(tmp_path):
    cfg = make_config(tmp_path, 9, **{"run.target_eval_reward": 0.5, "run.max_minutes": 30})
    run = _rftbus_config(cfg, tmp_path / "side", 10.0)
    assert run.state_dir == tmp_path / "side" and run.trainer.keep_versions >= 10**6
    assert run.run.target_eval_reward is None and run.run.max_minutes == 10.0 and not run.run.analytics


def test_trl_is_given_the_batch_rftbus_really_trained_on(tmp_path):
    """--batch matched: answers in the loss per optimizer step (the run's summary), rounded to whole groups;
    --batch fixed: rftbus waits for B groups a step."""
    import pytest
    import typer

    from rftbus.apps.bench.peer import matched_groups, trl_config

    cfg = make_config(tmp_path, 9, **{"rl.group_size": 8, "rl.batch_groups": 8, "trainer.step_wait_s": 5.0})
    side = tmp_path / "rftbus-0"
    with pytest.raises(typer.BadParameter, match="needs the rftbus side's run first"):
        matched_groups(side, 8)
    (side / "run").mkdir(parents=True)
    (side / "run" / "summary.json").write_text(json.dumps({"trainer_steps": 89, "experiences_trained": 1624}))
    assert matched_groups(side, 8) == (2, 1624 / 89)  # 18.2 answers a step: two groups of 8
    assert trl_config(cfg, 2).rl.batch_groups == 2 and cfg.rl.batch_groups == 8
    (side / "run" / "summary.json").write_text(json.dumps({"trainer_steps": 0, "experiences_trained": 0}))
    with pytest.raises(typer.BadParameter, match="no trainer step"):
        matched_groups(side, 8)
    assert _rftbus_config(cfg, tmp_path / "f", 5.0, fixed=True).trainer.step_wait_s is None
    assert _rftbus_config(cfg, tmp_path / "m", 5.0).trainer.step_wait_s == 5.0
