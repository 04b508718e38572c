"""TensorBoard: event files under <state_dir>/tensorboard/loop (the trainer writes its own steps beside it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rftbus.consumers.trackers.base import Point


class TensorBoardTracker:
    name = "tensorboard"

    def __init__(self, folder: Path):
        self.folder = folder
        self.writer: Any = None

    def start(self, run_name: str, params: dict[str, Any]) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(self.folder))
        self.writer.add_text("run/config", "\n".join(f"    {k}: {v}" for k, v in sorted(params.items())), 0)

    def log(self, point: Point) -> None:
        for k, v in point.named().items():
            self.writer.add_scalar(k, v, point.step, walltime=point.at)
        if point.prefix == "eval":
            for k, v in point.values.items():  # eval against the version too: what was scored
                self.writer.add_scalar(f"eval_by_version/{k}", v, point.version, walltime=point.at)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
