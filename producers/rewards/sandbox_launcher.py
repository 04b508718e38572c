"""Runs inside the sandbox child (`python -I -S sandbox_launcher.py LIMITS_JSON`), before user code.

Single-threaded and fresh, so it can unshare namespaces: it joins the pids cgroup the parent made,
leaves the network (a new, empty network namespace) and the process tree (a new PID namespace: the
code runs as its pid 1 and cannot see or signal any process outside, so `os.kill(-1, 9)` or killing
its parent hurts nothing), applies the rlimits, records what held in `.sandbox.json`, then runs
`main.py`. Stdlib only: it runs with -S (no site-packages).
"""

import ctypes
import json
import os
import resource
import runpy
import signal
import socket
import sys

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000


def _unshare(flags):
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.unshare(flags) == 0


def _block_sockets():
    """Fallback when no network namespace can be made: refuse every non-Unix socket."""
    real = socket.socket

    class NoNetSocket(real):
        def __init__(self, family=socket.AF_INET, *args, **kwargs):
            if family not in (socket.AF_UNIX,):
                raise PermissionError("network access is disabled in the rftbus sandbox")
            super().__init__(family, *args, **kwargs)

    socket.socket = NoNetSocket
    socket.create_connection = lambda *a, **k: NoNetSocket()


def main():
    limits = json.loads(open(sys.argv[1]).read())
    held = {}
    if limits.get("cgroup"):
        with open(os.path.join(limits["cgroup"], "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        held["procs"] = "cgroup pids.max=%d" % limits["max_procs"]
    if _unshare(CLONE_NEWNET | CLONE_NEWPID) or _unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWPID):
        held["network"], held["pids"] = "netns", "pidns"
    else:
        if _unshare(CLONE_NEWNET) or _unshare(CLONE_NEWUSER | CLONE_NEWNET):
            held["network"] = "netns"
        else:
            _block_sockets()
            held["network"] = "socket_block"
        held["pids"] = "pidns" if _unshare(CLONE_NEWPID) else "none (no PID namespace: the code can signal " \
                                                                "any process its user can)"
    mb = 1024 * 1024
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_s"], limits["cpu_s"] + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_mb"] * mb, limits["memory_mb"] * mb))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["max_file_mb"] * mb, limits["max_file_mb"] * mb))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits["max_open_files"], limits["max_open_files"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (limits["max_procs"], limits["max_procs"]))
    if "procs" not in held:  # root ignores RLIMIT_NPROC; without the cgroup say so
        held["procs"] = "rlimit_nproc" if os.geteuid() != 0 else "none (root, no pids cgroup)"
    with open(".sandbox.json", "w") as f:
        json.dump(held, f)
    if held["pids"] == "pidns":
        _run_as_namespace_init()
    sys.argv = ["main.py"]
    runpy.run_path("main.py", run_name="__main__")


def _run_as_namespace_init():
    """unshare(CLONE_NEWPID) moves only later children into the new namespace: fork, run the code in
    the child (pid 1 there), and mirror its exit status here (exit code, or death by the same signal)."""
    pid = os.fork()
    if pid == 0:
        return
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # the only two whose handler cannot be set
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


if __name__ == "__main__":
    main()
