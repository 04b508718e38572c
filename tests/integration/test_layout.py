"""One importable namespace, one tree: the design's component folders are rftbus/producers, ... (beside
rftbus/ground and rftbus/apps), so the installed package is the folder as it is; nothing bare installs."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

from tests.conftest import rftbus_cli

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ["producers", "consumers", "streams", "trainer"]


def test_folders_are_rftbus_subpackages(tmp_path):
    for folder in FOLDERS:
        mod = importlib.import_module(f"rftbus.{folder}")
        assert Path(mod.__file__).resolve().parent == REPO / "rftbus" / folder
    # From outside the repo (pytest puts the repo root on sys.path), no bare top-level name exists.
    probe = "import importlib.util as u, sys; sys.exit(any(u.find_spec(n) for n in sys.argv[1:]))"
    out = subprocess.run([sys.executable, "-c", probe, *FOLDERS, "schemas", "ground", "apps"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert out.returncode == 0, f"a bare package is importable: {out.stderr}"


def test_every_code_folder_is_a_package():
    """pyproject finds the packages by their __init__.py: a folder of modules without one would vanish from a
    non-editable install."""
    missing = sorted(str(d.relative_to(REPO)) for d in {f.parent for f in (REPO / "rftbus").rglob("*.py")}
                     if not (d / "__init__.py").exists())
    assert missing == [], f"folders of modules with no __init__.py: {missing}"


def test_help_reads_well():
    out = rftbus_cli(None, "--help")
    assert out.returncode == 0
    for cmd in ("up", "down", "status", "topics", "tail", "run", "check"):
        assert f" {cmd} " in out.stdout
    sub = rftbus_cli(None, "tail", "--help")
    assert "--from-beginning" in sub.stdout and "--json" in sub.stdout
