"""Runs inside the bubblewrap sandbox (`python -I -S .launcher.py`), before the untrusted code.

bwrap already made the namespaces (mount, PID, network, IPC, UTS) and the read-only view of the
system; this applies the rlimits, drops root to `nobody` when it is root (RLIMIT_NPROC does not bind
root, and root could read root-only files of the read-only view), records what held in
`.sandbox.json`, then runs `main.py`. Stdlib only: it runs with -S (no site-packages).
"""

import json
import os
import resource
import runpy
import sys

NOBODY = 65534


def main():
    limits = json.loads(open(".limits.json").read())
    mb = 1024 * 1024
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_s"], limits["cpu_s"] + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_mb"] * mb, limits["memory_mb"] * mb))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["max_file_mb"] * mb, limits["max_file_mb"] * mb))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits["max_open_files"], limits["max_open_files"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # RLIMIT_NPROC counts every process of the user (`nobody`) on the machine, other sandboxes' too: where the
    # pids cgroup caps this tree exactly, the rlimit is only a loose backstop, so the cgroup is what refuses a
    # fork and its refusal is seen (pids.events); a caught EAGAIN from the rlimit leaves no trace
    nproc = limits["max_procs"] * 4 + 64 if limits.get("cgroup") else limits["max_procs"]
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    held = {"filesystem": "bwrap: read-only system, private /tmp and work dir", "network": "netns", "pids": "pidns"}
    if os.geteuid() == 0:
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)
        held["user"] = "nobody"
    held["procs"] = f"cgroup pids.max={limits['max_procs']}" if limits.get("cgroup") else "rlimit_nproc"
    with open(".sandbox.json", "w") as f:
        json.dump(held, f)
    os.remove(".limits.json")
    sys.argv = ["main.py"]
    runpy.run_path("main.py", run_name="__main__")


if __name__ == "__main__":
    main()
