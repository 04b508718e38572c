"""Each compose service would start (#35): its command's start-up checks (rftbus/apps/cli/preflight.py, the same
function the command runs) pass on the settings the compose file gives it. No Docker needed: YAML only."""

from __future__ import annotations

import pytest
import yaml

from rftbus.ground.config import Config, load_config
from tests.unit.test_compose import COMPOSE, RFTBUS_SERVICES, dockerfile_instructions, rftbus_env


@pytest.fixture(scope="module")
def services() -> dict[str, dict]:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def service_config(services, name: str, monkeypatch, tmp_path, drop: tuple[str, ...] = ()) -> Config:
    monkeypatch.delenv("RFTBUS_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    return load_config(environ={k: v for k, v in rftbus_env(services[name]).items() if k not in drop})


@pytest.mark.parametrize("name", sorted(RFTBUS_SERVICES))
def test_each_service_passes_the_checks_its_command_runs_at_start(services, name, monkeypatch, tmp_path):
    """The serve service once refused to start (the studio it mounts adds the read scope, which had no
    tokens): the same checks the command runs at start (rftbus/apps/cli/preflight.py) run here on its settings."""
    from rftbus.apps.cli.preflight import preflight

    preflight(service_config(services, name, monkeypatch, tmp_path), RFTBUS_SERVICES[name])


def test_the_start_up_checks_refuse_serve_without_read_tokens(services, monkeypatch, tmp_path):
    from rftbus.apps.cli.preflight import preflight
    from rftbus.ground.errors import RftbusError

    cfg = service_config(services, "serve", monkeypatch, tmp_path, drop=("RFTBUS_SERVE__READ_TOKENS",))
    with pytest.raises(RftbusError, match="read"):
        preflight(cfg, RFTBUS_SERVICES["serve"])


def test_the_image_has_the_code_sandbox():
    """The `code` reward runs answers in bubblewrap (rftbus/ground/rewards/sandbox.py)."""
    assert any("bubblewrap" in rest for word, rest in dockerfile_instructions() if word == "RUN")
