"""Start, stop and check a single-node Apache Kafka 4.x broker in KRaft combined mode.

The broker is the official `kafka.Kafka` main class from the Maven Central jars, run as a detached
java process. Everything it owns lives under `<state_dir>/kafka/`: data, logs, server.properties,
its pid file and the cluster id. A restart reuses the data folder, so every record survives.
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
from importlib import resources
from pathlib import Path

import psutil
from rich.console import Console

from rftbus.broker.jars import ensure_jars
from rftbus.broker.java import find_java
from rftbus.config import Config
from rftbus.errors import RftbusError
from rftbus.kafka.clients import BrokerUnreachable, check_reachable

MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"


class BrokerError(RftbusError):
    """The embedded broker cannot be started, stopped or found; the message says why."""


@dataclass(frozen=True)
class BrokerPaths:
    root: Path

    @classmethod
    def of(cls, cfg: Config) -> BrokerPaths:
        return cls(cfg.state_dir / "kafka")

    data = property(lambda self: self.root / "data")
    logs = property(lambda self: self.root / "logs")
    props = property(lambda self: self.root / "server.properties")
    pidfile = property(lambda self: self.root / "broker.pid")
    meta = property(lambda self: self.root / "data" / "meta.properties")
    stdout = property(lambda self: self.root / "logs" / "stdout.log")


@dataclass(frozen=True)
class BrokerState:
    pid: int | None
    bootstrap: str
    state_dir: Path
    started: bool  # False when it was already running


def _server_properties(cfg: Config, paths: BrokerPaths) -> str:
    b = cfg.broker
    props = {
        "process.roles": "broker,controller",
        "node.id": b.node_id,
        "controller.quorum.voters": f"{b.node_id}@{b.host}:{b.controller}",
        "listeners": f"PLAINTEXT://{b.host}:{b.port},CONTROLLER://{b.host}:{b.controller}",
        "advertised.listeners": f"PLAINTEXT://{b.host}:{b.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": paths.data,
        "num.partitions": 1,
        "offsets.topic.replication.factor": 1,
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
        "share.coordinator.state.topic.replication.factor": 1,
        "share.coordinator.state.topic.min.isr": 1,
        "group.initial.rebalance.delay.ms": 0,
        "auto.create.topics.enable": "false",
        "message.max.bytes": 16 * 1024 * 1024 + 1024,
        "log.cleaner.enable": "true",
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


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


def check_state(cfg: Config) -> bool:
    """True if storage is formatted and consistent, False if it is new; BrokerError if it is corrupt."""
    paths = BrokerPaths.of(cfg)
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
    if meta["node.id"] != str(cfg.broker.node_id):
        raise BrokerError(
            f"state folder {cfg.state_dir} belongs to broker node.id={meta['node.id']}, "
            f"but broker.node_id is {cfg.broker.node_id}"
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


def running_pid(cfg: Config) -> int | None:
    """Pid of this state folder's broker if it is alive (a stale or garbled pid file counts as none)."""
    paths = BrokerPaths.of(cfg)
    try:
        pid = int(paths.pidfile.read_text().strip())
        proc = psutil.Process(pid)
        cmdline = proc.cmdline()
    except (OSError, ValueError, psutil.Error):
        return None
    if MAIN_CLASS in cmdline and str(paths.props) in cmdline and proc.status() != psutil.STATUS_ZOMBIE:
        return pid
    return None


def _classpath(cfg: Config, console: Console | None) -> str:
    b = cfg.broker
    target = b.libs_dir or cfg.state_dir / "kafka" / f"libs-{b.kafka_version}"
    return str(ensure_jars(target, b.kafka_version, console)) + "/*"


def _java_cmd(cfg: Config, java: str, classpath: str, main: str, *args: str) -> list[str]:
    paths = BrokerPaths.of(cfg)
    log4j = resources.files("rftbus.broker") / "log4j2.properties"
    return [
        java, f"-Xmx{cfg.broker.heap}", f"-Xms{cfg.broker.heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
        "-Djava.awt.headless=true", f"-Dkafka.logs.dir={paths.logs}", f"-Dlog4j2.configurationFile={log4j}",
        "-cp", classpath, main, *args,
    ]


def _format(cfg: Config, java: str, classpath: str) -> None:
    paths = BrokerPaths.of(cfg)
    cmd = _java_cmd(cfg, java, classpath, STORAGE_TOOL, "format", "-t", _new_cluster_id(), "-c", str(paths.props))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BrokerError(f"formatting Kafka storage in {paths.data} failed:\n{(proc.stdout + proc.stderr).strip()[-2000:]}")


def log_tail(cfg: Config, lines: int = 15) -> str:
    """Last lines of the broker's logs, preferring ERROR/FATAL lines, for error messages."""
    paths = BrokerPaths.of(cfg)
    text = ""
    for f in (paths.logs / "server.log", paths.stdout):
        if f.exists():
            text += f.read_text(errors="replace")
    all_lines = text.strip().splitlines()
    errors = [ln for ln in all_lines if " ERROR " in ln or " FATAL " in ln or "Exception" in ln]
    return "\n".join((errors or all_lines)[-lines:])


def start(cfg: Config, console: Console | None = None) -> BrokerState:
    """Start the broker (formatting storage on first start) and wait until it answers."""
    paths = BrokerPaths.of(cfg)
    b = cfg.broker
    pid = running_pid(cfg)
    if pid is not None:
        return BrokerState(pid, b.bootstrap, cfg.state_dir, started=False)
    java = find_java()
    for port in (b.port, b.controller):
        if not _port_free(b.host, port):
            raise BrokerError(
                f"port {port} on {b.host} is already in use{_port_owner(port)}; "
                "choose another with --port (or broker.port / broker.controller_port)"
            )
    formatted = check_state(cfg)
    classpath = _classpath(cfg, console)
    paths.logs.mkdir(parents=True, exist_ok=True)
    paths.props.write_text(_server_properties(cfg, paths))
    if not formatted:
        _format(cfg, java.path, classpath)
    cmd = _java_cmd(cfg, java.path, classpath, MAIN_CLASS, str(paths.props))
    with open(paths.stdout, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=paths.root)
    paths.pidfile.write_text(f"{proc.pid}\n")
    _wait_ready(cfg, proc)
    return BrokerState(proc.pid, b.bootstrap, cfg.state_dir, started=True)


def _wait_ready(cfg: Config, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + cfg.broker.start_timeout_s
    ready_cfg = cfg.model_copy(update={"kafka": cfg.kafka.model_copy(update={"bootstrap_servers": cfg.broker.bootstrap})})
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            BrokerPaths.of(cfg).pidfile.unlink(missing_ok=True)
            raise BrokerError(f"the Kafka broker exited during start (code {proc.returncode}):\n{log_tail(cfg)}")
        try:
            check_reachable(ready_cfg, timeout=2.0)
            return
        except BrokerUnreachable:
            time.sleep(0.5)
    stop(cfg)
    raise BrokerError(f"the Kafka broker did not answer within {cfg.broker.start_timeout_s:.0f}s:\n{log_tail(cfg)}")


def stop(cfg: Config, timeout: float = 60.0) -> int | None:
    """Stop the broker with SIGTERM (a controlled shutdown that flushes logs); SIGKILL after timeout."""
    pid = running_pid(cfg)
    paths = BrokerPaths.of(cfg)
    if pid is None:
        paths.pidfile.unlink(missing_ok=True)
        return None
    os.kill(pid, signal.SIGTERM)
    if not _wait_gone(pid, timeout):
        os.kill(pid, signal.SIGKILL)
        _wait_gone(pid, 15.0)
    paths.pidfile.unlink(missing_ok=True)
    return pid


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
