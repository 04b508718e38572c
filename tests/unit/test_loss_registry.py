"""Losses are registered like rewards (rftbus/trainer/losses/__init__.py): a built-in name, or a Loss subclass of one's own
by dotted path, made with the config's correction; what is not a Loss, or a loss that cannot read what the config
asks of it, is said in one line. No broker."""

from __future__ import annotations

import sys

import pytest

from rftbus.ground.config.trainer import TrainerConfig
from rftbus.ground.errors import RftbusError
from rftbus.trainer.losses import BUILTIN, Loss, loss_class, make_loss, mixes

OWN = '''
from rftbus.trainer.losses.grpo import GRPOLoss


class Doubled(GRPOLoss):
    """GRPO at twice the weight: a loss of one's own is one file."""

    name = "doubled"

    def __call__(self, out, batch):
        res = super().__call__(out, batch)
        res.loss = res.loss * 2
        return res


NOT_A_LOSS = object()
'''


@pytest.fixture
def own_module(tmp_path, monkeypatch):
    (tmp_path / "my_losses.py").write_text(OWN)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_losses"
    sys.modules.pop("my_losses", None)


def test_every_builtin_is_a_loss_and_mix_alone_mixes_lanes():
    made = {n: make_loss(TrainerConfig(loss=n), 1) for n in BUILTIN}
    assert all(isinstance(x, Loss) and x.name == n for n, x in made.items())
    assert [n for n, x in made.items() if mixes(x)] == ["mix"]
    assert made["grpo"].off_policy == "decoupled" and make_loss(TrainerConfig(), 0).off_policy == "none"


def test_a_loss_of_ones_own_by_dotted_path(own_module):
    loss = make_loss(TrainerConfig(loss=f"{own_module}:Doubled"), 1)
    assert type(loss).__name__ == "Doubled" and loss.lanes == ("rl",) and not mixes(loss)
    with pytest.raises(RftbusError, match="not a subclass of rftbus.trainer.losses.Loss"):
        loss_class(f"{own_module}:NOT_A_LOSS")
    with pytest.raises(RftbusError, match="no_such_module"):
        loss_class("no_such_module:Loss")
    with pytest.raises(RftbusError, match="demo_replay replays demonstrations"):
        make_loss(TrainerConfig(loss=f"{own_module}:Doubled", demo_replay=8), 1)
