"""Config keys (rftbus/ground/config/keys.py): every key described, a suggestion for a typo, lists and maps from variables
as JSON. No broker."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

from rftbus.ground.config import Config, ConfigError, load_config
from rftbus.ground.config.keys import did_you_mean, takes_json, undescribed


def test_every_config_key_has_a_description():
    assert undescribed(Config) == []


def test_the_description_check_is_not_vacuous():
    class Inner(BaseModel):
        ok: int = Field(1, description="said")
        bare: int = 2

    class Root(BaseModel):
        inner: Inner = Inner()

    assert undescribed(Root) == ["inner", "inner.bare"]


def test_a_typo_gets_the_nearest_key_of_its_own_section():
    assert did_you_mean(Config, ["trainer", "lrr"]) == " (did you mean lr?)"
    assert "max_new_tokens" in did_you_mean(Config, ["explorer", "sampling", "max_new_token"])
    assert did_you_mean(Config, ["trainer", "zzzzzz"]) == ""
    with pytest.raises(ConfigError, match=r"rl.group_sise: unknown key \(did you mean group_size\?\)"):
        load_config(overrides={"rl": {"group_sise": 4}}, environ={})


def test_list_and_map_keys_come_from_variables_as_json():
    assert takes_json(Config, ["trainer", "lora", "target_modules"]) and takes_json(Config, ["kafka", "client"])
    assert not takes_json(Config, ["trainer", "lr"]) and not takes_json(Config, ["trainer", "lora"])
    cfg = load_config(environ={"RFTBUS_TRAINER__LORA__R": "4", "RFTBUS_TRAINER__LORA__TARGET_MODULES": '["q_proj"]',
                               "RFTBUS_RUN__REPORT_TO": "[]"})
    assert cfg.trainer.lora.target_modules == ["q_proj"] and cfg.run.report_to == []
    with pytest.raises(ConfigError, match="RFTBUS_RUN__REPORT_TO.*not JSON"):
        load_config(environ={"RFTBUS_RUN__REPORT_TO": "[tensorboard"})
