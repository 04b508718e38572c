"""Start, stop and check the embedded Apache Kafka 4.x broker in KRaft combined mode: one node, or a
cluster of three (`broker.nodes: 3`: each node a broker and one of three controller voters).

Each node is the official `kafka.Kafka` main class from the Maven Central jars, run as a detached java
process. One node owns `<state_dir>/kafka/` (data, logs, server.properties, its pid file); in a cluster
node N owns `<state_dir>/kafka/node-N/`, all formatted with one cluster id. A restart reuses the data
folders, so every record survives.
"""

from __future__ import annotations

import base64
import errno
import os
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil
from confluent_kafka import KafkaException
from rich.console import Console

from rftbus.ground.broker.jars import ensure_jars
from rftbus.ground.broker.java import find_java
from rftbus.ground.broker.node_config import BrokerPaths, java_cmd, server_properties
from rftbus.ground.config import Config
from rftbus.ground.errors import RftbusError
from rftbus.ground.kafka.clients import BrokerUnreachable, check_reachable

MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"


class BrokerError(RftbusError):
    """The embedded broker cannot be started, stopped or found; the message says why."""


@dataclass(frozen=True)
class BrokerState:
    pid: int | None
    bootstrap: str
    state_dir: Path
    started: bool  # False when it was already running


def _new_cluster_id() -> str:
    """Kafka's Uuid text form: URL-safe base64 of 16 random bytes, unpadded, never starting with "-"
    (as Kafka's Uuid.randomUuid: kafka-storage's argument parser reads "-x..." as an option, so 1 format
    in 64 failed with "argument --cluster-id/-t: expected one argument")."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


def _read_meta(path: Path) -> dict[str, str]:
    meta: dict[str, str] = {}
    for line in path.read_text(errors="replace").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            if "=" not in line:
                raise ValueError(f"line {line[:60]!r} is not key=value")
            key, _, value = line.partition("=")
            meta[key.strip()] = value.strip()
    return meta


def check_state(cfg: Config, node: int | None = None) -> bool:
    """True if a node's storage is formatted and consistent, False if it is new; BrokerError if it is corrupt."""
    node = cfg.broker.node_id if node is None else node
    paths = BrokerPaths.of(cfg, node)
    has_data = paths.data.exists() and any(paths.data.iterdir())
    if not paths.meta.exists():
        if has_data:
            raise BrokerError(
                f"state folder {cfg.state_dir} is corrupt: {paths.data} holds data but no meta.properties; "
                "move it away (its records are lost to rftbus) or choose another --state-dir"
            )
        return False
    try:
        meta = _read_meta(paths.meta)
    except (OSError, UnicodeError, ValueError) as e:
        raise BrokerError(f"state folder {cfg.state_dir} is corrupt: {paths.meta} cannot be read ({e})") from None
    missing = [k for k in ("cluster.id", "node.id") if not meta.get(k)]
    if missing:
        raise BrokerError(
            f"state folder {cfg.state_dir} is corrupt: {paths.meta} lacks {', '.join(missing)}; "
            "move it away or choose another --state-dir"
        )
    if meta["node.id"] != str(node):
        raise BrokerError(
            f"state folder {paths.root} belongs to broker node.id={meta['node.id']}, "
            f"but this node is {node} (broker.node_id)"
        )
    return True


def _port_free(host: str, port: int) -> bool:
    # SO_REUSEADDR mirrors what the JVM sets, so sockets lingering in TIME_WAIT do not count as "in use".
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise BrokerError(f"cannot bind {host}:{port}: {e.strerror}") from None
    return True


def _port_owner(port: int) -> str:
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                return f" by pid {conn.pid} ({psutil.Process(conn.pid).name()})"
    except (psutil.Error, OSError):
        pass
    return ""


def running_pid(cfg: Config, node: int | None = None) -> int | None:
    """Pid of a node of this state folder if it is alive (a stale or garbled pid file counts as none);
    `node` None: any node's (the first that runs)."""
    if node is None:
        return next((p for p in running_pids(cfg).values() if p is not None), None)
    paths = BrokerPaths.of(cfg, node)
    try:
        pid = int(paths.pidfile.read_text().strip())
        proc = psutil.Process(pid)
        cmdline = proc.cmdline()
    except (OSError, ValueError, psutil.Error):
        return None
    if MAIN_CLASS in cmdline and str(paths.props) in cmdline and proc.status() != psutil.STATUS_ZOMBIE:
        return pid
    return None


def running_pids(cfg: Config) -> dict[int, int | None]:
    """node id -> its pid, or None when it is not running."""
    return {n: running_pid(cfg, n) for n in cfg.broker.node_ids}


def _classpath(cfg: Config, console: Console | None) -> str:
    b = cfg.broker
    target = b.libs_dir or cfg.state_dir / "kafka" / f"libs-{b.kafka_version}"
    return str(ensure_jars(target, b.kafka_version, console)) + "/*"


def _cluster_id(cfg: Config) -> str:
    """One id for every node of the cluster: kept beside the nodes' folders (a node formatted later, or
    again after its folder was lost, joins the same cluster)."""
    if cfg.broker.nodes == 1:
        return _new_cluster_id()
    path = cfg.state_dir / "kafka" / "cluster.id"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_new_cluster_id())
    return path.read_text().strip()


def _format(cfg: Config, java: str, classpath: str, node: int) -> None:
    paths = BrokerPaths.of(cfg, node)
    cmd = java_cmd(cfg, java, classpath, STORAGE_TOOL, "format", "-t", _cluster_id(cfg), "-c", str(paths.props),
                    node=node)
    cmd.insert(1, "-XX:TieredStopAtLevel=1")  # a one-shot tool: the quick JIT alone starts it ~0.5 s sooner
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BrokerError(f"formatting Kafka storage in {paths.data} failed:\n{(proc.stdout + proc.stderr).strip()[-2000:]}")


def log_tail(cfg: Config, lines: int = 15, node: int | None = None) -> str:
    """Last lines of the broker's logs (a node's, or every node's), preferring ERROR/FATAL lines."""
    text = ""
    for n in ([node] if node is not None else cfg.broker.node_ids):
        paths = BrokerPaths.of(cfg, n)
        for f in (paths.logs / "server.log", paths.stdout):
            if f.exists():
                text += f.read_text(errors="replace")
    all_lines = text.strip().splitlines()
    errors = [ln for ln in all_lines if " ERROR " in ln or " FATAL " in ln or "Exception" in ln]
    return "\n".join((errors or all_lines)[-lines:])


def start(cfg: Config, console: Console | None = None) -> BrokerState:
    """Start every node that is not running (formatting storage on first start) and wait until all answer."""
    b = cfg.broker
    pids = running_pids(cfg)
    if all(p is not None for p in pids.values()):
        return BrokerState(pids[b.node_id], b.bootstrap, cfg.state_dir, started=False)
    java = find_java()
    down = [n for n, p in pids.items() if p is None]
    for n in down:
        for port in (b.port_of(n), b.controller_of(n)):
            if not _port_free(b.host, port):
                raise BrokerError(
                    f"port {port} on {b.host} is already in use{_port_owner(port)}; "
                    "choose another with --port (or broker.port / broker.controller_port)"
                )
    classpath = _classpath(cfg, console)
    procs = {n: _launch(cfg, java.path, classpath, n) for n in down}
    for n, proc in procs.items():  # a node answers only once a quorum of controllers is up: start all first
        _wait_ready(cfg, proc, n)
    first = running_pid(cfg, b.node_id)
    return BrokerState(first, b.bootstrap, cfg.state_dir, started=True)


def start_node(cfg: Config, node: int) -> int:
    """Start one node of the cluster again (after a kill) on its data folder; its pid once it answers."""
    pid = running_pid(cfg, node)
    if pid is not None:
        return pid
    proc = _launch(cfg, find_java().path, _classpath(cfg, None), node)
    _wait_ready(cfg, proc, node)
    return proc.pid


def kill_node(cfg: Config, node: int, timeout_s: float = 30.0) -> int:
    """kill -9 one node (no controlled shutdown: as a machine failure) and wait until it is gone."""
    pid = running_pid(cfg, node)
    if pid is None:
        raise BrokerError(f"Kafka node {node} of {cfg.state_dir} is not running")
    os.kill(pid, signal.SIGKILL)
    if not _wait_gone(pid, timeout_s):
        raise BrokerError(f"Kafka node {node} (pid {pid}) did not die within {timeout_s:g}s of SIGKILL")
    return pid


def stop_node(cfg: Config, node: int, timeout_s: float = 60.0) -> None:
    """A controlled shutdown of one node (SIGTERM: it hands its leaderships over first); SIGKILL after timeout."""
    pid = running_pid(cfg, node)
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    if not _wait_gone(pid, timeout_s):
        os.kill(pid, signal.SIGKILL)
        _wait_gone(pid, 15.0)


def _launch(cfg: Config, java: str, classpath: str, node: int) -> subprocess.Popen[bytes]:
    paths = BrokerPaths.of(cfg, node)
    formatted = check_state(cfg, node)
    paths.logs.mkdir(parents=True, exist_ok=True)
    paths.props.write_text(server_properties(cfg, paths, node))
    if not formatted:
        _format(cfg, java, classpath, node)
    cmd = java_cmd(cfg, java, classpath, MAIN_CLASS, str(paths.props), node=node)
    with open(paths.stdout, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=paths.root)
    paths.pidfile.write_text(f"{proc.pid}\n")
    return proc


def _wait_ready(cfg: Config, proc: subprocess.Popen[bytes], node: int) -> None:
    b = cfg.broker
    deadline = time.monotonic() + b.start_timeout_s
    here = f"{b.host}:{b.port_of(node)}"
    ready_cfg = cfg.model_copy(update={"kafka": cfg.kafka.model_copy(update={"bootstrap_servers": here})})
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            BrokerPaths.of(cfg, node).pidfile.unlink(missing_ok=True)
            raise BrokerError(f"Kafka node {node} exited during start (code {proc.returncode}):\n"
                              f"{log_tail(cfg, node=node)}")
        try:
            admin = check_reachable(ready_cfg, timeout=2.0, wait=False)
            # On a cluster, ready once the node's metadata lists every running node: a client's first answer
            # from a node that omits another makes librdkafka destroy that broker's handle and fail its
            # requests in flight (_DESTROY_BROKER; a trainer and a streams worker crashed at start on it, #37)
            if b.nodes == 1 or len(admin.list_topics(timeout=2.0).brokers) >= sum(p is not None for p in running_pids(cfg).values()):
                return
            time.sleep(0.2)
        except BrokerUnreachable:
            time.sleep(0.1)  # a refused connect answers at once (clients._listening): poll often
        except KafkaException:
            time.sleep(0.2)
    stop(cfg)
    raise BrokerError(f"Kafka node {node} did not answer within {b.start_timeout_s:.0f}s:\n{log_tail(cfg, node=node)}")


def stop(cfg: Config, timeout: float = 60.0) -> int | None:
    """Stop every node with SIGTERM (a controlled shutdown that flushes logs); SIGKILL after timeout.
    Returns the first node's pid, or None when nothing was running."""
    pids = running_pids(cfg)
    for n, pid in pids.items():
        if pid is None:
            BrokerPaths.of(cfg, n).pidfile.unlink(missing_ok=True)
        else:
            os.kill(pid, signal.SIGTERM)
    for n, pid in pids.items():
        if pid is not None:
            if not _wait_gone(pid, timeout):
                os.kill(pid, signal.SIGKILL)
                _wait_gone(pid, 15.0)
            BrokerPaths.of(cfg, n).pidfile.unlink(missing_ok=True)
    return next((p for p in pids.values() if p is not None), None)


def _wait_gone(pid: int, timeout: float) -> bool:
    """Wait for exit; a zombie counts as gone (its parent, maybe another process, reaps it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                try:
                    os.waitpid(pid, os.WNOHANG)  # reap it if it is ours
                except ChildProcessError:
                    pass
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.2)
    return False
