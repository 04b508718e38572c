"""The first hour's traps (#60), each through the real CLI as a new user meets it: a reward file that does not import
said in one line with its file and line, a NaN reward, a model folder that is not there, answers longer than the
model's context, a typo in a key, a list set from a variable, the data's columns handed to rewards with their types,
and `check`'s output free of third-party warnings."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.integration.test_first_run import RFTBUS, _cli, _project

TYPED = '''
def typed(prompts, completions, answer, tests, level, **kwargs):
    ok = isinstance(tests[0], list) and tests[0] == [1, 2] and isinstance(level[0], int)
    return [1.0 if ok else 0.0 for _ in completions]
'''


def _errors(out: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]


@pytest.mark.parametrize("source,expect", [
    ("def score(task, response)\n    return 1.0\n", "bad_reward.py:1: SyntaxError"),
    ("def score(task, response):\n    return 1.0\n\nx = not_defined + 1\n", "bad_reward.py:4: NameError"),
])
def test_a_reward_file_that_does_not_import_is_one_line_naming_its_file_and_line(tmp_path, source, expect):
    cfg = _project(tmp_path, ["bad_reward:score"])
    (cfg.parent / "bad_reward.py").write_text(source)
    out = _cli("check", str(cfg), cwd=cfg.parent, timeout=60)
    assert out.returncode == 1
    assert len(out.stderr.strip().splitlines()) <= 3, out.stderr
    assert any(expect in e for e in _errors(out)), out.stderr
    assert "Traceback" not in out.stdout + out.stderr


def test_a_nan_reward_fails_check_naming_the_reward(tmp_path):
    cfg = _project(tmp_path, ["nan_reward:score"])
    (cfg.parent / "nan_reward.py").write_text("def score(task, response):\n    return float('nan')\n")
    out = _cli("check", str(cfg), cwd=cfg.parent, timeout=60)
    assert out.returncode == 1 and any("'score' returned nan, not a finite number" in e for e in _errors(out)), \
        out.stdout + out.stderr


def test_a_model_folder_that_is_not_there_is_said_with_where_it_was_looked_for(tmp_path):
    cfg = _project(tmp_path, ["my_rewards:as_float"], model={"path": "./models/mine"})
    out = _cli("check", str(cfg), cwd=cfg.parent, timeout=60)
    want = f"model.path './models/mine': no such folder (looked for {cfg.parent / 'models' / 'mine'})"
    assert out.returncode == 1 and any(want in e for e in _errors(out)), out.stderr
    assert "hub" not in out.stderr


def test_answers_past_the_context_fail_check_and_check_prints_no_third_party_warning(tmp_path, smollm2_two_layers):
    sampling = {"temperature": 1.0, "max_new_tokens": 16}
    cfg = _project(tmp_path, ["my_rewards:as_float"], model={"path": str(smollm2_two_layers)},
                   explorer={"sampling": sampling, "rewards": [{"name": "my_rewards:as_float", "weight": 1.0}]})
    out = _cli("check", str(cfg), cwd=cfg.parent, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    others = [ln for ln in out.stderr.splitlines() if ln.strip() and not ln.startswith(("warning:", "error:"))]
    assert others == [], out.stderr  # (DeepSpeed's accelerator guess and the hub's retries were here)
    for new, expect in [(9000, "max_new_tokens 9000 is past the model's context of 8192"),
                        (8180, "and with explorer.sampling.max_new_tokens 8180 that is past the model's context")]:
        data = json.loads(cfg.read_text())
        data["explorer"]["sampling"]["max_new_tokens"] = new
        cfg.write_text(json.dumps(data))
        out = _cli("check", str(cfg), cwd=cfg.parent, timeout=120)
        assert out.returncode == 1 and any(expect in e for e in _errors(out)), out.stderr


def test_every_data_column_reaches_a_reward_with_its_type(tmp_path):
    cfg = _project(tmp_path, ["typed_reward:typed"])
    (cfg.parent / "typed_reward.py").write_text(TYPED)
    rows = [{"q": f"What is {a} plus 1?", "a": str(a + 1), "tests": [1, 2], "level": a} for a in range(20)]
    (cfg.parent / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = _cli("check", str(cfg), cwd=cfg.parent, timeout=60)
    assert out.returncode == 0 and "reference answer scores 1" in out.stdout, out.stdout + out.stderr


def test_a_typo_in_a_key_gets_a_suggestion_and_a_list_is_set_from_a_variable_as_json(tmp_path):
    cfg = tmp_path / "typo.yaml"
    cfg.write_text("rl:\n  group_sise: 4\ntrainer:\n  lrr: 0.1\n")
    out = _cli("--config", str(cfg), "config", cwd=tmp_path)
    assert out.returncode == 1
    assert "rl.group_sise: unknown key (did you mean group_size?)" in out.stderr, out.stderr
    assert "trainer.lrr: unknown key (did you mean lr?)" in out.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith("RFTBUS_") and k != "PYTHONPATH"}
    run = lambda value: subprocess.run(  # noqa: E731
        [RFTBUS, "config", "trainer.lora"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={**env, "RFTBUS_TRAINER__LORA__TARGET_MODULES": value})
    out = run('["q_proj", "v_proj"]')
    assert out.returncode == 0 and 'target_modules: ["q_proj", "v_proj"]' in out.stdout, out.stdout + out.stderr
    out = run('["q_proj", ')
    assert out.returncode == 1 and "RFTBUS_TRAINER__LORA__TARGET_MODULES" in out.stderr and "JSON" in out.stderr


def test_rftbus_config_describes_every_key(tmp_path):
    out = _cli("config", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    keys = [ln for ln in out.stdout.splitlines() if ln.strip() and not ln.lstrip().startswith("- ")]
    assert len(keys) > 400 and [ln for ln in keys if "  # " not in ln] == []


@pytest.mark.parametrize("fmt", ["csv", "parquet", "hf"])
def test_init_reads_every_format_the_taskset_reads(tmp_path, smollm2_two_layers, fmt):
    import datasets

    rows = [{"question": f"What is {a} times 3?", "solution": str(3 * a)} for a in range(30)]
    ds = datasets.Dataset.from_list(rows)
    data = tmp_path / {"csv": "qa.csv", "parquet": "qa.parquet", "hf": "qa"}[fmt]
    {"csv": ds.to_csv, "parquet": ds.to_parquet, "hf": ds.save_to_disk}[fmt](str(data))
    out = _cli("init", "--model", str(smollm2_two_layers), "--data", data.name, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"30 rows of {data.name} (question -> solution)" in out.stdout and "scores 1" in out.stdout


def test_data_beside_the_config_is_found_from_anywhere_and_a_missing_file_says_where_it_was_looked_for(tmp_path):
    cfg = _project(tmp_path, ["my_rewards:as_float"])
    data = json.loads(cfg.read_text())
    data["taskset"]["path"] = "train.jsonl"  # relative: beside the config, as the reward module is
    cfg.write_text(json.dumps(data))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = _cli("check", str(cfg), cwd=elsewhere, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    (cfg.parent / "train.jsonl").unlink()
    out = _cli("check", str(cfg), cwd=elsewhere, timeout=60)
    want = f"looked for {cfg.parent / 'train.jsonl'} and {elsewhere / 'train.jsonl'}"
    assert out.returncode == 1 and any(want in e for e in _errors(out)), out.stderr


def test_an_eval_larger_than_the_held_out_split_fails_check(tmp_path):
    """run.eval_n past the distinct held-out problems of a built-in taskset: every eval point of the run would fail
    (and did, on the times tables at 80 of 54), so `check` refuses it, naming the most it can be."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("taskset: {name: times, params: {low: 2, high: 9, high_b: 12}}\nrun: {eval_n: 80, tasks: 100}\n")
    out = _cli("check", str(cfg), cwd=tmp_path, timeout=60)
    want = "run.eval_n 80 is more than the 54 distinct held-out problems taskset times has: set run.eval_n: 54 or fewer"
    assert out.returncode == 1 and any(want in e for e in _errors(out)), out.stdout + out.stderr
