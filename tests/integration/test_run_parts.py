"""Pieces of `rftbus run` that need no broker: the children it starts, how its summary names paths."""

from __future__ import annotations

import io
import os
import subprocess

from rich.console import Console

from rftbus.apps.run.job import MainJob
from tests.conftest import make_config


def test_trainer_threads_reach_the_trainer_child_and_torch_uses_them(tmp_path):
    """`trainer.threads` is the trainer child's OMP_NUM_THREADS (torch's intra-op threads there); every other
    child keeps one thread, since they share the cores. Unset, the explorers get half the cores between them and
    the trainer the rest (run/cores.py)."""
    cfg = make_config(tmp_path, 9, **{"trainer.threads": 2})
    quiet = Console(file=io.StringIO())
    specs = {s.name: s for s in MainJob(cfg, quiet, quiet).child_specs(tmp_path / "config.yaml")}
    assert specs["trainer"].env["OMP_NUM_THREADS"] == "2"
    assert {s.env["OMP_NUM_THREADS"] for n, s in specs.items() if n != "trainer"} == {"1"}
    auto = make_config(tmp_path, 9, **{"run.explorers": 2})
    from rftbus.apps.run.cores import split

    assert (split(auto, 2).trainer, split(auto, 2).explorer) == (1, 1)  # never fewer than one
    assert (split(auto, 16).trainer, split(auto, 16).explorer) == (8, 4)  # half to the explorers, the rest to it
    one = make_config(tmp_path, 9)
    assert (split(one, 2).trainer, split(one, 2).explorer) == (1, 1)
    out = subprocess.run([specs["trainer"].argv[0], "-c", "import torch; print(torch.get_num_threads())"],
                         env={**os.environ, **specs["trainer"].env}, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "2"


def test_the_summary_names_paths_under_the_working_directory_relatively(tmp_path, monkeypatch):
    """A summary kept in the repository (docs/runs/) must not carry the machine's folders."""
    from rftbus.apps.run.summary import shown

    monkeypatch.chdir(tmp_path)
    assert shown(tmp_path / ".rftbus" / "r" / "run" / "eval_vs_time.png") == ".rftbus/r/run/eval_vs_time.png"
    assert shown(".rftbus/r/run/best.safetensors") == ".rftbus/r/run/best.safetensors"
    elsewhere = tmp_path.parent / "other" / "x.png"
    assert shown(elsewhere) == str(elsewhere)  # outside it: as it was


def test_further_trainers_are_children_with_their_own_config(tmp_path):
    """run.trainers: one more trainer child each, its config the children's with that trainer's section (lineage,
    consumer group, checkpoints), its threads its own when set."""
    from rftbus.ground.config import load_config, write_config

    cfg = make_config(tmp_path, 9, **{"gate.enabled": True, "trainer.lora": {"r": 2, "alpha": 4,
                                                                              "target_modules": ["q_proj"]},
                                      "run.trainers": [{"lineage": "hot", "lr": 0.5, "threads": 1}]})
    path = write_config(cfg, tmp_path / "config.yaml")
    quiet = Console(file=io.StringIO())
    specs = {s.name: s for s in MainJob(cfg, quiet, quiet).child_specs(path)}
    hot = specs["trainer-hot"]
    assert hot.env["OMP_NUM_THREADS"] == "1" and hot.argv[-1] == "train"
    t = load_config(hot.argv[hot.argv.index("--config") + 1]).trainer
    assert (t.lineage, t.lr, t.group_id) == ("hot", 0.5, f"{cfg.trainer.group_id}-hot")
    assert specs["trainer"].argv[specs["trainer"].argv.index("--config") + 1] == str(path)
