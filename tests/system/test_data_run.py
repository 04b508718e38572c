"""`rftbus run` on a team's own data (#33), through the real broker: the shipped GSM8K-format JSONL with its
held-out eval file, the real SmolLM2-135M-Instruct with LoRA, reward `math` (math-verify) against the GSM8K
answer field, an eval curve; and a run on bad data refused before anything starts, naming file and line."""

from __future__ import annotations

import json
import uuid

import pytest

from rftbus.apps.bench.processes import read_all
from rftbus.ground.config import load_config
from rftbus.ground.schemas import make_codec
from tests.conftest import REPO, rftbus_cli
from tests.system.test_lora_run import _run
from tests.system.test_run import _env

DATA = REPO / "data" / "gsm8k-mini"


@pytest.mark.timeout(900)
def test_a_jsonl_taskset_with_held_out_eval_and_math_verify(broker, tmp_path, smollm2_folder):
    """The real weights answer 2-4 % of these right in 32 tokens, so about one group in twelve has reward
    variance: waiting for two such groups cost 140-640 s (a shared machine once ended 6 minutes without a step).
    What this proves is the data path (file, template, system prompt, math-verify against the answer field, the
    held-out eval), not learning, so the streams keep zero-variance groups (`streams.drop_zero_variance: false`,
    their GRPO advantages are 0) and the trainer steps on its first batch. The run stops at that step (the trainer
    holds there): the final eval scores the version it published, so the curve has v0 and v1."""
    s, state = _run(broker, tmp_path, "real-gsm8k-mini.yaml", 1, minutes=8,
                    RFTBUS_MODEL__CACHE_DIR=str(smollm2_folder.parent), RFTBUS_TASKSET__PATH=str(DATA / "train.jsonl"),
                    RFTBUS_TASKSET__EVAL__PATH=str(DATA / "eval.jsonl"), RFTBUS_RL__GROUP_SIZE="4", RFTBUS_RL__BATCH_GROUPS="2", RFTBUS_RUN__EVAL_N="8",
                    RFTBUS_RUN__TASKS="24", RFTBUS_RUN__TASK_PASSES="4", RFTBUS_RUN__EVAL_EVERY_VERSIONS="1",
                    RFTBUS_EXPLORER__SAMPLING__MAX_NEW_TOKENS="32", RFTBUS_TRAINER__EVAL_MAX_NEW_TOKENS="32",
                    RFTBUS_STREAMS__DROP_ZERO_VARIANCE="false")
    assert "zero_variance" not in s["experiences_rejected"], s["experiences_rejected"]
    points = s["eval_points"]
    assert len(points) >= 2 and points[0]["version"] == 0 and points[-1]["version"] >= 1, points  # a curve
    assert all(p["n"] == 8 and 0 <= p["reward"] <= 1 and "mean_parsed" in p and "mean_timeout" in p for p in points), points
    assert s["experiences_rejected"].get("task_failed", 0) == 0
    # the explorers were only ever given train tasks: no eval question reached the tasks topic
    cfg = load_config(path=state / "run" / "config.yaml", environ={})
    eval_questions = {json.loads(line)["question"] for line in (DATA / "eval.jsonl").read_text().splitlines()}
    published = read_all(cfg, cfg.topics.tasks.name, decode=make_codec(None).deserializer(), idle_s=0.5)
    assert published and not [t for t in published if any(q in t.prompt for q in eval_questions)]
    assert all(t.messages and t.messages[0]["role"] == "system" for t in published)  # the taskset's system prompt


def test_a_run_on_bad_data_refuses_to_start_naming_file_and_line(broker, tmp_path):
    bad = tmp_path / "mine.jsonl"
    bad.write_text('{"question": "1+1?", "answer": "2"}\n{"question": "2+2?", "answer": ["4"]}\n{"answer": "4"}\n')
    env = {**_env(broker, uuid.uuid4().hex[:6]), "RFTBUS_TASKSET__PATH": str(bad)}
    out = rftbus_cli(None, "--state-dir", str(tmp_path / "state"), "run", str(REPO / "configs" / "real-gsm8k-mini.yaml"),
                     "--minutes", "2", env=env, timeout=120)
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert f"{bad}:2: column 'answer' (answer) is a list" in text, text[-2000:]
    assert f"{bad}:3: taskset.template: 'question' is undefined in this row" in text, text[-2000:]
    assert "2 bad rows" in text and "Traceback" not in text


def test_a_data_taskset_scored_by_the_builtin_scorer_is_refused(broker, tmp_path):
    conf = tmp_path / "c.yaml"
    conf.write_text((REPO / "configs" / "real-gsm8k-mini.yaml").read_text().replace(
        "rewards: [{name: math, weight: 1.0}]", "rewards: [{name: taskset, weight: 1.0}]"))
    env = {**_env(broker, uuid.uuid4().hex[:6]), "RFTBUS_TASKSET__PATH": str(DATA / "train.jsonl"),
           "RFTBUS_TASKSET__EVAL__PATH": str(DATA / "eval.jsonl")}
    out = rftbus_cli(None, "--state-dir", str(tmp_path / "state"), "run", str(conf), "--minutes", "2", env=env,
                     timeout=120)
    assert out.returncode != 0 and "reward `taskset` is a built-in taskset's own scorer" in out.stdout + out.stderr, \
        (out.stdout + out.stderr)[-2000:]
