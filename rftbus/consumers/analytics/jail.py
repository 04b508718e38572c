"""The one reader of embedded analytics data: chDB in a bubblewrap sandbox that can reach nothing else.

Why a separate process: chDB runs the scalar `file()` under `readonly=1`, its schema inference reads files
and URLs, and `remote()` opens sockets (issue #42); a grammar in front of an engine that can do all that is a
deny-list however it is written. Here the engine itself sees only what it should: the analytics folder
read-only at /data, the system's /usr and /lib, this Python and the chDB package, read-only; no /etc, no state
folder, no config, no secrets in its environment, no network namespace (no interface but an unconfigured
loopback), its own PIDs (its /proc shows only itself), rlimits, and `nobody` as its user. It is killed at the
query deadline, and it answers at most `analytics.query_max_bytes`.

chDB locks a folder per process; the sandbox gets a private `status` file (the lock) and tmp, so it reads
the folder while the sink writes it: MergeTree parts are immutable once written, and each reader process sees
the parts that existed when it opened. One process serves one reader (a page's queries, one CLI call).
"""

from __future__ import annotations

import importlib.util
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rftbus.ground.config.analytics import AnalyticsConfig
from rftbus.ground.sandbox import (NOBODY, SYSTEM_RO, SandboxUnavailable, bwrap_path, joiner, kill_all, make_pids_cgroup,
                            remove_cgroup, ro_binds)

from .backends.base import READ_SETTINGS, AnalyticsError, Backend, QueryError, Result, check_params, read_limits

LAUNCHER = Path(__file__).with_name("jail_launcher.py")
START_S = 30.0  # opening the folder: chDB loads every table's parts list
OPEN_TRIES = 3


@dataclass(frozen=True)
class JailLimits:
    cpu_s: int = 60
    memory_mb: int = 0  # RLIMIT_AS; 0: analytics.query_max_memory_bytes + 2 GiB, at least 4 GiB (chDB's thread
    # stacks and allocator reserve address space: it does not start under 4 GiB)
    max_procs: int = 512  # threads count: chDB sizes its pools by the cores it sees
    max_file_mb: int = 1  # it writes only its lock file
    max_open_files: int = 4096


class JailError(QueryError):
    """The sandboxed reader refused or failed a query; the message is a category, never engine output."""

    def __init__(self, category: str, message: str):
        super().__init__(f"{category}: {message}")
        self.category = category


def _chdb_dirs() -> list[Path]:
    """The chDB package and the shared libraries its wheel vendors (chdb_core.libs), found without importing it."""
    spec = importlib.util.find_spec("chdb")
    if spec is None or not spec.submodule_search_locations:
        raise AnalyticsError("chDB is not installed: pip install 'rftbus[analytics]'")
    pkg = Path(list(spec.submodule_search_locations)[0])
    return [pkg, *sorted(p for p in pkg.parent.glob("*.libs") if p.name.startswith("chdb"))]


def _python() -> tuple[str, str]:
    """(this interpreter's real path, its installation prefix): bound read-only; never the venv."""
    prefix = os.path.realpath(sys.base_prefix)
    exe = os.path.realpath(sys.executable)
    if not exe.startswith(prefix + os.sep):  # a venv whose python is a copy: use the base installation's
        exe = os.path.join(prefix, "bin", Path(exe).name)
    return exe, prefix


class TooManyReaders(AnalyticsError):
    """analytics.max_readers sandboxed readers run in this process already."""


_running = 0  # sandboxed readers of this process (each holds a slot from its start to its close)
_slots_lock = threading.Lock()


def _take_slot(limit: int) -> None:
    global _running
    with _slots_lock:
        if _running >= limit:
            raise TooManyReaders(f"{_running} sandboxed readers are running (analytics.max_readers {limit}, about "
                                 "250 MB each): try again when one is done")
        _running += 1


def _give_slot() -> None:
    global _running
    with _slots_lock:
        _running = max(0, _running - 1)


class JailedChdb(Backend):
    """Read-only queries on a chDB folder through the sandboxed reader (see the module's docstring)."""

    def __init__(self, path: Path, database: str, analytics: AnalyticsConfig | None = None,
                 limits: JailLimits = JailLimits()):
        a = analytics or AnalyticsConfig()
        self.path, self.database, self.analytics, self.limits = Path(path).absolute(), database, a, limits
        self.describe = f"chDB {self.path} (sandboxed reader)"
        if not (self.path / "metadata").is_dir():
            raise QueryError(f"no analytics data at {self.path}: run `rftbus analytics sink` (or `rftbus run`) first")
        self.deadline_s = a.query_timeout_s + 5.0
        self._proc: subprocess.Popen | None = None
        self._tmp: str | None = None
        self._cgroup: Path | None = None
        self._buf = bytearray()
        self._slot = False

    # -- the process ---------------------------------------------------------------------------------
    def _argv(self, bwrap: str, tmp: Path) -> list[str]:
        exe, prefix = _python()
        # At a neutral path: the host's own (a home folder, /root) may be closed to `nobody`. Python finds its
        # standard library from where the interpreter is.
        binds = ["--ro-bind", prefix, "/python", "--perms", "0755", "--dir", "/py"]
        for i, d in enumerate(_chdb_dirs()):
            binds += ["--ro-bind", str(d), f"/py/{d.name}" if i else "/py/chdb"]
        return [bwrap, *ro_binds(SYSTEM_RO), *binds,
                "--perms", "0755", "--dir", "/etc", "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
                "--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(64 << 20), "--tmpfs", "/tmp",
                *self._data_binds(tmp),
                "--ro-bind", str(tmp / "jail"), "/jail",
                "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-pid", "--unshare-cgroup-try",
                "--die-with-parent", "--new-session", "--hostname", "sql", "--clearenv", "--setenv", "LANG", "C.UTF-8",
                "--chdir", "/tmp", "/python" + exe[len(prefix):], "-I", "-S", "/jail/launcher.py"]

    def _data_binds(self, tmp: Path) -> list[str]:
        """/data: the folder's entries read-only (its lock file and tmp are the sandbox's own, and need not exist
        in the folder: chDB removes its lock file when the sink stops)."""
        out = ["--perms", "0755", "--tmpfs", "/data"]
        for child in sorted(self.path.iterdir()):
            if child.name not in ("status", "tmp"):
                out += ["--ro-bind", str(child), f"/data/{child.name}"]
        return out + ["--perms", "1777", "--size", str(64 << 20), "--tmpfs", "/data/tmp",
                      "--bind", str(tmp / "status"), "/data/status"]

    def _start(self) -> subprocess.Popen:
        """The reader, opened again (up to OPEN_TRIES) when opening failed: a folder the sink is writing can be
        caught mid-insert (seen about once in three runs of tests/integration/test_sql_reader.py)."""
        for attempt in range(1, OPEN_TRIES + 1):
            try:
                return self._start_once()
            except JailError as e:
                if e.category != "unavailable" or attempt == OPEN_TRIES:
                    raise
                time.sleep(0.2 * attempt)
        raise AssertionError("unreachable")

    def _start_once(self) -> subprocess.Popen:
        try:
            bwrap = bwrap_path()
        except SandboxUnavailable as e:  # no engine runs unsandboxed: the read is refused, saying why
            raise AnalyticsError(f"the analytics reader runs only in its sandbox: {e}") from None
        if not self._slot:
            _take_slot(self.analytics.max_readers)
            self._slot = True
        tmp = Path(tempfile.mkdtemp(prefix="rftbus-sql-"))
        self._tmp = str(tmp)
        (tmp / "jail").mkdir()
        shutil.copyfile(LAUNCHER, tmp / "jail" / "launcher.py")
        a = self.analytics
        settings = {**READ_SETTINGS, **read_limits(a)}
        (tmp / "jail" / "config.json").write_text(json.dumps({
            "database": self.database, "settings": settings, "max_bytes": a.query_max_bytes,
            "limits": asdict(self.limits) | {"cpu_s": int(max(self.limits.cpu_s, a.query_timeout_s * 4)),
                                             "memory_mb": self.limits.memory_mb or max(
                                                 4096, (a.query_max_memory_bytes >> 20) + 2048)}}))
        (tmp / "status").touch()
        if os.geteuid() == 0:  # the launcher drops to nobody, who must write its lock file
            os.chown(tmp / "status", NOBODY, NOBODY)
        self._cgroup = make_pids_cgroup(self.limits.max_procs)
        proc = subprocess.Popen(self._argv(bwrap, tmp), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin"}, start_new_session=True,
                                preexec_fn=joiner(self._cgroup))
        self._proc, self._buf = proc, bytearray()
        header = self._header(time.monotonic() + START_S, starting=True)
        if not header.get("ok"):
            self.close()
            raise JailError(header.get("category", "unavailable"), header.get("message", "the reader did not start"))
        return proc

    def _header(self, deadline: float, starting: bool = False) -> dict:
        line = self._read_until(b"\n", deadline, 64 * 1024, starting)
        try:
            return json.loads(line)
        except ValueError:
            self.close()
            raise JailError("engine", "the sandboxed reader answered out of turn") from None

    def _read_until(self, end: bytes | None, deadline: float, limit: int, starting: bool = False,
                    n: int | None = None) -> bytes:
        """Bytes from the reader up to `end` (consumed, not returned) or exactly `n`, within `deadline`;
        kills it on overrun. What was read past them stays in the buffer for the next call."""
        assert self._proc is not None and self._proc.stdout is not None
        fd, buf = self._proc.stdout.fileno(), self._buf
        while True:
            if n is not None and len(buf) >= n:
                out = bytes(buf[:n])
                del buf[:n]
                return out
            if end is not None and end in buf:
                i = buf.index(end)
                out = bytes(buf[:i])
                del buf[:i + len(end)]
                return out
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                if starting:
                    raise JailError("unavailable", f"the sandboxed reader did not open the data in {START_S:g} s")
                raise JailError("timeout", f"the query ran past analytics.query_timeout_s "
                                           f"({self.analytics.query_timeout_s:g} s) and was stopped")
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                code = self._proc.poll()
                self.close()
                raise JailError("engine" if not starting else "unavailable",
                                f"the sandboxed reader exited (status {code})")
            buf += chunk
            if len(buf) > limit + 64 * 1024:
                self.close()
                raise JailError("result_too_large", "over analytics.query_max_bytes")

    # -- the Backend interface -----------------------------------------------------------------------
    def query(self, sql: str, params: dict[str, str] | None = None) -> Result:
        params = check_params(sql, params)
        proc = self._proc if self._proc is not None and self._proc.poll() is None else self._start()
        assert proc.stdin is not None
        try:
            proc.stdin.write(json.dumps({"sql": sql.strip().rstrip(";"), "params": params}).encode() + b"\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self.close()
            raise JailError("engine", "the sandboxed reader is gone") from None
        deadline = time.monotonic() + self.deadline_s
        header = self._header(deadline)
        if not header.get("ok"):
            raise JailError(header.get("category", "engine"), header.get("message", ""))
        size = int(header.get("bytes", 0))
        if size > self.analytics.query_max_bytes:
            self.close()
            raise JailError("result_too_large", "over analytics.query_max_bytes")
        body = self._read_until(None, deadline, self.analytics.query_max_bytes, n=size)
        res = Result.from_json_compact(body)
        if len(res.rows) > self.analytics.query_max_rows:  # ClickHouse checks max_result_rows only with a FROM
            raise JailError("result_too_large", f"{len(res.rows)} rows: analytics.query_max_rows is "
                                                f"{self.analytics.query_max_rows}")
        return res

    def execute(self, sql: str) -> None:
        raise AnalyticsError("the sandboxed reader is read-only")

    def insert_rows(self, table: str, columns: list[str], body: bytes) -> None:
        raise AnalyticsError("the sandboxed reader is read-only")

    def close(self) -> None:
        if self._proc is not None:
            kill_all(self._proc, self._cgroup)
            self._proc.wait()
            for f in (self._proc.stdin, self._proc.stdout):
                if f is not None:
                    try:
                        f.close()
                    except OSError:
                        pass
            self._proc = None
        remove_cgroup(self._cgroup)
        self._cgroup = None
        if self._slot:
            _give_slot()
            self._slot = False
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


__all__ = ["JailError", "JailLimits", "JailedChdb"]
