"""Weights & Biases: `run.tracking.wandb_mode` offline (the default: files under <state_dir>/wandb, `wandb sync`
uploads them) or online (needs WANDB_API_KEY)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from rftbus.consumers.trackers.base import Point


class WandbTracker:
    name = "wandb"

    def __init__(self, folder: Path, project: str, mode: Literal["offline", "online"]):
        self.folder, self.project, self.mode = folder, project, mode
        self.run: Any = None

    def start(self, run_name: str, params: dict[str, Any]) -> None:
        import wandb

        self.folder.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(project=self.project, name=run_name, dir=str(self.folder), mode=self.mode,
                              config=params, reinit="create_new",
                              settings=wandb.Settings(console="off", silent=True, x_disable_stats=True))
        self.run.define_metric("trainer/step")
        for prefix in ("train", "eval", "streams"):  # every curve on the trainer's step
            self.run.define_metric(f"{prefix}/*", step_metric="trainer/step")

    def log(self, point: Point) -> None:
        self.run.log({**point.named(), "trainer/step": point.step, "version": point.version})

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
