"""What the config loader refuses in one line before any child starts (#63, item 13): no float knob takes inf or
NaN (an `inf` timeout was accepted and every client then failed), a YAML alias bomb, a config that is a FIFO,
/dev/zero or too large, and a token list whose tokens are empty (`","` opened its scope)."""

from __future__ import annotations

import os
import typing

import pytest
from pydantic import BaseModel

from rftbus.ground.config import Config, ConfigError, load_config


def _float_fields(model: type[BaseModel], prefix: str = "") -> list[str]:
    out = []
    for name, f in model.model_fields.items():
        ann = f.annotation
        if typing.get_origin(ann) in (list, dict, tuple):
            continue  # (entries of a list section, e.g. explorer.rewards, are their own models' knobs)
        args = typing.get_args(ann)
        sub = next((a for a in (ann, *args) if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if sub is not None:
            out += _float_fields(sub, f"{prefix}{name}.")
        elif ann is float or float in args:
            out.append(f"{prefix}{name}")
    return out


FLOATS = _float_fields(Config)


def test_there_are_float_knobs_to_check():
    assert len(FLOATS) > 40 and "kafka.request_timeout_s" in FLOATS and "gate.margin" in FLOATS


@pytest.mark.parametrize("value", ["inf", "-inf", "nan"])
def test_no_float_knob_takes_inf_or_nan(value):
    for key in FLOATS:
        node: dict = {}
        top = node
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = float(value)
        with pytest.raises(ConfigError, match=key.split(".")[-1]):
            load_config(overrides=top, environ={})


def test_a_yaml_alias_bomb_is_refused_before_it_is_built(tmp_path):
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"] + [f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, "
                                                     f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]"
                                                     for i in range(12)]
    f = tmp_path / "bomb.yaml"
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match="aliases"):
        load_config(f, environ={})


def test_a_config_that_is_not_a_regular_file_or_is_huge_is_refused_without_reading_it(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        load_config(fifo, environ={})  # opening it would block for ever
    with pytest.raises(ConfigError, match="not a regular file"):
        load_config("/dev/zero", environ={})
    big = tmp_path / "big.yaml"
    big.write_text("a: " + "x" * (17 << 20))
    with pytest.raises(ConfigError, match="over"):
        load_config(big, environ={})


@pytest.mark.parametrize("env", [",", " , ", "a,,b"])
def test_an_empty_token_never_opens_a_scope(env):
    with pytest.raises(ConfigError, match="empty token"):
        load_config(environ={"RFTBUS_SERVE__FEEDBACK_TOKENS": env})
    with pytest.raises(ConfigError, match="empty token"):
        load_config(overrides={"serve": {"read_tokens": ["ok", " "]}}, environ={})
    assert [t.get_secret_value() for t in load_config(environ={"RFTBUS_SERVE__FEEDBACK_TOKENS": "a, b"})
            .serve.feedback_tokens] == ["a", "b"]
