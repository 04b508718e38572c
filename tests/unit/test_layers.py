"""The import layers (docs/DESIGN.md, "The loop"), read from the folders and the source with `ast`, so a violation
fails here:

- rftbus/ holds three layers as folders: rftbus/ground/ (config, kafka, schemas, weights, models, rewards and the
  small shared modules), the components (every other folder of rftbus/ but apps/: producers, consumers, streams,
  trainer) and rftbus/apps/ (the CLI, run, simulate, and the bench and chaos harnesses);
- the ground imports no component and no app code;
- the components import no app code;
- nothing on a runtime path imports the benchmarks or the chaos harness: only their own CLI commands do;
- no import cycle between packages: the components, each package of the ground and each of the apps are nodes, and
  no two of them import each other, directly or round a cycle (the studio mounts into serve through an entry point,
  rftbus/producers/serve/mounts.py; both take their HTTP auth and errors from the ground's rftbus/ground/web; the
  benchmarks see the CLI's state through an interface, rftbus/apps/bench/context.py).
Relative imports count as what they resolve to.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "rftbus"
LAYER_FOLDERS = ("ground", "apps")


def _nodes(folder: Path, prefix: str) -> tuple[str, ...]:
    """A folder's packages and modules, as dotted names: the nodes of the import graph."""
    return tuple(sorted(f"{prefix}.{p.stem}" for p in folder.iterdir()
                        if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.stem != "__init__")))


GROUND = _nodes(PKG / "ground", "rftbus.ground")
APP = _nodes(PKG / "apps", "rftbus.apps")
COMPONENTS = tuple(n for n in _nodes(PKG, "rftbus")
                   if n.rpartition(".")[2] not in (*LAYER_FOLDERS, "__main__"))
HARNESSES = ("rftbus.apps.chaos", "rftbus.apps.bench")
HARNESS_ENTRIES = ("rftbus.apps.cli.bench_cmd", "rftbus.apps.cli.chaos_cmd")  # the commands that start them


def _in(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def modules() -> dict[str, Path]:
    return {".".join(["rftbus", *[q for q in f.relative_to(PKG).with_suffix("").parts if q != "__init__"]]): f
            for f in PKG.rglob("*.py")}


def test_the_package_is_its_three_layers():
    """Nothing sits in rftbus/ beside the layers: new code picks its layer by where it is put."""
    loose = sorted(p.name for p in PKG.iterdir()
                   if p.suffix == ".py" and p.stem not in ("__init__", "__main__"))
    assert loose == [], f"modules outside a layer folder: {loose}"
    assert set(COMPONENTS) == {"rftbus.producers", "rftbus.consumers", "rftbus.streams", "rftbus.trainer"}
    assert {"rftbus.ground.config", "rftbus.ground.kafka", "rftbus.ground.schemas", "rftbus.ground.weights"} <= set(GROUND)
    assert {"rftbus.apps.cli", "rftbus.apps.run", "rftbus.apps.bench", "rftbus.apps.chaos"} <= set(APP)


def imports(path: Path, module: str = "") -> set[str]:
    """What a module imports; `module` (its dotted name) resolves relative imports."""
    found = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            base = ".".join(package.split(".")[: len(package.split(".")) - (node.level - 1)])
            target = f"{base}.{node.module}" if node.module else base
            found |= {f"{target}.{a.name}" for a in node.names} if node.module is None else {target}
        elif isinstance(node, ast.ImportFrom) and node.module:
            # `from rftbus import streams` names the package in the import list
            found |= {f"{node.module}.{a.name}" for a in node.names} if node.module == "rftbus" else {node.module}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return {m for m in found if m.startswith("rftbus")}


def component_of(module: str) -> str | None:
    return next((c for c in COMPONENTS if module == c or module.startswith(c + ".")), None)


def package_of(module: str) -> str | None:
    """The node a module belongs to: its component, or its package of the ground or the app."""
    return component_of(module) or next((p for p in GROUND + APP if _in(module, (p,))), None)


def package_cycles(mods: dict[str, Path]) -> list[str]:
    """Every import cycle between packages (a cycle inside one package is its own affair)."""
    graph: dict[str, set[str]] = {}
    for mod, path in mods.items():
        a = package_of(mod)
        for imp in imports(path, mod):
            b = package_of(imp)
            if a and b and a != b:
                graph.setdefault(a, set()).add(b)
    cycles = set()
    for start in graph:  # every simple path back to the start (the graph has a few dozen nodes)
        stack = [(start, [start])]
        while stack:
            node, trail = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start:
                    i = trail.index(min(trail))
                    cycles.add(" -> ".join(trail[i:] + trail[:i] + [min(trail)]))
                elif nxt not in trail:
                    stack.append((nxt, trail + [nxt]))
    return sorted(cycles)


def violations() -> list[str]:
    bad = []
    mods = modules()
    for mod, path in mods.items():
        for imp in imports(path, mod):
            if _in(mod, GROUND) and (_in(imp, COMPONENTS) or _in(imp, APP)):
                bad.append(f"ground {mod} imports {imp}")
            if _in(mod, COMPONENTS) and _in(imp, APP):
                bad.append(f"component {mod} imports app code {imp}")
            if not _in(mod, HARNESSES + HARNESS_ENTRIES) and _in(imp, HARNESSES):
                bad.append(f"runtime module {mod} imports the harness {imp}")
    return sorted(bad) + [f"import cycle {c}" for c in package_cycles(mods)]


def test_import_layers_hold():
    assert violations() == []


def test_the_check_finds_a_violation(tmp_path, monkeypatch):
    """The rule is not vacuous: a ground module importing a component is reported."""
    fake = tmp_path / "kafka_extra.py"
    fake.write_text("from rftbus.streams.app import build\nfrom rftbus.apps.bench.processes import WorkerProcess\n")
    real = modules()
    monkeypatch.setattr(__import__(__name__), "modules", lambda: {**real, "rftbus.ground.kafka.extra": fake})
    found = violations()
    assert [v for v in found if not v.startswith("import cycle")] == [
        "ground rftbus.ground.kafka.extra imports rftbus.apps.bench.processes",
        "ground rftbus.ground.kafka.extra imports rftbus.streams.app",
        "runtime module rftbus.ground.kafka.extra imports the harness rftbus.apps.bench.processes"]
    assert "import cycle rftbus.ground.kafka -> rftbus.streams -> rftbus.ground.kafka" in found  # (streams reads with kafka)


def test_the_check_finds_a_cycle_through_a_relative_import(tmp_path, monkeypatch):
    """A serve module importing the studio (as app.py did before the mounts interface) closes a cycle, and a
    relative import inside the studio is resolved to what it names."""
    serve = tmp_path / "serve_extra.py"
    serve.write_text("from rftbus.consumers.studio.app import create_studio\n")
    studio = tmp_path / "studio_extra.py"
    studio.write_text("from ..analytics import counts\n")
    real = modules()
    monkeypatch.setattr(__import__(__name__), "modules", lambda: {**real, "rftbus.producers.serve.extra": serve,
                                                                  "rftbus.consumers.studio.extra": studio})
    assert imports(studio, "rftbus.consumers.studio.extra") == {"rftbus.consumers.analytics"}
    assert "import cycle rftbus.consumers -> rftbus.producers -> rftbus.consumers" in violations()


def test_the_check_finds_a_cycle_inside_the_ground(tmp_path, monkeypatch):
    """The weights store imports the models; a models module importing the weights closes a cycle in the ground
    (as models/export.py did before it moved to weights/)."""
    extra = tmp_path / "models_extra.py"
    extra.write_text("from rftbus.ground.weights.follower import published\n")
    real = modules()
    monkeypatch.setattr(__import__(__name__), "modules", lambda: {**real, "rftbus.ground.models.extra": extra})
    found = violations()
    assert "import cycle rftbus.ground.models -> rftbus.ground.weights -> rftbus.ground.models" in found
    assert all(v.startswith("import cycle") and "rftbus.ground.models -> rftbus.ground.weights" in v for v in found)


def test_the_check_finds_a_cycle_between_app_packages(tmp_path, monkeypatch):
    """The CLI imports the benchmarks (its bench command); a benchmark importing the CLI closes a cycle."""
    extra = tmp_path / "bench_extra.py"
    extra.write_text("from rftbus.apps.cli.context import state\n")
    real = modules()
    monkeypatch.setattr(__import__(__name__), "modules", lambda: {**real, "rftbus.apps.bench.extra": extra})
    found = violations()  # (and through the chaos harness, which reuses the benchmarks' process helpers)
    assert "import cycle rftbus.apps.bench -> rftbus.apps.cli -> rftbus.apps.bench" in found
    assert all(v.startswith("import cycle rftbus.apps.bench -> rftbus.apps.cli") for v in found)
