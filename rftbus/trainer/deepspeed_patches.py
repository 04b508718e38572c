"""The one DeepSpeed patch: a CPU trainer does not build DeepSpeed's shared-memory inference op.

DeepSpeed 0.18.9's `TorchBackend` JIT-compiles a C++ op (`deepspeed_shm_comm`, added for AutoTP inference on
CPU in deepspeedai/DeepSpeed#5391) whenever a process group starts on the CPU accelerator, and maps its
shared-memory buffers; it serves `inference_all_reduce` alone, which training never calls. On a fresh machine
the first trainer start compiled it for ~60 CPU-s (40-110 s on two cores), the CI's every run among them. Upstream
has no switch to leave it out (deepspeedai/DeepSpeed#7625 asks for a fallback on the inference side only).
Without it `inference_all_reduce` takes DeepSpeed's own fallback, torch.distributed's all_reduce.

Exact-version guard: another DeepSpeed is left as it is (the op is then built as upstream does).
tests/unit/test_deepspeed_patch.py shows upstream building it, and the patched trainer not.
"""

from __future__ import annotations

WRITTEN_FOR = "0.18.9"


def no_shm_inference_op() -> bool:
    """Applied before the trainer's process group starts on CPU; True if applied."""
    import importlib

    import deepspeed

    if deepspeed.__version__ != WRITTEN_FOR:
        return False
    # (not `import deepspeed.comm.torch as m`: that reads the attribute `torch` of deepspeed.comm, the torch library)
    ds_torch = importlib.import_module("deepspeed.comm.torch")
    assert hasattr(ds_torch, "TorchBackend") and hasattr(ds_torch, "build_shm_op")
    setattr(ds_torch, "build_shm_op", lambda: None)  # noqa: B010 - (mypy does not know the module's attribute)
    return True
