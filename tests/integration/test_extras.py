"""Installs per role (#35): each role's modules import with only the core and that role's extra. A subprocess
per role hides every heavy package outside them (an import of one raises ModuleNotFoundError, as in a venv
without it) and imports the role's entry modules; pyproject.toml's extras are read for what each role has."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# distribution (as pyproject names it) -> the module it installs
MODULES = {"torch": "torch", "transformers": "transformers", "tokenizers": "tokenizers", "safetensors": "safetensors",
           "gguf": "gguf", "accelerate": "accelerate", "peft": "peft", "math-verify": "math_verify",
           "openai": "openai", "pyarrow": "pyarrow", "datasets": "datasets", "faust-streaming": "faust",
           "rocksdict": "rocksdict", "cramjam": "cramjam", "deepspeed": "deepspeed", "tensorboard": "tensorboard",
           "matplotlib": "matplotlib", "fastapi": "fastapi", "uvicorn": "uvicorn", "chdb": "chdb",
           "clickhouse-connect": "clickhouse_connect", "sqlglot": "sqlglot"}
HEAVY = set(MODULES.values()) | {"aiokafka"}  # (aiokafka comes with faust-streaming; sympy with torch)
ROLES = {  # role -> the modules a process of that role starts from
    "core": ["rftbus.apps.cli.main", "rftbus.ground.schemas", "rftbus.ground.kafka.inspect", "rftbus.apps.bus_check",
             "rftbus.producers.tasks.publish", "rftbus.ground.tasksets.data", "rftbus.ground.weights.follower"],
    "explorer": ["rftbus.producers.explorer", "rftbus.ground.rewards.math_verify"],
    "streams": ["rftbus.streams.app", "rftbus.streams.worker"],
    "trainer": ["rftbus.trainer.loop", "rftbus.trainer.components"],
    "serve": ["rftbus.producers.serve.server", "rftbus.producers.serve.service", "rftbus.producers.engines.openai"],
    "analytics": ["rftbus.consumers.analytics.sink"],
    "studio": ["rftbus.consumers.studio.app"],
}
# A hidden package is None in sys.modules: importing it raises ModuleNotFoundError and importlib.util.find_spec
# answers None, as where it is not installed (libraries that probe optional packages then skip it).
PROBE = """
import importlib, sys
for name in sys.argv[1].split(","):
    if name:
        sys.modules[name] = None
for m in sys.argv[2:]:
    importlib.import_module(m)
print("imported", *sys.argv[2:])
"""


def extra_modules(role: str, extras: dict[str, list[str]]) -> set[str]:
    """The heavy modules a role's extra brings, following `rftbus[...]` references."""
    if role == "core":
        return set()
    out = set()
    for req in extras[role]:
        m = re.match(r"rftbus\[([\w,]+)\]", req)
        if m:
            for r in m.group(1).split(","):
                out |= extra_modules(r, extras)
            continue
        dist = re.split(r"[\[<>=!~ ;]", req, maxsplit=1)[0]
        if dist in MODULES:
            out.add(MODULES[dist])
    if "faust" in out:
        out.add("aiokafka")
    return out


@pytest.mark.parametrize("role", sorted(ROLES))
def test_a_role_imports_with_only_its_own_extra(role):
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    hidden = sorted(HEAVY - extra_modules(role, extras))
    out = subprocess.run([sys.executable, "-c", PROBE, ",".join(hidden), *ROLES[role]], capture_output=True,
                         text=True, timeout=180, cwd=REPO)
    assert out.returncode == 0, f"{role} needs a package outside its extra:\n{out.stderr[-1500:]}"


def test_the_check_fails_when_a_role_imports_another_roles_package():
    """Not vacuous: serve's modules with the model stack hidden fail to import."""
    out = subprocess.run([sys.executable, "-c", PROBE, "torch,transformers", "rftbus.producers.serve.service"],
                         capture_output=True, text=True, timeout=180, cwd=REPO)
    assert out.returncode != 0 and "ModuleNotFoundError" in out.stderr


def test_serve_never_imports_the_trainer_analytics_or_streams_packages():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert not {"deepspeed", "chdb", "faust"} & extra_modules("serve", extras)


def test_serve_in_upstream_mode_answers_without_the_other_roles_packages(broker, tmp_path):
    """`rftbus serve --upstream URL` (the deployment in front of an inference server) as a real process with
    every package of the trainer, streams and analytics hidden (deepspeed, chDB, Faust, ...): it starts,
    answers a completion through the upstream (another real `rftbus serve`) and records it."""
    import os
    import time
    import uuid

    import httpx
    from pydantic import SecretStr

    from rftbus.ground.config import write_config
    from rftbus.ground.kafka.clients import make_admin
    from rftbus.ground.kafka.topics import create_topics
    from rftbus.producers.serve.server import BackgroundServer
    from tests.integration.test_serve import INF, free_port, serve_config

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    hidden = sorted(HEAVY - extra_modules("serve", extras))
    assert {"deepspeed", "chdb", "faust"} <= set(hidden)
    site = tmp_path / "site"
    site.mkdir()
    marker = tmp_path / "hidden-in-effect"
    (site / "sitecustomize.py").write_text("import sys\nfor n in %r:\n    sys.modules[n] = None\n"
                                           "open(%r, 'w').close()\n" % (hidden, str(marker)))
    cfg = serve_config(tmp_path / "a", broker.broker.port, uuid.uuid4().hex[:6])
    create_topics(cfg, make_admin(cfg))
    with BackgroundServer(cfg) as upstream:
        engine = cfg.explorer.engine.model_copy(update={"kind": "openai", "base_url": upstream.url + "/v1",
                                                        "api_key": SecretStr(INF)})
        bcfg = cfg.model_copy(update={"serve": cfg.serve.model_copy(update={
            "port": free_port(), "id": cfg.serve.id + "-b", "engine": engine})})
        path = write_config(bcfg, tmp_path / "b.yaml")
        env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        proc = subprocess.Popen([sys.executable, "-m", "rftbus", "--config", str(path), "serve",
                                 "--log-level", "warning"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        url = f"http://{bcfg.serve.host}:{bcfg.serve.port}"
        try:
            deadline, r = time.monotonic() + 120, None
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    r = httpx.post(url + "/v1/completions", json={"prompt": "2+2=", "max_tokens": 3},
                                   headers={"Authorization": f"Bearer {INF}"}, timeout=30)
                    break
                except httpx.TransportError:
                    time.sleep(0.5)
        finally:
            proc.terminate()
            out = proc.communicate(timeout=60)[0]
    assert marker.exists(), "the serve process did not load the hiding hook"
    assert r is not None, f"serve did not answer:\n{out[-2000:]}"
    assert r.status_code == 200 and r.headers.get("X-Rftbus-Experience-Id"), (r.status_code, r.text, out[-2000:])


def test_a_command_whose_role_is_not_installed_names_the_extra(tmp_path):
    """`rftbus serve` where fastapi is not installed (a core-only install): one line naming the extra, exit 1,
    no traceback."""
    import os

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['fastapi'] = None\n")
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "RFTBUS_STATE_DIR": str(tmp_path / "state")}
    out = subprocess.run([sys.executable, "-m", "rftbus", "serve"], capture_output=True, text=True, timeout=120,
                         env=env, cwd=tmp_path)
    assert out.returncode == 1, out.stderr[-1500:]
    assert "rftbus[serve]" in out.stderr and "Traceback" not in out.stderr, out.stderr[-1500:]
