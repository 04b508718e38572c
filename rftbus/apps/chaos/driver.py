"""`rftbus chaos`: run the main job, attack it, drain it, and reconcile what the logs say happened.

1. broker up (its own, or the one given), topics, poison at the head of tasks and expert (they are
   backlogged topics, so poison appended mid-run would not be read before the drain);
2. `rftbus run` as a subprocess, exactly as a user starts it; warm-up until the trainer steps;
3. faults, one at a time, each waited out until the system works again: kill -9 of every process
   kind (the run's supervisor restarts them), poison on every other input topic, a load burst (+ live
   traffic through serve), kill -9 of the broker and a restart on the same data, more kill rounds;
4. drain (drain.py), stop the run cleanly, let the analytics sink catch up, read the ledger, tally.
Every phase is bounded; past `plan.max_minutes` no new fault starts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from rich.console import Console

from rftbus.apps.chaos import failover as FO
from rftbus.apps.chaos import faults as F
from rftbus.apps.chaos import live_join as LJ
from rftbus.apps.chaos.drain import drain, lag
from rftbus.apps.chaos.load import burst, live_traffic
from rftbus.apps.chaos.plan import ChaosPlan
from rftbus.apps.chaos.poison import Poison, catalogue, inject
from rftbus.apps.chaos.result import ChaosResult
from rftbus.apps.chaos.settle import settle
from rftbus.ground.config import Config, write_config
from rftbus.ground.errors import RftbusError
from rftbus.ground.kafka.clients import check_reachable, make_admin
from rftbus.ground.kafka.committed import CommittedOffsets
from rftbus.ground.kafka.topics import create_topics

PRE_RUN_POISON = ("tasks", "expert")


class ChaosDriver:
    """cfg: the attacked run's config (state_dir is the run's own). broker_cfg: the embedded broker to
    kill and restart; None means cfg's own, which the driver also starts and stops."""

    def __init__(self, cfg: Config, plan: ChaosPlan, console: Console, broker_cfg: Config | None = None):
        self.cfg, self.plan, self.console = cfg, plan, console
        self.owns_broker = broker_cfg is None
        # A cluster is handed to `rftbus run` once the poison is in: its supervisor restarts dead nodes (#37)
        self.run_owns_broker = self.owns_broker and plan.nodes > 1
        self.broker_cfg = broker_cfg or cfg
        self.workdir = cfg.state_dir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.res = ChaosResult(plan)
        self.t0 = time.monotonic()
        self.proc: subprocess.Popen | None = None
        self._admin: AdminClient | None = None  # for streams' lag while a restarted worker catches up; made on first use
        self._committed = CommittedOffsets(cfg)  # its consumers too: kept, as they recover from a broker restart

    # ---- helpers -----------------------------------------------------------------------------
    def now(self) -> float:
        return time.monotonic() - self.t0

    def say(self, text: str) -> None:
        m, s = divmod(int(self.now()), 60)
        self.console.print(f"[dim]{m:2d}:{s:02d}[/] {text}", highlight=False, soft_wrap=True)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def run_proc(self) -> subprocess.Popen:
        """`rftbus run`, once started."""
        assert self.proc is not None, "rftbus run is started first"
        return self.proc

    def version(self) -> int:
        from rftbus.ground.status import read_statuses

        return max((int(s.get("version") or 0) for s in read_statuses(self.cfg.state_dir, "trainer")), default=0)

    # ---- phases ------------------------------------------------------------------------------
    def run(self) -> ChaosResult:
        try:
            try:
                self._setup()
                self._start_run()
                self._warm_up()
                self._faults()
                self._drain()
            except RftbusError as e:  # the run died or never warmed up: still stop it and tally what is there
                self.res.failures.append(str(e))
                self.say(f"[red]error:[/] {e}")
            finally:  # Ctrl-C too: never leave the run's processes behind
                self._stop_run()
            if self.run_owns_broker and self.proc is not None:  # the run stopped its cluster: up again to read
                from rftbus.ground.broker import embedded

                embedded.start(self.broker_cfg)
            if self.proc is not None and self._broker_up():
                with self.console.status("settling ...") as status:
                    settle(self.cfg, self.res, self.workdir, getattr(self, "weights_poisoned_at", None),
                           lambda m: status.update(m))
        finally:
            self._committed.close()
            if self.owns_broker:
                from rftbus.ground.broker import embedded

                embedded.stop(self.broker_cfg)
            self.res.wall_s = self.now()
        return self.res

    def _setup(self) -> None:
        from rftbus.ground.broker import embedded

        if self.owns_broker:
            self.say(f"starting the chaos run's own Kafka broker on port {self.cfg.broker.port} ...")
            embedded.start(self.broker_cfg, self.console)
        create_topics(self.cfg, check_reachable(self.cfg))
        self.catalogue = catalogue(self.cfg, latest_version=0, seed=self.plan.seed)
        # At the head of every partition: a consumer may work on one partition for a long while first.
        head = [replace(p, at_partition=i) for p in self.catalogue if p.topic_key in PRE_RUN_POISON
                for i in range(self.cfg.topics.all()[p.topic_key].partitions)]
        self._poison(head, "before the run (at the head of every partition)")
        if self.run_owns_broker:
            embedded.stop(self.broker_cfg)
            self.say("cluster stopped: `rftbus run` starts it again and supervises its nodes")

    def _start_run(self) -> None:
        path = write_config(self.cfg, self.workdir / "chaos-config.yaml")
        log = open(self.workdir / "run.log", "ab")
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("RFTBUS_")}, "PYTHONUNBUFFERED": "1",
               "COLUMNS": "160"}
        self.proc = subprocess.Popen([sys.executable, "-m", "rftbus", "--config", str(path), "run",
                                      "--summary-json", str(self.workdir / "summary.json")],
                                     stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                     start_new_session=True)
        log.close()
        self.say(f"rftbus run started (pid {self.run_proc.pid}); its log: {self.workdir / 'run.log'}")

    def _warm_up(self) -> None:
        deadline = time.monotonic() + 600
        with self.console.status("warming up: waiting for every process and the first trainer steps ..."):
            while time.monotonic() < deadline:
                if not self.running():
                    raise RftbusError(f"rftbus run exited ({self.run_proc.returncode}) during warm-up; see {self.workdir / 'run.log'}")
                kids = F.children(self.run_proc.pid)
                ready = all(any(F.is_ready(k, F.status_of(self.cfg.state_dir, k, p.pid)) for p in kids[k])
                            for k in ("explorer", "streams", "trainer"))
                if ready and F.trainer_step(self.cfg.state_dir) >= self.plan.warmup_steps:
                    break
                time.sleep(1)
            else:
                raise RftbusError("the run did not warm up within 10 minutes")
        kinds = [k for k, ps in F.children(self.run_proc.pid).items() if ps]
        self.say(f"warm: trainer at step {F.trainer_step(self.cfg.state_dir)}; processes: {', '.join(kinds)}")
        for k in F.KINDS:
            if k not in kinds:
                self.res.skipped.append(f"kill:{k}: no {k} process in this run (module not installed or not enabled)")
                self.say(f"[yellow]note:[/] no {k} process in this run; its kill is skipped")

    def _schedule(self) -> list[tuple[str, str]]:
        """Round 1 kills one kind at a time, later rounds every kind at once; poison, burst and the broker
        restart come between. With a single round the poison comes first, so the restarted processes
        also meet the poisoned topics (the weights topic above all) when they start."""
        extras = [("poison", ""), ("burst", ""), ("live_join", "")]
        broker = [("broker", "")] * self.plan.broker_restarts + FO.interleave(self.plan)
        one_by_one = [("kill", k) for k in F.KINDS]
        if self.plan.kill_rounds <= 1:
            return extras + one_by_one * self.plan.kill_rounds + broker
        return one_by_one + extras + broker + [("kill_all", "")] * (self.plan.kill_rounds - 1)

    def _faults(self) -> None:
        self.faults_t0 = time.monotonic()
        self.steps = FO.StepWatch(self.cfg.state_dir).start()
        self.nodes = FO.NodeFaults(self.broker_cfg, self.steps, self.plan.recover_timeout_s, self.running,
                                   self.plan.rolling_restarts)
        try:
            self._each_fault()
        finally:
            self.steps.stop()
        if self.plan.nodes > 1:
            self.res.failover = FO.freeze_vs_kill(self.res.faults)
            ratio = self.res.failover["ratio"]
            if ratio is not None and ratio > 1.5:
                self.res.failures.append(f"a frozen node stalled the trainer {ratio}x as long as a killed one "
                                         f"({self.res.failover})")

    def _each_fault(self) -> None:
        for what, arg in self._schedule():
            if not self.running():
                raise RftbusError(f"rftbus run exited ({self.run_proc.returncode}) during the faults; see {self.workdir / 'run.log'}")
            if time.monotonic() - self.faults_t0 > self.plan.max_minutes * 60:
                self.res.skipped.append(f"{what} {arg}: past the {self.plan.max_minutes:g}-minute fault budget")
                continue
            {"kill": lambda k: self._kill([k]), "kill_all": lambda _: self._kill(list(F.KINDS)),
             "poison": lambda _: self._poison_mid_run(), "burst": lambda _: self._burst(),
             "broker": lambda _: self._broker(), "live_join": lambda _: self._live_join(),
             **{k: self._cluster for k in FO.NODE_FAULTS}}[what](arg or what)
            time.sleep(self.plan.settle_s)

    def _record(self, fault: F.Fault, ok: bool, started: float, note: str | None = None) -> None:
        fault.ok, fault.recovered_s = ok, time.monotonic() - started
        if note:
            fault.notes.append(note)
        self.res.faults.append(fault)
        mark = "[green]recovered[/]" if ok else "[red]NOT RECOVERED[/]"
        self.say(f"{fault.kind}: {fault.detail} -> {mark} in {fault.recovered_s:.1f} s" + (f" ({note})" if note else ""))
        if not ok:
            fault.notes.append(F.diagnosis(self.cfg))
            self.res.failures.append(f"{fault.kind} ({fault.detail}) did not recover: {note or ''}")
            self.say(f"  state when it gave up: {fault.notes[-1]}")

    def _kill(self, kinds: list[str]) -> None:
        """kill -9 one process of each kind (together), wait for each replacement and for its work."""
        kids = F.children(self.run_proc.pid)
        victims = {k: kids[k][0] for k in kinds if kids[k]}
        if not victims:
            return
        step = F.trainer_step(self.cfg.state_dir)
        together = " (all kinds at once)" if len(victims) > 1 else ""
        started = time.monotonic()
        label = ", ".join(f"{k} {p.pid}" for k, p in victims.items())
        with self.console.status(f"kill -9 {label}; waiting for the supervisor to restart ..."):
            for p in victims.values():
                F.kill9(p)
            for kind, victim in victims.items():
                fault = F.Fault(f"kill:{kind}", f"kill -9 {kind} pid {victim.pid}{together} at trainer step {step}",
                                self.now())
                left = max(1.0, self.plan.recover_timeout_s - (time.monotonic() - started))
                new = F.wait_back(self.run_proc.pid, self.cfg.state_dir, kind, {victim.pid}, left, self.running)
                if new is None:
                    self._record(fault, False, started, "no ready replacement process")
                    continue
                ok, note = self._progress(kind, new, step, started)
                self._record(fault, ok, started, f"new pid {new}; {note}")

    def _progress(self, kind: str, pid: int, step: int, started: float) -> tuple[bool, str]:
        """The restarted kind does its work again (and the trainer keeps stepping)."""
        left = lambda: max(1.0, self.plan.recover_timeout_s - (time.monotonic() - started))  # noqa: E731
        if kind == "serve":
            rep = live_traffic(self.cfg, 2, timeout_s=min(60.0, left()))
            self.res.load.append(rep)
            return rep.live_ok > 0, f"{rep.live_ok}/2 live completions answered after the restart"
        if kind in ("explorer", "streams"):
            deadline = time.monotonic() + left()
            while time.monotonic() < deadline and self.running():
                if self._working(kind, pid):
                    break
                time.sleep(0.5)
            else:
                return False, f"the new {kind} did no work"
        ok = F.wait_trainer_step(self.cfg.state_dir, step, left(), self.running)
        return ok, (f"trainer stepped past {step}" if ok else f"trainer stuck at step {F.trainer_step(self.cfg.state_dir)}")

    def _working(self, kind: str, pid: int) -> bool:
        """The explorer produced a group; streams processed (or replayed) a record or has nothing to do."""
        st = F.status_of(self.cfg.state_dir, kind, pid) or {}
        if kind == "explorer":
            return int(st.get("groups_produced") or 0) > 0
        if int(st.get("raw_in") or 0) + int(st.get("replays_skipped") or 0) > 0:
            return True
        if not st or st.get("state") == "starting":  # up, but not yet in the group: lag 0 says nothing
            return False
        try:
            if self._admin is None:
                self._admin = make_admin(self.cfg)
            return lag(self._admin, self._committed, self.cfg.streams.app_id, [self.cfg.topics.raw.name]) == 0
        except KafkaException:
            return False

    def _poison(self, poisons: list[Poison], when: str) -> None:
        landed = inject(self.cfg, poisons)
        self.res.poisons += landed
        for p in landed:
            self.res.faults.append(F.Fault(f"poison:{p.topic_key}", p.label, self.now(), ok=p.offset is not None))
        topics = sorted({p.topic_key for p in landed})
        self.say(f"poison: {len(landed)} records into {', '.join(topics)} {when}")

    def _poison_mid_run(self) -> None:
        version = self.version()
        self.weights_poisoned_at = version
        fresh = catalogue(self.cfg, latest_version=version, seed=self.plan.seed + 1)
        self._poison([p for p in fresh if p.topic_key not in PRE_RUN_POISON], f"(latest version v{version})")

    def _burst(self) -> None:
        version, step = self.version(), F.trainer_step(self.cfg.state_dir)
        fault = F.Fault("burst", f"{self.plan.burst_groups} groups straight onto raw at v{version}", self.now())
        started = time.monotonic()
        with self.console.status("load burst ..."):
            rep = burst(self.cfg, self.plan.burst_groups, version, seed=self.plan.seed)
            self.res.load.append(rep)
            note = f"{rep.experiences} experiences acknowledged in {rep.seconds:.1f} s"
            if F.children(self.run_proc.pid)["serve"] and self.plan.live_requests:
                live = live_traffic(self.cfg, self.plan.live_requests)
                self.res.load.append(live)
                note += f"; live: {live.live_ok} answered, {live.live_failed} failed, {live.feedback_ok} graded"
            ok = F.wait_trainer_step(self.cfg.state_dir, step, self.plan.recover_timeout_s, self.running)
        self._record(fault, ok, started, note)

    def _live_join(self) -> None:
        """kill -9 serve and a streams worker while live answers wait for feedback; grade them after."""
        kids = F.children(self.run_proc.pid)
        if not (kids["serve"] and kids["streams"] and self.plan.live_requests):
            return
        victims = {k: kids[k][0] for k in ("serve", "streams")}
        waiting = LJ.answer(self.cfg, self.plan.live_requests)
        fault = F.Fault("live_join", f"kill -9 serve {victims['serve'].pid} and streams {victims['streams'].pid} "
                        f"while {len(waiting)} live answers wait for feedback; grade them after", self.now())
        started = time.monotonic()
        with self.console.status("live join across kill -9 ..."):
            for p in victims.values():
                F.kill9(p)
            back = {k: F.wait_back(self.run_proc.pid, self.cfg.state_dir, k, {v.pid}, self.plan.recover_timeout_s,
                                   self.running) for k, v in victims.items()}
            if None in back.values():
                self._record(fault, False, started, f"not back: {[k for k, v in back.items() if v is None]}")
                return
            gone = {victims["streams"].pid}
            before = LJ.joined(self.cfg.state_dir, gone)
            graded = LJ.grade(self.cfg, waiting, self.plan.recover_timeout_s, self.running)
            n = LJ.wait_joined(self.cfg.state_dir, gone, before + graded, self.plan.recover_timeout_s, self.running)
        ok = graded == len(waiting) and n >= before + graded
        note = f"{graded}/{len(waiting)} graded after the restart, {n - before} joined by the new worker"
        if not ok:
            note += f" (its feedback counts: {LJ.why(self.cfg.state_dir, gone) or 'none'})"
        self._record(fault, ok, started, note)

    def _broker(self) -> None:
        step = F.trainer_step(self.cfg.state_dir)
        fault = F.Fault("broker_restart", f"kill -9 the Kafka broker at trainer step {step}, restart on the same data",
                        self.now())
        started = time.monotonic()
        with self.console.status("broker down ..."):
            old = F.kill_broker(self.broker_cfg)
            time.sleep(5)  # long enough for every client to notice
            new = F.start_broker(self.broker_cfg)
            ok = F.wait_trainer_step(self.cfg.state_dir, step, self.plan.recover_timeout_s, self.running)
        self._record(fault, ok, started, f"broker pid {old} -> {new}; " +
                     ("trainer stepping again" if ok else "trainer did not step again"))

    def _cluster(self, what: str) -> None:
        """A node of the cluster killed or frozen, or every node restarted in turn."""
        started, at = time.monotonic(), self.now()
        with self.console.status(f"{what.replace('_', ' ')} ..."):
            fault, ok = self.nodes.run(what, self.plan.freeze_s)
        fault.at_s = at
        self._record(fault, ok, started, ", ".join(f"{k} {v}" for k, v in fault.metrics.items()))

    def _drain(self) -> None:
        with self.console.status("draining ...") as status:
            self.res.drain = drain(self.cfg, self.run_proc.pid, self.plan.drain_timeout_s,
                                   tick=lambda s: status.update(f"draining: {s}"))
        d = self.res.drain
        self.say(f"drain: {'complete' if d.complete else '[red]INCOMPLETE[/]'} in {d.seconds:.0f} s"
                 + (f" ({'; '.join(d.notes)})" if d.notes else ""))
        if not d.complete:
            self.res.failures.append("the drain did not finish: " + "; ".join(d.notes))

    def _stop_run(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with self.console.status("stopping rftbus run (clean stop, final eval and summary) ..."):
                os.kill(self.run_proc.pid, signal.SIGINT)
                try:
                    self.proc.wait(420)
                except subprocess.TimeoutExpired:
                    self.res.failures.append("rftbus run did not stop within 7 minutes of SIGINT; killed")
                    for p in F.children(self.run_proc.pid).values():
                        for c in p:
                            F.kill9(c)
                    self.proc.kill()
                    self.proc.wait(30)
        self.res.run_exit = self.run_proc.returncode
        summary = self.workdir / "summary.json"
        if summary.exists():
            self.res.run_summary = json.loads(summary.read_text())
        self.say(f"rftbus run exited with {self.run_proc.returncode}; restarts: {self.res.run_summary.get('restarts')}")
        if self.run_proc.returncode != 0:
            self.res.failures.append(f"rftbus run exited with {self.run_proc.returncode} (see {self.workdir / 'run.log'})")

    def _broker_up(self) -> bool:
        from rftbus.ground.kafka.clients import BrokerUnreachable

        try:
            check_reachable(self.cfg, timeout=10)
            return True
        except BrokerUnreachable as e:
            self.res.failures.append(f"the broker is unreachable after the run, nothing to reconcile: {e}")
            return False
