"""The import layers (DESIGN style guide), read from the source with `ast`, so a violation fails here:

- the ground (config, kafka, schemas, weights, models and the small shared modules) imports no component
  and no app code;
- the components (producers, consumers, streams, trainer) import no app code (cli, run, chaos, bench);
- nothing on a runtime path imports the benchmarks or the chaos harness: only their own CLI commands do.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOTS = {"rftbus": "rftbus", "rftbus.producers": "producers", "rftbus.consumers": "consumers",
         "rftbus.streams": "streams", "rftbus.schemas": "schemas", "rftbus.trainer": "trainer"}
GROUND = ("rftbus.config", "rftbus.kafka", "rftbus.schemas", "rftbus.weights", "rftbus.models", "rftbus.errors",
          "rftbus.status", "rftbus.broker", "rftbus.tasksets")
COMPONENTS = ("rftbus.producers", "rftbus.consumers", "rftbus.streams", "rftbus.trainer")
APP = ("rftbus.cli", "rftbus.run", "rftbus.chaos", "rftbus.bench", "rftbus.bus_check", "rftbus.simulate")
HARNESSES = ("rftbus.chaos", "rftbus.bench")
HARNESS_ENTRIES = ("rftbus.cli.bench_cmd", "rftbus.cli.chaos_cmd")  # the commands that start them


def _in(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def modules() -> dict[str, Path]:
    out = {}
    for pkg, folder in ROOTS.items():
        for f in (REPO / folder).rglob("*.py"):
            parts = [p for p in f.relative_to(REPO / folder).with_suffix("").parts if p != "__init__"]
            name = ".".join([pkg, *parts])
            if pkg == "rftbus" and parts and parts[0] in ("producers", "consumers", "streams", "schemas", "trainer"):
                continue  # (not a folder of rftbus/)
            out[name] = f
    return out


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from rftbus import streams` names the package in the import list
            found |= {f"{node.module}.{a.name}" for a in node.names} if node.module == "rftbus" else {node.module}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return {m for m in found if m.startswith("rftbus")}


def violations() -> list[str]:
    bad = []
    for mod, path in modules().items():
        for imp in imports(path):
            if _in(mod, GROUND) and (_in(imp, COMPONENTS) or _in(imp, APP)):
                bad.append(f"ground {mod} imports {imp}")
            if _in(mod, COMPONENTS) and _in(imp, APP):
                bad.append(f"component {mod} imports app code {imp}")
            if not _in(mod, HARNESSES + HARNESS_ENTRIES) and _in(imp, HARNESSES):
                bad.append(f"runtime module {mod} imports the harness {imp}")
    return sorted(bad)


def test_import_layers_hold():
    assert violations() == []


def test_the_check_finds_a_violation(tmp_path, monkeypatch):
    """The rule is not vacuous: a ground module importing a component is reported."""
    fake = tmp_path / "kafka_extra.py"
    fake.write_text("from rftbus.streams.app import build\nfrom rftbus.bench.processes import WorkerProcess\n")
    real = modules()
    monkeypatch.setattr(__import__(__name__), "modules", lambda: {**real, "rftbus.kafka.extra": fake})
    assert violations() == ["ground rftbus.kafka.extra imports rftbus.bench.processes",
                            "ground rftbus.kafka.extra imports rftbus.streams.app",
                            "runtime module rftbus.kafka.extra imports the harness rftbus.bench.processes"]
