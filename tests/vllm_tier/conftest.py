"""The vLLM tier: the real engine (vLLM's CPU build here, the CUDA build on a GPU) through rftbus's own engine,
on SmolLM2-135M-Instruct. It runs in vLLM's own environment (`make install-vllm`: .venv-vllm), which `make test`
builds and runs it in (`pytest --confcutdir tests/vllm_tier tests/vllm_tier`); the main suite does not collect it.
Each engine is built once per module (a start costs ~40 s of one core here)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(config, items):
    from rftbus.producers.engines.vllm import vllm_unavailable_reason

    reason = vllm_unavailable_reason("auto")
    if reason:  # visible: this environment was meant to have it
        for item in items:
            item.add_marker(pytest.mark.skip(reason=f"vLLM tier cannot run in this Python: {reason}"))


@pytest.fixture(scope="session")
def smollm2_folder() -> str:
    """SmolLM2-135M-Instruct as a Hugging Face folder (the preset's GGUF, converted once into the repo's cache,
    which the main suite shares)."""
    from rftbus.ground.models.config import ModelConfig
    from rftbus.ground.models.source import model_folder

    folder = model_folder(ModelConfig(name="smollm2-135m-instruct", cache_dir=str(REPO / ".rftbus" / "models")))
    assert folder is not None
    return folder
