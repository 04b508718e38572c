"""What `rftbus run` starts: one child spec per process (trainers, streams workers, explorers, analytics, serve,
the gate, the simulator, the studio), each `python -m rftbus` on the run's child config, with its threads and log."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from rftbus.ground.config import Config, load_config, write_config
from rftbus.apps.run.cores import split as split_cores
from rftbus.apps.run.supervisor import ChildSpec


def lineage_configs(cfg: Config, config_path: Path) -> list[Path]:
    """The config of each further trainer (run.trainers): the children's, with its trainer: section."""
    if not cfg.run.trainers:
        return []
    child = load_config(config_path)
    return [write_config(child.model_copy(update={"trainer": child.lineage_trainer(i)}),
                         config_path.with_name(f"config-trainer-{i}.yaml")) for i in range(len(child.run.trainers))]


def child_env() -> dict[str, str]:
    """What every child's environment adds: a native crash leaves a traceback; PYTHONSAFEPATH: `python -m` does not
    put the working directory before the standard library (the user's folders are appended after it:
    rftbus.apps.cli.context.user_code_on_path)."""
    return {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1", "PYTHONSAFEPATH": "1"}


def child_specs(c: Config, config_path: Path) -> list[ChildSpec]:
    base = [sys.executable, "-m", "rftbus", "--config", str(config_path)]
    logs = c.state_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = child_env()
    threads = split_cores(c)
    specs = [ChildSpec("trainer", base + ["train"], {**env, "OMP_NUM_THREADS": str(threads.trainer)},
                       c.run.max_restarts, logs / "trainer.log")]
    for i, path in enumerate(lineage_configs(c, config_path)):  # run.trainers: each its own lineage
        t = c.lineage_trainer(i)
        specs.append(ChildSpec(f"trainer-{t.lineage}", [sys.executable, "-m", "rftbus", "--config", str(path),
                                                        "train"],
                               {**env, "OMP_NUM_THREADS": str(t.threads or threads.trainer)}, c.run.max_restarts,
                               logs / f"trainer-{t.lineage}.log"))
    for i in range(c.run.streams_workers):
        specs.append(ChildSpec(f"streams-{i}", base + ["streams", "--worker-id", f"s{i}"], env,
                               c.run.max_restarts, logs / f"streams-{i}.log"))
    # explorers may run under another Python: vLLM's environment (explorer.engine.python)
    explore = [c.explorer.engine.python or sys.executable] + base[1:]
    for i in range(c.run.explorers):
        # Static members: a crashed explorer's restart (same id) gets its partitions back at once.
        specs.append(ChildSpec(f"explorer-{i}", explore + ["explore", "--id", f"e{i}"],
                               {**env, "OMP_NUM_THREADS": str(threads.explorer),
                                "RFTBUS_EXPLORER__STATIC_MEMBERSHIP": "true"},
                               c.run.max_restarts, logs / f"explorer-{i}.log"))
    if c.run.analytics and importlib.util.find_spec("rftbus.consumers.analytics.sink") is not None:
        specs.append(ChildSpec("analytics", base + ["analytics", "sink"], env, c.run.max_restarts,
                               logs / "analytics.log"))
    if c.run.serve and importlib.util.find_spec("rftbus.producers.serve.service") is not None:
        # (warning: no access line per request in its log at tens of requests a second)
        specs.append(ChildSpec("serve", base + ["serve", "--log-level", "warning"], env, c.run.max_restarts,
                               logs / "serve.log"))
    if c.gate.enabled and c.run.serve:  # serve follows its decisions: it starts with the run's first version
        specs.append(ChildSpec("gate", base + ["gate"], env, c.run.max_restarts, logs / "gate.log"))
    if c.synthesis.enabled:
        specs.append(ChildSpec("synthesize", base + ["synthesize"], env, c.run.max_restarts, logs / "synthesize.log"))
    if c.run.simulate:
        specs.append(ChildSpec("simulate", base + ["simulate"], env, c.run.max_restarts, logs / "simulate.log"))
    if c.run.studio:
        # optional: a console that cannot start (its port taken) must not stop the training it shows
        specs.append(ChildSpec("studio", base + ["studio"], env, c.run.max_restarts, logs / "studio.log",
                               optional=True))
    for spec in specs:
        spec.restart_window_s = c.run.restart_window_minutes * 60
        spec.term_held = True  # each is `python -m rftbus`, which unblocks SIGTERM once its handler is in
    if c.otel.collector:  # agents' traces: `rftbus otel collector` becomes the Collector (exec), its own SIGTERM
        specs.append(ChildSpec("otelcol", base + ["otel", "collector"], env, c.run.max_restarts,
                               logs / "otelcol.log", restart_window_s=c.run.restart_window_minutes * 60))
    return specs
