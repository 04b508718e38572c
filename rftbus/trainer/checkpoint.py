"""Checkpoints that tie the model to the stream: written atomically, then committed to Kafka.

A checkpoint is a folder `step-<n>-<gen>/` holding DeepSpeed's model, optimizer and scheduler states,
every rank's RNG state, the lineage segment (experience ids trained since the previous
checkpoint) and `manifest.json` (step, weight version, every rank's consumer positions: one plain
offset per partition, the first record not yet trained or rejected). It is
written under `.tmp-step-<n>-<gen>/`, fsynced, and renamed: a folder named `step-*` with a manifest is
complete by construction, and a crash at any point leaves the previous one as the latest.

`lineage.jsonl` beside the checkpoints is the trained history of the model's lineage, one line
per (step, rank). Its lines for a checkpoint are appended after the rename; the manifest records
the file's length before them, so a restart truncates any lines from rolled-back steps and
re-appends the segment (idempotent, whatever the crash point was).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from rftbus.ground.schemas import now_ms
from rftbus.trainer.dist import all_gather, barrier

DS_TAG = "ds"
_STEP = re.compile(r"^step-(\d+)-(\d+)$")  # step-<step>-<generation>
SEGMENT = "lineage-segment.jsonl"


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def positions_to_json(pos: dict[tuple[str, int], int]) -> list[dict]:
    return [{"topic": t, "partition": p, "offset": off} for (t, p), off in sorted(pos.items())]


def positions_from_json(items: list[dict]) -> dict[tuple[str, int], int]:
    return {(d["topic"], int(d["partition"])): int(d["offset"]) for d in items}


@dataclass
class Manifest:
    step: int
    version: int  # the weight version these weights are (published right after the checkpoint)
    world: int
    positions: list[list[dict]]  # per rank
    lineage_bytes_before: int
    loss: str
    created_at: int

    def positions_of(self, rank: int) -> dict[tuple[str, int], int]:
        return positions_from_json(self.positions[rank])


def has_frozen(engine) -> bool:
    """Whether some of the model's weights do not train (LoRA's base): checkpoints then hold only the others."""
    return any(not p.requires_grad for p in engine.module.parameters())


class Checkpoints:
    def __init__(self, root: Path, rank: int, world: int):
        self.root = Path(root)
        self.rank, self.world = rank, world
        self.lineage = self.root / "lineage.jsonl"
        self.root.mkdir(parents=True, exist_ok=True)

    def latest(self) -> tuple[Path, Manifest] | None:
        found = self._complete()
        if not found:
            return None
        path = found[-1][1]
        return path, Manifest(**json.loads((path / "manifest.json").read_text()))

    def _complete(self) -> list[tuple[tuple[int, int], Path]]:
        found = []
        for d in self.root.iterdir():
            m = _STEP.match(d.name)
            if m and (d / "manifest.json").exists():
                found.append(((int(m.group(1)), int(m.group(2))), d))
        return sorted(found)

    # -- saving (collective: every rank calls) ---------------------------------------------------
    def save(self, engine, step: int, version: int, positions: list[list[dict]], segment: list[dict],
             loss: str) -> Path:
        # A second checkpoint at the same step (only rejections moved the positions) gets the next
        # generation number, so the rename never has to replace a complete checkpoint.
        gen = 1 + max([g for (s, g), _ in self._complete() if s == step], default=-1) if self.rank == 0 else 0
        gen = all_gather(gen, self.world)[0]
        tmp = self.root / f".tmp-step-{step:08d}-{gen:04d}"
        final = self.root / f"step-{step:08d}-{gen:04d}"
        if self.rank == 0 and tmp.exists():
            shutil.rmtree(tmp)
        barrier(self.world)
        # frozen weights (a LoRA run's base model: 538 MB for SmolLM2-135M, 2 s a step) are the model folder's,
        # rebuilt the same at every start: only what trains is saved
        engine.save_checkpoint(str(tmp), tag=DS_TAG, client_state={"step": step}, save_latest=False,
                               exclude_frozen_parameters=has_frozen(engine))
        torch.save(rng_state(), tmp / f"rng-{self.rank}.pt")
        barrier(self.world)
        if self.rank == 0:
            with open(tmp / SEGMENT, "w") as f:
                f.writelines(json.dumps(line) + "\n" for line in segment)
            manifest = Manifest(step=step, version=version, world=self.world, positions=positions,
                                lineage_bytes_before=self.lineage.stat().st_size if self.lineage.exists() else 0,
                                loss=loss, created_at=now_ms())
            (tmp / "manifest.json").write_text(json.dumps(asdict(manifest), indent=1))
            for dirpath, _, files in os.walk(tmp):
                for name in files:
                    fsync_path(Path(dirpath) / name)
                fsync_path(Path(dirpath))
            os.replace(tmp, final)
            fsync_path(self.root)
            self._append_lineage(manifest.lineage_bytes_before, final / SEGMENT)
        barrier(self.world)
        return final

    def _append_lineage(self, before: int, segment: Path) -> None:
        """Truncate to `before` (drops rolled-back lines), append the segment, fsync."""
        with open(self.lineage, "ab") as f:
            f.truncate(before)
            f.write(segment.read_bytes())
            f.flush()
            os.fsync(f.fileno())

    def prune(self, keep: int) -> None:
        if self.rank != 0:
            return
        for _, d in self._complete()[:-keep]:
            shutil.rmtree(d, ignore_errors=True)
        for d in self.root.glob(".tmp-step-*"):
            shutil.rmtree(d, ignore_errors=True)

    # -- restoring ---------------------------------------------------------------------------------
    def restore(self, engine, path: Path, manifest: Manifest) -> None:
        if manifest.world != self.world:
            raise RuntimeError(f"checkpoint {path.name} was written by {manifest.world} rank(s), this run has "
                               f"{self.world}; resume with the same number of ranks")
        load_path, _ = engine.load_checkpoint(str(path), tag=DS_TAG, load_optimizer_states=True,
                                              load_lr_scheduler_states=True, load_module_strict=not has_frozen(engine))
        if load_path is None:
            raise RuntimeError(f"DeepSpeed could not load checkpoint {path}")
        set_rng_state(torch.load(path / f"rng-{self.rank}.pt", weights_only=False))
        if self.rank == 0:
            self._append_lineage(manifest.lineage_bytes_before, path / SEGMENT)
        barrier(self.world)


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


def read_lineage(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
