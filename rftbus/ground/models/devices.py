"""Which device a role runs on: `auto`, `cpu`, `mps`, `cuda`, `cuda:N`, or `cuda:N,M,...` (a trainer's ranks).

A role that takes a torch device (the transformers engine, the held-out eval) is handed it (`resolve`). One
that picks its own (vLLM and its worker processes, DeepSpeed's ranks by LOCAL_RANK) is shown only the chosen
GPUs, through CUDA_VISIBLE_DEVICES set before CUDA starts in the process (`show_only`), the way vLLM and
torchrun document it. Indices count within what the process was already shown (a CUDA_VISIBLE_DEVICES of
"2,3" and `cuda:1` is the machine's GPU 3), so a scheduler's own masking composes with the config's.
"""

from __future__ import annotations

import os
import re
from collections.abc import MutableMapping

from rftbus.ground.errors import RftbusError

SPEC = re.compile(r"^(auto|cpu|mps|cuda(:\d+(,\d+)*)?)$")
DESCRIBED = "auto, cpu, mps, cuda, cuda:N or cuda:N,M (a trainer's ranks)"


def check_spec(spec: str) -> str:
    """A config validator's check (no torch import): the spec, or ValueError naming what is accepted."""
    if not SPEC.match(spec.strip()):
        raise ValueError(f"{spec!r} is not a device: use {DESCRIBED}")
    return spec.strip()


def indices(spec: str) -> list[int]:
    """The GPU indices a `cuda:N,M` spec names ([] for any other spec)."""
    return [int(x) for x in spec[5:].split(",")] if spec.startswith("cuda:") else []


def resolve(spec: str):
    """The torch device a role that is handed one uses: `auto` is CUDA when there is one, else the CPU; a list
    of GPUs (a trainer's ranks) is its first."""
    import torch

    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ids = indices(spec)
    return torch.device(f"cuda:{ids[0]}") if ids else torch.device(spec)


def show_only(spec: str, env: MutableMapping[str, str] | None = None) -> str:
    """Show this process (and the processes it starts) only `spec`'s GPUs, before CUDA starts in it; returns
    the device name to use inside the process (`cuda`, whose index 0 is the first chosen GPU, or `cpu`).
    `auto`, `cuda` and `mps` change nothing."""
    env = os.environ if env is None else env
    if spec in ("auto", "cuda", "mps"):
        return spec
    if spec == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
        return "cpu"
    ids = indices(spec)
    import torch

    if torch.cuda.is_initialized():
        raise RftbusError(f"device {spec}: CUDA already started in this process, so which GPUs it sees can no "
                          f"longer change (choose the device before the model loads)")
    shown = env.get("CUDA_VISIBLE_DEVICES")
    if shown is not None and shown.strip() != "":
        visible = [x.strip() for x in shown.split(",") if x.strip()]
        missing = [i for i in ids if i >= len(visible)]
        if missing:
            raise RftbusError(f"device {spec}: this process is shown {len(visible)} GPU(s) "
                              f"(CUDA_VISIBLE_DEVICES={shown}), so there is no cuda:{missing[0]}")
        env["CUDA_VISIBLE_DEVICES"] = ",".join(visible[i] for i in ids)
    else:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in ids)
    return "cuda"


def problem(role: str, spec: str, gpus: int) -> str | None:
    """What is wrong with running `role` on `spec` on a machine showing `gpus` CUDA devices (`rftbus check`)."""
    if spec == "cuda" and gpus == 0:
        return f"{role} is {spec}: this machine shows no CUDA device"
    ids = indices(spec)
    if ids and max(ids) >= gpus:
        return (f"{role} is {spec}: this machine shows {gpus} CUDA device(s)"
                + (f" (cuda:0..cuda:{gpus - 1})" if gpus else ""))
    return None
