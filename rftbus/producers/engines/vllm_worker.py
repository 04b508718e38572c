"""The weight swap that runs inside vLLM's workers (vLLM's `worker_extension_cls`).

vLLM (V1 engine, default since 0.8) runs the model in worker processes; the engine reaches them only
through `LLM.collective_rpc(method, args)`, which calls a method of this class mixed into every worker.
The explorer writes the new weights to one safetensors file and each worker (one per tensor-parallel
rank) loads it onto its own device and hands it to the model runner's `reload_weights` (vLLM >= 0.20: it maps
Hugging Face names onto vLLM's fused and sharded parameters layer by layer and redoes the processing done after
loading, such as the CPU build's repacking of linear weights for its GEMM kernels, which the model's own
`load_weights` cannot load into a second time); on older vLLM, the model's `load_weights`. A file, not tensors in the RPC: the RPC serialises
its arguments, and a path costs the same for every model size and rank count.

Imported by vLLM by name in its workers; nothing here imports vLLM, so the module loads anywhere.
"""

from __future__ import annotations

from typing import Any


class WeightSwap:
    """Mixed into vLLM's Worker: `self.model_runner` and `self.device` are the worker's."""

    model_runner: Any
    device: Any

    def rftbus_load_weights(self, path: str) -> int:
        """Load the safetensors file at `path` into the worker's model; returns how many tensors."""
        from safetensors.torch import load_file

        tensors = load_file(path, device=str(self.device))
        reload = getattr(self.model_runner, "reload_weights", None)
        if reload is not None:
            reload(weights_iterator=iter(tensors.items()), is_checkpoint_format=True)
        else:
            self.model_runner.model.load_weights(weights=tensors.items())
        return len(tensors)

    def rftbus_weight_checksum(self, name: str) -> float:
        """The sum of one parameter as the worker holds it (tests: a swap reached the worker). A norm's weight, say:
        the CPU build keeps linear weights repacked for its kernels, not as parameters."""
        params = dict(self.model_runner.model.named_parameters())
        return float(params[name].float().sum().item())
