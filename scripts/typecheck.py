"""Type-check the package as it installs (`make test` runs this after ruff).

pyproject.toml maps the top-level folders into one namespace (producers/ -> rftbus.producers, ...), which
mypy cannot follow from the source tree. So this builds build/typecheck/rftbus, a tree of links that
mirrors the installed layout, and runs mypy on that package with the [tool.mypy] settings.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def link_tree() -> Path:
    mapping = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    root = REPO / "build" / "typecheck"
    shutil.rmtree(root, ignore_errors=True)
    pkg = root / "rftbus"
    pkg.mkdir(parents=True)
    for item in (REPO / mapping["rftbus"]).iterdir():
        if item.name != "__pycache__":
            (pkg / item.name).symlink_to(item)
    for name, folder in mapping.items():
        if name != "rftbus":
            (pkg / name.split(".", 1)[1]).symlink_to(REPO / folder)
    return root


def main() -> int:
    root = link_tree()
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"), "-p", "rftbus"]
    return subprocess.run(cmd, cwd=root).returncode


if __name__ == "__main__":
    sys.exit(main())
