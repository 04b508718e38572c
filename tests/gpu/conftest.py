"""The GPU suite: every test here is marked `gpu` and skipped, with the reason, where no CUDA device is.

It needs no Kafka, no JDK and no network: models are built from config (or exported here), the trainer's
pieces are driven directly. Run it on a CUDA machine with `pytest -m gpu tests/gpu -s` (tests/gpu/README.md:
carrying DeepSpeed and rftbus's other needs as wheels).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent
NO_CUDA = None if torch.cuda.is_available() else "no CUDA device here: the GPU suite is still owed on a GPU machine"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.gpu)
            if NO_CUDA:
                item.add_marker(pytest.mark.skip(reason=NO_CUDA))


@pytest.fixture
def one_rank():
    """In-process DeepSpeed on one GPU: its env vars for this test only."""
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "DS_ACCELERATOR")
    saved = {k: os.environ.pop(k) for k in names if k in os.environ}
    from rftbus.trainer.dist import prepare_env

    prepare_env()
    yield
    for k in names:
        os.environ.pop(k, None)
    os.environ.update(saved)
