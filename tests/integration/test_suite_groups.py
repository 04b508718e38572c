"""`make test`'s two workers keep each file's tests together (tests/conftest.py): a module fixture set up once,
a whole run never split. pytest-xdist's grouping fails silently when pytest and xdist disagree on node ids
(pytest-dev/pytest-xdist#1386: pytest 9.2 and xdist 3.8), so this runs a real two-worker session and looks."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.conftest import REPO


def test_each_file_runs_whole_on_one_worker():
    files = ["tests/unit/test_devices.py", "tests/unit/test_restart_budget.py"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    out = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p",
                          "no:cacheprovider", *files], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:]
    workers: dict[str, set[str]] = {}
    for worker, path in re.findall(r"\[(gw\d)\] \[\s*\d+%\] PASSED (tests/\S+?\.py)::", out.stdout):
        workers.setdefault(path, set()).add(worker)
    assert set(workers) == set(files), out.stdout[-3000:]
    assert all(len(w) == 1 for w in workers.values()), workers
