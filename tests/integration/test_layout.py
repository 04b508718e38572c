"""One importable namespace: the design's top-level folders install as rftbus.*, nothing bare."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.conftest import rftbus_cli

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ["producers", "consumers", "streams", "schemas", "trainer"]


def test_folders_are_rftbus_subpackages(tmp_path):
    for folder in FOLDERS:
        mod = importlib.import_module(f"rftbus.{folder}")
        assert Path(mod.__file__).resolve().parent == REPO / folder
    # From outside the repo (pytest puts the repo root on sys.path), no bare top-level name exists.
    probe = "import importlib.util as u, sys; sys.exit(any(u.find_spec(n) for n in sys.argv[1:]))"
    out = subprocess.run([sys.executable, "-c", probe, *FOLDERS], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, f"a bare package is importable: {out.stderr}"


def test_every_package_folder_is_declared():
    """A package folder missing from pyproject's list would vanish from a non-editable install."""
    tool = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping = tool["package-dir"]
    declared = set(tool["packages"])
    on_disk = set()
    for pkg, folder in mapping.items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / folder)
            name = ".".join([pkg, *rel.parts]) if rel.parts else pkg
            if not any(name.startswith(other + ".") and other != pkg and mapping[other] != folder
                       for other in mapping if other.startswith(pkg + ".")):
                on_disk.add(name)
    assert on_disk <= declared, f"not in pyproject packages: {sorted(on_disk - declared)}"


def test_help_reads_well():
    out = rftbus_cli(None, "--help")
    assert out.returncode == 0
    for cmd in ("up", "down", "status", "topics", "tail", "run", "check"):
        assert f" {cmd} " in out.stdout
    sub = rftbus_cli(None, "tail", "--help")
    assert "--from-beginning" in sub.stdout and "--json" in sub.stdout
