"""Scoring the snapshots of `rftbus bench peer` after both runs: the same eval for both sides.

Each side leaves its weights with the wall time they existed at: TRL's adapter after every optimizer step
(peer_trl.py), rftbus's published versions in its weight store (kept whole for the bench, the file's
mtime is when it was published). They are scored here, one after the other on the quiet machine, with the
project's own `evaluate` on the config's held-out prompts, greedy, the config's new-token budget, the explorers'
rewards: what `rftbus run` reports as its held-out eval.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rftbus.ground.config import Config


@dataclass
class Snapshot:
    seconds: float  # since the side's command started
    label: str  # "step 3" / "v7"
    path: Path


def trl_snapshots(folder: Path) -> list[Snapshot]:
    from rftbus.apps.bench.peer_trl import SNAPSHOTS, STEPS

    out = []
    log = folder / STEPS
    for line in log.read_text().splitlines() if log.exists() else []:
        rec = json.loads(line)
        path = folder / SNAPSHOTS / f"step-{rec['step']:06d}.safetensors"
        if path.exists():
            out.append(Snapshot(float(rec["seconds"]), f"step {rec['step']}", path))
    return out


def rftbus_snapshots(state_dir: Path, model: str, started: float) -> list[Snapshot]:
    """Every version v >= 1 in the run's weight store, at its publish time (v0 is the base, scored once)."""
    folder = state_dir / "weights" / model
    out = []
    for path in folder.glob("v*.safetensors"):
        m = re.fullmatch(r"v(\d+)\.safetensors", path.name)
        if m and int(m.group(1)) > 0:
            out.append(Snapshot(round(path.stat().st_mtime - started, 2), f"v{m.group(1)}", path))
    return sorted(out, key=lambda s: s.seconds)


def thin(snaps: list[Snapshot], most: int) -> list[Snapshot]:
    """At most `most` snapshots, evenly spread, the last always kept."""
    if len(snaps) <= most:
        return snaps
    step = len(snaps) / most
    picked = [snaps[int(i * step)] for i in range(most - 1)] + [snaps[-1]]
    return sorted({id(s): s for s in picked}.values(), key=lambda s: s.seconds)


class Scorer:
    """The base model once, with a LoRA adapter swapped in per snapshot."""

    def __init__(self, cfg: Config, threads: int | None = None):
        import torch

        from rftbus.ground.models.loading import load_policy, load_tokenizer
        from rftbus.ground.models.lora import wrap
        from rftbus.ground.models.prompt import prompt_format
        from rftbus.ground.rewards import make_rewards
        from rftbus.ground.tasksets.data import open_taskset

        if threads:
            torch.set_num_threads(threads)
        self.cfg = cfg
        tok = load_tokenizer(cfg.model)
        self.fmt = prompt_format(tok, cfg.model)
        model = load_policy(cfg.model, tok)
        self.lora = cfg.trainer.lora is not None
        self.model: Any = wrap(model, cfg.trainer.lora) if cfg.trainer.lora is not None else model
        self.base_state: dict[str, Any] = {} if self.lora else {k: v.clone() for k, v in model.state_dict().items()}
        self.taskset = open_taskset(cfg.taskset)
        self.rewards = make_rewards(cfg.explorer.rewards)

    def _eval(self) -> float:
        from rftbus.trainer.evaluate import evaluate

        n, new = self.cfg.run.eval_n, self.cfg.trainer.eval_max_new_tokens or self.cfg.explorer.sampling.max_new_tokens
        return float(evaluate(self.model, self.fmt, self.taskset, n, max_new_tokens=new, scorer=self.rewards)["mean_reward"])

    def base(self) -> float:
        if not self.lora:
            self.model.load_state_dict(self.base_state)
            return self._eval()
        with self.model.disable_adapter():
            return self._eval()

    def trl(self, path: Path) -> float:
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        if not self.lora:  # full weights: TRL's model.state_dict() has the names load_policy's model has
            self.model.load_state_dict(load_file(str(path)), strict=True)
            return self._eval()
        result: Any = set_peft_model_state_dict(self.model, load_file(str(path)))
        if result.unexpected_keys:
            raise ValueError(f"{path}: adapter keys the model does not have: {result.unexpected_keys[:3]}")
        return self._eval()

    def rftbus(self, path: Path) -> float:
        from rftbus.ground.models.lora import load_version
        from rftbus.ground.weights.store import decode_payload

        self.model = load_version(self.model, decode_payload(path.read_bytes(), str(path)))
        return self._eval()


def crossing(curve: list[tuple[float, float]], target: float) -> float | None:
    """The first time the eval reached `target` (None: never)."""
    return next((s for s, r in curve if r >= target - 1e-9), None)


def at(curve: list[tuple[float, float]], seconds: float) -> float | None:
    """The eval of the newest weights that existed at `seconds`."""
    before = [r for s, r in curve if s <= seconds]
    return before[-1] if before else None


def side_result(curve: list[tuple[float, float]], base: float, steps: list[float], marks: list[float],
                lift: float) -> dict[str, Any]:
    gaps = [b - a for a, b in zip(steps, steps[1:])]
    return {
        "curve": [[round(s, 1), round(r, 4)] for s, r in curve],
        f"to_base_plus_{lift:.2f}_s": crossing(curve, base + lift),
        "eval_at": {f"{m / 60:g}min": at(curve, m) for m in marks},
        "steps": len(steps), "first_step_s": steps[0] if steps else None,
        "median_step_s": round(sorted(gaps)[len(gaps) // 2], 2) if gaps else None,
    }
