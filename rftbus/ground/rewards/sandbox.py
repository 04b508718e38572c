"""Running untrusted code (a policy's program against tests) in a bubblewrap sandbox.

Why bubblewrap: Debian packages it (`apt-get install bubblewrap`, which `make install` runs), it
needs no daemon and no config file, it runs unprivileged where user namespaces are allowed and as
root elsewhere, and Flatpak keeps it maintained. nsjail does more (seccomp policies, cgroup limits of
its own) but is not in Debian's archive and would be built from source.

What holds: a read-only view of the system (/usr, /bin, /lib, /etc), nothing else of the host (no
home, no explorer files, no state folder); a private writable work dir (the cwd and HOME) and a
private /tmp of `tmp_mb`; new mount, PID, network (empty: no network), IPC and UTS namespaces; the
code runs as `nobody` when the explorer is root; rlimits on CPU seconds, address space, file size,
open files, processes (plus a cgroup `pids.max` when the pids controller is writable); a wall-clock
limit that kills the whole tree. `limits_hit` names every limit the code ran into (pids, memory,
cpu, file_size, open_files, wall, output), so the reward function decides what that is worth.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rftbus.ground.sandbox import (NOBODY, SandboxUnavailable, bwrap_path, joiner, kill_all, make_pids_cgroup, remove_cgroup,
                            ro_binds)
from rftbus.ground.sandbox import SYSTEM_RO as BASE_RO

__all__ = ["NOBODY", "SandboxLimits", "SandboxResult", "SandboxUnavailable", "bwrap_path", "check_sandbox",
           "run_sandboxed"]

LAUNCHER = Path(__file__).with_name("sandbox_launcher.py")
OUTPUT_LIMIT = 64 * 1024
SYSTEM_RO = (*BASE_RO, "/etc")


@dataclass(frozen=True)
class SandboxLimits:
    wall_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 1024
    max_procs: int = 16
    max_file_mb: int = 16
    max_open_files: int = 64
    tmp_mb: int = 64


@dataclass
class SandboxResult:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    wall_s: float
    held: dict[str, str]  # which isolation mechanisms were in force
    limits_hit: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def _interpreter() -> tuple[str, list[str]]:
    """A Python inside the read-only system view (Debian's /usr/bin/python3), else this one's install
    bound read-only at its own path (never the venv: it may sit in a home folder)."""
    system = Path("/usr/bin/python3")
    if system.exists():
        return str(system), []
    prefix = os.path.realpath(sys.base_prefix)
    return os.path.join(prefix, "bin", Path(os.path.realpath(sys.executable)).name), ["--ro-bind", prefix, prefix]


def _read(path: Path) -> tuple[str, bool]:
    """(text, whether it was cut at OUTPUT_LIMIT)."""
    with open(path, "rb") as f:
        data = f.read(OUTPUT_LIMIT + 1)
    return data[:OUTPUT_LIMIT].decode(errors="replace"), len(data) > OUTPUT_LIMIT


def _argv(bwrap: str, work: str, limits: SandboxLimits) -> list[str]:
    python, extra = _interpreter()
    ro = ro_binds(SYSTEM_RO)
    return [bwrap, *ro, *extra, "--proc", "/proc", "--dev", "/dev",
            "--perms", "1777", "--size", str(limits.tmp_mb * 1024 * 1024), "--tmpfs", "/tmp",
            "--bind", work, "/sandbox", "--chdir", "/sandbox",
            "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-pid", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--hostname", "sandbox", "--clearenv",
            "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/sandbox", "--setenv", "TMPDIR", "/tmp",
            "--setenv", "LANG", "C.UTF-8", python, "-I", "-S", ".launcher.py"]


def limits_hit(returncode: int | None, timed_out: bool, stderr: str, cgroup_max_events: int,
               output_cut: bool) -> list[str]:
    """The limits a run ran into, from its exit (bwrap exits 128 + signal), stderr and the cgroup."""
    hit = []
    if cgroup_max_events or "BlockingIOError" in stderr or "Resource temporarily unavailable" in stderr:
        hit.append("pids")
    if "MemoryError" in stderr or "Cannot allocate memory" in stderr:
        hit.append("memory")
    if returncode in (128 + signal.SIGXCPU, -signal.SIGXCPU):
        hit.append("cpu")
    if returncode in (128 + signal.SIGXFSZ, -signal.SIGXFSZ) or "File too large" in stderr:
        hit.append("file_size")
    if "Too many open files" in stderr:
        hit.append("open_files")
    if timed_out:
        hit.append("wall")
    if output_cut:
        hit.append("output")
    return hit


def _max_events(cgroup: Path | None) -> int:
    """How often the cgroup refused a fork (pids.events `max`)."""
    if cgroup is None:
        return 0
    try:
        events = dict(line.split() for line in (cgroup / "pids.events").read_text().splitlines())
    except (OSError, ValueError):
        return 0
    return int(events.get("max", 0))


def run_sandboxed(code: str, limits: SandboxLimits = SandboxLimits()) -> SandboxResult:
    """Run `code` as a Python program under `limits`; never raises for anything the code does.
    Raises SandboxUnavailable when there is no bubblewrap."""
    bwrap = bwrap_path()
    cgroup = make_pids_cgroup(limits.max_procs)
    with tempfile.TemporaryDirectory(prefix="rftbus-sandbox-") as tmp, \
            tempfile.TemporaryDirectory(prefix="rftbus-sandbox-out-") as out_dir:
        work = Path(tmp)
        (work / "main.py").write_text(code)
        shutil.copyfile(LAUNCHER, work / ".launcher.py")
        (work / ".limits.json").write_text(json.dumps({**limits.__dict__, "cgroup": cgroup is not None}))
        if os.geteuid() == 0:  # the launcher drops to nobody, who must own its work dir
            for p in (work, *work.iterdir()):
                os.chown(p, NOBODY, NOBODY)
        t0 = time.monotonic()
        out_path, err_path = Path(out_dir) / "stdout", Path(out_dir) / "stderr"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(_argv(bwrap, tmp, limits), cwd=tmp, env={"PATH": "/usr/bin:/bin"},
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True,
                                    preexec_fn=joiner(cgroup))
            timed_out = False
            try:
                proc.wait(timeout=limits.wall_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                kill_all(proc, cgroup)
                proc.wait()
        wall = time.monotonic() - t0
        held_file = work / ".sandbox.json"
        try:
            held = json.loads(held_file.read_text()) if held_file.exists() else {}
        except ValueError:  # the code may overwrite it; what held is then unknown, not a crash
            held = {}
        stdout, cut = _read(out_path)
        stderr, _ = _read(err_path)
        code_ = None if timed_out else proc.returncode
        hit = limits_hit(code_, timed_out, stderr, _max_events(cgroup), cut)
    remove_cgroup(cgroup)
    return SandboxResult(code_, stdout, stderr, timed_out, wall, held, hit)


def check_sandbox() -> None:
    """Raise SandboxUnavailable, naming why, when bubblewrap cannot run code here (once per process)."""
    r = run_sandboxed("print('ok')", SandboxLimits(wall_s=30))
    if r.stdout != "ok\n":
        raise SandboxUnavailable(f"bubblewrap cannot run sandboxed code here (exit {r.returncode}): "
                                 f"{r.stderr.strip()[-500:] or 'no output'}")
