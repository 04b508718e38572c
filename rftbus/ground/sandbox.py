"""What every bubblewrap sandbox shares: finding bwrap, the read-only system view, and killing a run's tree.

Two things run untrusted input this way: a policy's program (rftbus/ground/rewards/sandbox.py) and a user's SQL
(rftbus/consumers/analytics/jail.py). Each builds its own mounts; this module holds the parts they have in common so
neither imports the other's component.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from rftbus.ground.errors import RftbusError

NOBODY = 65534
PIDS_ROOTS = (Path("/sys/fs/cgroup/pids"),)
# The system a sandboxed Python needs, read-only. /etc is left to each sandbox: the SQL reader mounts none of it.
SYSTEM_RO = ("/usr", "/bin", "/lib", "/lib64", "/sbin")


class SandboxUnavailable(RftbusError):
    """bubblewrap is missing or cannot make its namespaces here."""


def bwrap_path() -> str:
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxUnavailable("the sandbox needs bubblewrap: `apt-get install bubblewrap` (Debian, Ubuntu; "
                                 "`make install` does it when it may), or your distribution's bubblewrap package")
    return path


def ro_binds(paths: tuple[str, ...] | list[str]) -> list[str]:
    """bwrap arguments binding each existing path read-only at the same place."""
    return [a for d in paths for a in ("--ro-bind-try", d, d)]


def make_pids_cgroup(max_procs: int) -> Path | None:
    """A cgroup capping the number of processes, where the pids controller is writable (else None)."""
    for root in PIDS_ROOTS:
        if root.is_dir() and os.access(root, os.W_OK):
            path = root / f"rftbus-sandbox-{uuid.uuid4().hex[:12]}"
            try:
                path.mkdir()
                (path / "pids.max").write_text(str(max_procs))
                return path
            except OSError:
                if path.exists():
                    path.rmdir()
    return None


def joiner(cgroup: Path | None) -> Callable[[], None] | None:
    """A `preexec_fn` putting the child, before exec, in `cgroup`: bwrap and everything it starts are counted."""
    if cgroup is None:
        return None
    procs = str(cgroup / "cgroup.procs")

    def join() -> None:
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
    return join


def remove_cgroup(cgroup: Path | None) -> None:
    if cgroup is not None:
        try:
            cgroup.rmdir()
        except OSError:
            pass


def kill_all(proc: subprocess.Popen, cgroup: Path | None = None) -> None:
    """SIGKILL the process group a sandbox was started in, and whatever left it but stayed in its cgroup."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if cgroup is None:
        return
    for _ in range(50):
        try:
            pids = [int(p) for p in (cgroup / "cgroup.procs").read_text().split()]
        except OSError:
            return
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)
