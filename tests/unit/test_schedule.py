"""`make test` keeps the tests that share a module fixture or the three-node cluster on one xdist worker
(`xdist_group`, tests/conftest.py). pytest 9.2 silently broke that (pytest-dev/pytest-xdist#1386: loadgroup
writes a node id field pytest no longer reads), so pytest is pinned below 9.2; this fails if grouping is gone."""

from __future__ import annotations

import re
import subprocess
import sys

GROUPED = '''
import pytest

@pytest.mark.xdist_group("shared")
@pytest.mark.parametrize("i", range(6))
def test_grouped(i):
    pass

@pytest.mark.parametrize("i", range(6))
def test_free(i):
    pass
'''


def test_loadgroup_keeps_a_group_on_one_worker(tmp_path):
    (tmp_path / "test_g.py").write_text(GROUPED)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    out = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p",
                          "no:cacheprovider", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout[-2000:]
    workers = {m.group(2): m.group(1) for m in re.finditer(r"\[(gw\d)\] .*PASSED (\S+)", out.stdout)}
    grouped = {w for test, w in workers.items() if "test_grouped" in test}
    assert len([t for t in workers if "test_grouped" in t]) == 6 and len(grouped) == 1, out.stdout[-2000:]
