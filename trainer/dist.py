"""Process-group setup for DeepSpeed on this machine, and the few collectives the loop needs.

One process: the env vars DeepSpeed expects (MASTER_ADDR/PORT, RANK, WORLD_SIZE, LOCAL_RANK) are
filled in; several (torchrun / `rftbus train --ranks N`): the launcher sets them. Without CUDA,
DeepSpeed's CPU accelerator runs collectives over gloo. Must run before `import deepspeed`.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Dist:
    rank: int
    world: int
    local_rank: int


def prepare_env() -> Dist:
    env = os.environ
    if "RANK" not in env or "WORLD_SIZE" not in env:
        env.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    env.setdefault("LOCAL_RANK", env["RANK"])
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    env.setdefault("MASTER_PORT", str(free_port()))
    if "DS_ACCELERATOR" not in env:
        import torch

        env["DS_ACCELERATOR"] = "cuda" if torch.cuda.is_available() else "cpu"
    return Dist(int(env["RANK"]), int(env["WORLD_SIZE"]), int(env["LOCAL_RANK"]))


def all_gather(obj: Any, world: int) -> list[Any]:
    """Every rank's `obj` (a no-op list for one process)."""
    if world == 1:
        return [obj]
    import torch.distributed as tdist

    out: list[Any] = [None] * world
    tdist.all_gather_object(out, obj)
    return out


def barrier(world: int) -> None:
    if world > 1:
        import torch.distributed as tdist

        tdist.barrier()
