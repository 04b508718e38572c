"""A user's first run, through the real CLI (#45): their rewards in a file beside the config (a float, a dict, TRL's
signature), `rftbus check` naming each broken piece in one line with a non-zero exit, and `rftbus run` refusing
to start on what `check` refuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

RFTBUS = str(Path(sys.executable).parent / "rftbus")

REWARDS = '''
def as_float(task, response):
    return float(response.strip() == (task.answer or "").strip())

def as_dict(task, response):
    return {"reward": response.strip() == (task.answer or "").strip(), "length": len(response)}

def trl_style(prompts, completions, answer, **kwargs):
    return [1.0 if c.strip() == a else 0.0 for c, a in zip(completions, answer)]

def broken(task, response):
    return "yes"
'''
EXITS = "import sys\nsys.exit(0)\n"  # a reward module that ends the process at import (check said nothing, #63)


def _project(tmp_path: Path, rewards: list[str], **extra) -> Path:
    folder = tmp_path / "project"
    folder.mkdir(exist_ok=True)
    (folder / "my_rewards.py").write_text(REWARDS)
    rows = [{"q": f"What is {a} plus {b}?", "a": str(a + b)} for a in range(10) for b in range(3)]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = {"state_dir": str(tmp_path / "state"),
           "taskset": {"name": "sums", "path": str(folder / "train.jsonl"), "fields": {"prompt": "q", "answer": "a"},
                       "eval": {"fraction": 0.2}},
           "explorer": {"rewards": [{"name": r, "weight": 1.0} for r in rewards]}, **extra}
    path = folder / "rftbus.yaml"
    path.write_text(json.dumps(cfg))  # YAML is a superset of JSON
    return path


def _cli(*args: str, cwd: Path, timeout: int = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RFTBUS_") and k != "PYTHONPATH"}
    return subprocess.run([RFTBUS, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def test_rewards_beside_the_config_in_every_shape_score_a_real_row(tmp_path):
    cfg = _project(tmp_path, ["my_rewards:as_float", "my_rewards:as_dict", "my_rewards:trl_style"])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    t = time.monotonic()
    out = _cli("check", str(cfg), cwd=elsewhere)  # not the config's folder: it is found beside the config
    assert out.returncode == 0, out.stdout + out.stderr
    assert time.monotonic() - t < 60
    assert "reference answer scores 3" in out.stdout, out.stdout  # three terms, each 1 on the reference answer


@pytest.mark.parametrize("case,expect", [
    ("model", "model"),
    ("data", "taskset"),
    ("reward_module", "no_such_module"),
    ("reward_value", "returned str"),
    ("reward_exits", "exited the process"),
    ("data_fifo", "not a regular file"),
    ("config_fifo", "not a regular file"),
    ("inf_timeout", "kafka.request_timeout_s"),
])
def test_check_names_each_broken_piece_in_one_line(tmp_path, case, expect):
    rewards = ["my_rewards:as_float"]
    extra: dict = {}
    if case == "model":
        extra["model"] = {"path": str(tmp_path / "no-model-here")}
    if case == "reward_module":
        rewards = ["no_such_module:score"]
    if case == "reward_value":
        rewards = ["my_rewards:broken"]
    if case == "reward_exits":
        rewards = ["exits_at_import:score"]
    if case == "inf_timeout":
        extra["kafka"] = {"request_timeout_s": float("inf")}
    cfg = _project(tmp_path, rewards, **extra)
    (cfg.parent / "exits_at_import.py").write_text(EXITS)
    if case == "data":
        (cfg.parent / "train.jsonl").unlink()
    if case == "data_fifo":
        (cfg.parent / "train.jsonl").unlink()
        os.mkfifo(cfg.parent / "train.jsonl")  # opening it would block `check` for ever
    if case == "inf_timeout":
        cfg.write_text(cfg.read_text().replace("Infinity", ".inf"))  # (json.dumps writes inf as Infinity)
    if case == "config_fifo":
        cfg.unlink()
        os.mkfifo(cfg)
    out = _cli("check", str(cfg), cwd=cfg.parent, timeout=60)
    assert out.returncode == 1, out.stdout + out.stderr
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) >= 1 and expect in (errors[0] if case != "inf_timeout" else out.stderr), out.stderr
    if case == "reward_value":
        assert "docs/REWARDS.md" in out.stderr  # the contract, where it is written


def test_sizes_that_do_not_fit_stop_the_run_before_anything_starts(tmp_path):
    cfg = _project(tmp_path, ["my_rewards:as_float"],
                   run={"tasks": 10, "serve": True, "simulate": True}, simulate={"tasks": 5000})
    out = _cli("check", str(cfg), cwd=cfg.parent)
    assert out.returncode == 1
    assert any("simulate.tasks 5000" in ln for ln in out.stderr.splitlines()), out.stderr
    assert "run.tasks 10 publishes the first 10" in out.stderr  # data cut: said, not silent
    out = _cli("run", str(cfg), cwd=cfg.parent)
    assert out.returncode == 2 and "not started" in out.stderr, out.stdout[-2000:] + out.stderr[-2000:]
    assert not (tmp_path / "state" / "kafka").exists(), "the broker was started"


def test_init_writes_a_checked_real_model_config_from_the_data(tmp_path, smollm2_two_layers):
    folder = tmp_path / "mine"
    folder.mkdir()
    rows = [{"question": f"What is {a} times 3?", "solution": str(3 * a)} for a in range(40)]
    (folder / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = _cli("init", "--model", str(smollm2_two_layers), "--data", "qa.jsonl", cwd=folder)
    assert out.returncode == 0, out.stdout + out.stderr
    text = (folder / "rftbus.yaml").read_text()
    import yaml

    written = yaml.safe_load(text)
    assert written["taskset"]["fields"] == {"prompt": "question", "answer": "solution"} and "lora" in written["trainer"]
    assert written["run"]["tasks"] + written["run"]["eval_n"] == 40  # every train row, every held-out one
    assert "40 rows of qa.jsonl" in out.stdout and "reference answer scores 1" in out.stdout
    assert not [ln for ln in out.stderr.splitlines() if ln.startswith("warning")], out.stderr  # nothing cut
    again = _cli("init", "--model", str(smollm2_two_layers), "--data", "qa.jsonl", cwd=folder)
    assert again.returncode != 0 and "--force" in again.stdout + again.stderr
    (folder / "odd.jsonl").write_text(json.dumps({"text": "x", "y": "1"}) + "\n")
    odd = _cli("init", "other.yaml", "--model", str(smollm2_two_layers), "--data", "odd.jsonl", cwd=folder)
    assert odd.returncode != 0 and "no prompt column among text, y" in odd.stdout + odd.stderr


def test_init_writes_what_it_was_given_as_values_never_as_keys(tmp_path):
    """#63: `init --reward` (and the paths and field names) went into the YAML as they were, so a value could add
    keys. A reward that is no name is refused; odd file names are quoted and read back as they are."""
    folder = tmp_path / "p"
    folder.mkdir()
    data = folder / "odd: {x}, #y.jsonl"
    data.write_text(json.dumps({"prompt": "1+1?", "answer": "2"}) + "\n")
    out = _cli("init", "--model", "smollm2-135m-instruct", "--data", str(data),
               "--reward", "math, weight: 1.0}]\nstate_dir: /etc\n#", cwd=folder)
    assert out.returncode != 0 and "--reward" in out.stderr and "module:function" in out.stderr, out.stderr
    assert not (folder / "rftbus.yaml").exists()
    out = _cli("init", "--model", "smollm2-135m-instruct", "--data", str(data), "--reward", "math", cwd=folder)
    import yaml

    written = yaml.safe_load((folder / "rftbus.yaml").read_text())
    assert written["taskset"]["path"] == str(data) and written["explorer"]["rewards"] == [{"name": "math",
                                                                                          "weight": 1.0}]
    assert written["state_dir"] == ".rftbus/odd-x-y"


def test_a_module_beside_the_config_named_like_the_library_never_replaces_it(tmp_path):
    """#63: the user's folder went on every child's PYTHONPATH, before the standard library, so a `json.py` beside
    the config replaced the library's in every child. Now it is appended after it (RFTBUS_USER_CODE_PATH), the
    user's own modules still import, and `check` says the file is never what is imported."""
    cfg = _project(tmp_path, ["my_rewards:as_float"])
    (cfg.parent / "json.py").write_text("raise SystemExit('the library was shadowed')\n")
    probe = ("import os, subprocess, sys\n"
             "from pathlib import Path\n"
             "from rftbus.apps.cli.context import user_code_on_path\n"
             "from rftbus.apps.run.children import child_env\n"
             f"user_code_on_path(Path({str(cfg)!r}))\n"
             "code = 'from rftbus.apps.cli.context import user_code_on_path; user_code_on_path(None); import json, my_rewards;'"
             " + ' print(json.__file__, my_rewards.__file__)'\n"
             "r = subprocess.run([sys.executable, '-c', code], env={**os.environ, **child_env()}, capture_output=True,"
             " text=True)\n"
             "print(r.stdout, r.stderr)\n")
    out = subprocess.run([sys.executable, "-c", probe], cwd=cfg.parent, capture_output=True, text=True, timeout=120)
    assert "shadowed" not in out.stdout + out.stderr, out.stdout + out.stderr
    lib, mine = out.stdout.split()[:2]
    assert Path(lib).parent != cfg.parent and Path(mine).parent == cfg.parent, out.stdout
    said = _cli("check", str(cfg), cwd=cfg.parent)
    assert said.returncode == 0 and "json.py is named like the standard library's `json`" in said.stdout + \
        said.stderr, said.stdout + said.stderr
