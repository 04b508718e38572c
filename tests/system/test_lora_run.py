"""`rftbus run` with LoRA: on SmolLM2's architecture and chat template (two layers, random weights, seconds a
step) explorer → streams → trainer → adapter versions → explorers swap them in; and a few steps with the real
SmolLM2-135M-Instruct weights. The books balance in both."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO, rftbus_cli
from tests.system.test_run import _env


def _run(broker, tmp_path: Path, config: str, steps: int, minutes: int = 6, **env: str) -> tuple[dict, Path]:
    """`rftbus run CONFIG --max-steps N --minutes M` on the session broker; (its summary, its state dir)."""
    full = {**_env(broker, uuid.uuid4().hex[:6]), **env}
    state = tmp_path / "state"
    out = rftbus_cli(None, "--state-dir", str(state), "run", str(REPO / "configs" / config), "--max-steps",
                     str(steps), "--minutes", str(minutes), "--summary-json", str(tmp_path / "s.json"), env=full,
                     timeout=60 * minutes + 240)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["counts_reconcile"] is True and s["duplicated"] == 0 and s["experiences_lost"] == 0, s
    assert s["stages_dead"] == {} and s["trainer_steps"] >= steps, {k: s.get(k) for k in (
        "stop_reason", "stages_dead", "trainer_steps", "experiences_produced", "experiences_rejected",
        "wall_seconds", "crashes")}
    return s, state


@pytest.mark.timeout(900)  # the run's own limit is 600 s; the eval and the export of its best come after
def test_lora_versions_turn_the_whole_loop(broker, tmp_path, smollm2_two_layers):
    s, state = _run(broker, tmp_path, "toy.yaml", 8, RFTBUS_MODEL__NAME="smollm2-2l",
                    RFTBUS_MODEL__PATH=str(smollm2_two_layers), RFTBUS_TRAINER__LORA__R="8",
                    RFTBUS_TRAINER__LR="0.001", RFTBUS_RUN__EVAL_N="4", RFTBUS_RUN__STUDIO="false",
                    RFTBUS_RUN__EXPERT_EPOCHS="2", RFTBUS_TRAINER__MIX_EXPERT_PER_BATCH="8",
                    # every role on a named device, and the held-out eval on an engine of the explorers' kind
                    RFTBUS_TRAINER__DEVICE="cpu", RFTBUS_EXPLORER__ENGINE__DEVICE="cpu",
                    RFTBUS_RUN__EVAL_DEVICE="cpu", RFTBUS_RUN__EVAL_ENGINE="explorer")
    assert s["versions_published"] >= 2 and s["explorer_newest_version"] >= 1, "no adapter version was swapped in"
    files = sorted((state / "weights" / "smollm2-2l").glob("v*.safetensors"))
    assert files and all(f.stat().st_size < 2_000_000 for f in files), [f.stat().st_size for f in files]
    # The engine's eval swapped adapter versions in and kept the best one's adapter, which exports.
    assert len({p["version"] for p in s["eval_points"]}) >= 2, s["eval_points"]
    best = (state / "run" / "best.safetensors")
    assert best.is_file() and best.stat().st_size < 2_000_000, s["eval_best"]
    out = rftbus_cli(None, "--config", str(REPO / "configs" / "toy.yaml"), "--state-dir", str(state), "export",
                     str(tmp_path / "best"), "--best", env={**_env(broker, "x"), "RFTBUS_MODEL__NAME": "smollm2-2l",
                                                             "RFTBUS_MODEL__PATH": str(smollm2_two_layers),
                                                             "RFTBUS_TRAINER__LORA__R": "8"}, timeout=300)
    assert out.returncode == 0 and f"best eval: v{s['eval_best']['version']}" in out.stdout, out.stdout + out.stderr


def test_the_real_chat_model_runs_the_loop_with_lora(broker, tmp_path, smollm2_folder):
    """A step of `make demo-real`'s config with the real weights (~1.5 minutes): every process loads the
    preset, the trainer publishes adapter versions under 1 % of the model (one step shows it as well as two). The
    streams keep zero-variance groups (advantages 0), so the first batch is a step: this is about the processes and
    the adapter's size, not learning, and waiting for groups with variance cost the suite a minute or more."""
    s, state = _run(broker, tmp_path, "real-times.yaml", 1, RFTBUS_MODEL__CACHE_DIR=str(smollm2_folder.parent),
                    RFTBUS_STREAMS__DROP_ZERO_VARIANCE="false",
                    RFTBUS_RL__GROUP_SIZE="4", RFTBUS_RL__BATCH_GROUPS="2", RFTBUS_RUN__EVAL_N="8",
                    RFTBUS_RUN__TASKS="40", RFTBUS_RUN__TASK_PASSES="1", RFTBUS_RUN__EVAL_EVERY_VERSIONS="1",
                    RFTBUS_EXPLORER__SAMPLING__MAX_NEW_TOKENS="12", RFTBUS_TRAINER__EVAL_MAX_NEW_TOKENS="12")
    assert s["eval_reward_initial"] is not None
    files = sorted((state / "weights" / "smollm2-135m-instruct").glob("v*.safetensors"))
    assert files and all(f.stat().st_size < 0.01 * 538_000_000 for f in files), [f.stat().st_size for f in files]
