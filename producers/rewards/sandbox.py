"""Running untrusted code (e.g. a policy's program against tests) in a limited subprocess.

What holds, on Linux: a fresh temp dir as cwd and HOME; wall-clock limit (the whole process tree is
killed); CPU seconds (RLIMIT_CPU), address space (RLIMIT_AS), file size, open files, no core dumps;
no network (a new empty network namespace when unshare is permitted, else a socket-refusing shim,
which determined code could undo; the result says which held); a process-count limit through a
cgroup `pids.max` when the pids controller is writable (root), else RLIMIT_NPROC (which the kernel
does not enforce for root, so the result says so). Not held: filesystem isolation beyond the temp
cwd (no chroot / mount namespace): the code runs as the explorer's user.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

LAUNCHER = Path(__file__).with_name("sandbox_launcher.py")
PIDS_ROOTS = (Path("/sys/fs/cgroup/pids"),)
OUTPUT_LIMIT = 64 * 1024


@dataclass(frozen=True)
class SandboxLimits:
    wall_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 1024
    max_procs: int = 16
    max_file_mb: int = 16
    max_open_files: int = 64


@dataclass
class SandboxResult:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    wall_s: float
    held: dict[str, str]  # which isolation mechanisms were in force ("network", "procs")

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def _make_pids_cgroup(max_procs: int) -> Path | None:
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


def _kill_all(proc: subprocess.Popen, cgroup: Path | None) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if cgroup is None:
        return
    for _ in range(50):  # processes that left the process group are still in the cgroup
        pids = [int(p) for p in (cgroup / "cgroup.procs").read_text().split()]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)


def _read(path: Path) -> str:
    with open(path, "rb") as f:
        return f.read(OUTPUT_LIMIT).decode(errors="replace")


def run_sandboxed(code: str, limits: SandboxLimits = SandboxLimits()) -> SandboxResult:
    """Run `code` as a Python program under `limits`; never raises for anything the code does."""
    cgroup = _make_pids_cgroup(limits.max_procs)
    with tempfile.TemporaryDirectory(prefix="rftbus-sandbox-") as tmp:
        work = Path(tmp)
        (work / "main.py").write_text(code)
        spec = {**limits.__dict__, "cgroup": str(cgroup) if cgroup else None}
        (work / ".limits.json").write_text(json.dumps(spec))
        env = {"PATH": "/usr/bin:/bin", "HOME": tmp, "TMPDIR": tmp, "LANG": "C.UTF-8"}
        t0 = time.monotonic()
        with open(work / ".stdout", "wb") as out, open(work / ".stderr", "wb") as err:
            proc = subprocess.Popen([sys.executable, "-I", "-S", str(LAUNCHER), str(work / ".limits.json")],
                                    cwd=tmp, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    start_new_session=True)
            timed_out = False
            try:
                proc.wait(timeout=limits.wall_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_all(proc, cgroup)
                proc.wait()
        wall = time.monotonic() - t0
        held_file = work / ".sandbox.json"
        held = json.loads(held_file.read_text()) if held_file.exists() else {}
        result = SandboxResult(None if timed_out else proc.returncode, _read(work / ".stdout"),
                               _read(work / ".stderr"), timed_out, wall, held)
    if cgroup is not None:
        try:
            cgroup.rmdir()
        except OSError:
            pass
    return result
