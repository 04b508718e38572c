"""Process-group setup for DeepSpeed on this machine, and the few collectives the loop needs.

One process: the env vars DeepSpeed expects (MASTER_ADDR/PORT, RANK, WORLD_SIZE, LOCAL_RANK) are
filled in; several (torchrun / `rftbus train --ranks N`): the launcher sets them. Without CUDA,
DeepSpeed's CPU accelerator runs collectives over gloo. `trainer.device` picks the GPUs (or the CPU) by
what the ranks are shown (models/devices.py): rank i takes the i-th. Must run before `import deepspeed`.
"""

from __future__ import annotations

import os
import sys
import socket
from dataclasses import dataclass
from typing import Any

from rftbus.ground.errors import RftbusError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Dist:
    rank: int
    world: int
    local_rank: int


def prepare_env(device: str = "auto") -> Dist:
    from rftbus.ground.models.devices import indices, show_only

    env = os.environ
    if "RANK" not in env or "WORLD_SIZE" not in env:
        env.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    env.setdefault("LOCAL_RANK", env["RANK"])
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    env.setdefault("MASTER_PORT", str(free_port()))
    # DeepSpeed JIT-builds a C++ op at every engine start and torch caches it per user: two installs on one
    # machine (another checkout's .venv) rebuilt it for each other on every start (~40-90 s on 2 cores).
    # One cache per Python environment: built once, loaded after.
    env.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(sys.prefix, "torch_extensions"))
    local = int(env["LOCAL_RANK"])
    listed = indices(device)
    if listed and local >= len(listed):
        raise RftbusError(f"trainer.device is {device}: {len(listed)} GPU(s) for local rank {local} (list one per "
                          f"rank on this machine, e.g. cuda:0,1)")
    in_process = show_only(device)
    if in_process == "cpu":
        env["DS_ACCELERATOR"] = "cpu"
    elif in_process == "cuda":
        env["DS_ACCELERATOR"] = "cuda"
    if "DS_ACCELERATOR" not in env:
        import torch

        env["DS_ACCELERATOR"] = "cuda" if torch.cuda.is_available() else "cpu"
    return Dist(int(env["RANK"]), int(env["WORLD_SIZE"]), local)


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
