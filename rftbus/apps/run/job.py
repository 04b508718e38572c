"""The main job: broker, topics, taskset, then explorer(s), streams, trainer (and the analytics sink)
as supervised processes, a live view, held-out eval, and a reconciled summary at the end.

Children are the same `rftbus` commands a user can run by hand, sharing one resolved config file,
so what `rftbus run` does is reproducible piece by piece.
"""

from __future__ import annotations

import json
import signal
import time
from functools import partial
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from rich.console import Console
from rich.live import Live

from rftbus.ground.broker import embedded
from rftbus.ground.config import Config, write_config
from rftbus.ground.errors import RftbusError
from rftbus.ground.kafka.clients import BrokerUnreachable, check_reachable
from rftbus.ground.kafka.committed import CommittedOffsets
from rftbus.ground.kafka.topics import create_topics
from rftbus.apps.run.broker_watch import BrokerWatch
from rftbus.apps.run.children import child_specs
from rftbus.apps.run.cores import split as split_cores
from rftbus.apps.run.display import progress_line, render
from rftbus.apps.run.lag_view import LagView
from rftbus.apps.run.ticker import Ticker
from rftbus.apps.run.feed import TaskFeed
from rftbus.apps.run.passes import KINDS
from rftbus.apps.run.live import live_summary
from rftbus.apps.run.synthesis_summary import synthesis_summary
from rftbus.apps.run.pace import Pace, pace_summary, read_best
from rftbus.apps.run.plots import plot_eval, plot_steps
from rftbus.apps.run.profile_table import collect as collect_profile, table as profile_table
from rftbus.apps.run.supervisor import ChildSpec, Supervisor
from rftbus.apps.run.tracking import start_tracking
from rftbus.ground.status import mark_run, read_statuses, trainer_step

STOP_ORDER = ["simulate", "serve", "studio", "otelcol", "synthesize", "explorer", "streams", "trainer", "gate", "analytics"]  # producers first: the rest drain


def child_state(c) -> str:
    """For the live view: running, or what went wrong with it and why (its last crash's cause)."""
    if c.gave_up:
        return f"gave up after {c.restarts} restarts: {c.cause}"
    state = "restarting" if c.restart_at else "running"
    return f"{state} (restarts {c.restarts}, last crash: {c.cause})" if c.causes else state


class MainJob:
    def __init__(self, cfg: Config, console: Console, err: Console):
        from rftbus.apps.run import secure

        self.given = cfg  # as the user gave it: what the children's shared config file is made from
        secured, self.bus_line = secure.plan(cfg)
        cfg = secured or cfg  # the run itself is the broker's admin user when it secures its broker
        self.secured = secured is not None
        self.cfg, self.console, self.err = cfg, console, err
        self.run_dir = cfg.state_dir / "run"
        self.started = time.time()
        self.started_broker = False
        self.events: list[str] = []
        self.committed = CommittedOffsets(cfg)  # the task feed's backlogs (kept: read every second)
        self.lags: dict[str, int] = {}  # the last ones read (the live view and /metrics)
        self.eval_points: list[dict] = []  # the evaluator's, once it is loaded (/metrics)
        self.candidate_evals: list[dict] = []  # the gate's candidates scored by the evaluator (gate.eval_candidates)
        # each streams worker's status as last seen, per process: its feedback join latency window lives in memory,
        # so a worker restarted (kill -9) near the end would otherwise leave the summary without one
        self.streams_seen: dict[tuple, dict] = {}
        further = [cfg.lineage_trainer(i) for i in range(len(cfg.run.trainers))]
        self.lag_groups = {cfg.streams.app_id: "streams", cfg.trainer.group_id: "trainer",  # group -> live view's name
                           cfg.explorer.group_id: "explorers", **{t.group_id: f"trainer-{t.lineage}" for t in further}}
        self._stop_requested = False
        self.exit_codes: dict[str, int | None] = {}
        self.broker: BrokerWatch | None = None  # the embedded broker this job started
        self.broker_ready: float | None = None  # when the broker first answered (epoch s)
        self.pace = Pace(since=self.started)  # the trainer's steps over time, for the summary
        self.feed = TaskFeed(cfg, self.committed, self._log, self.events.append, self.started)

    # ---- setup -------------------------------------------------------------------------------
    def ensure_broker(self) -> None:
        try:
            check_reachable(self.cfg, timeout=3.0, wait=False)
            self.console.print(f"using Kafka at {self.cfg.bootstrap_servers}")
        except BrokerUnreachable:
            if self.cfg.kafka.bootstrap_servers:
                raise
            with self.err.status(f"starting the embedded Kafka {self.cfg.broker.kafka_version} ..."):
                info = embedded.start(self.cfg, self.err)
            self.started_broker = info.started
            if info.started:  # ours: supervised like a child (one that was already running is someone else's)
                self.broker = BrokerWatch(self.cfg, info.pid)
            self.console.print(f"embedded Kafka broker running (pid {info.pid}) at {info.bootstrap}")

    def bring_up_bus(self):
        """The broker (started when none answers), the declared topics and the first tasks: in a thread of its
        own while the children and this process load their models. Returns the admin client."""
        self.ensure_broker()
        admin = check_reachable(self.cfg, wait=False)
        if self.secured:  # before the topics and the first records: every rule is in place when they are
            from rftbus.ground.kafka import acls

            acls.apply(self.cfg, acls.acls(self.cfg))
        self.broker_ready = time.time()
        self.console.print(f"broker answered {self.broker_ready - self.started:.1f} s after start; "
                           "creating topics, publishing tasks")
        create_topics(self.cfg, admin)
        self.feed.publish(admin)
        return admin

    def write_child_config(self) -> Path:
        """The children's config: this one, plus `kafka.wait_s` long enough for the broker to start, since
        they are started beside it (#19: each imports torch and builds its model while the JVM boots)."""
        mark_run(self.cfg.state_dir, self.started)
        wait = max(self.cfg.kafka.wait_s, self.cfg.broker.start_timeout_s + 30)
        update: dict = {"kafka": self.cfg.kafka.model_copy(update={"wait_s": wait})}
        if self.cfg.run.max_steps:  # the trainer holds there: no step is in flight when the run stops at it
            update["trainer"] = self.cfg.trainer.model_copy(update={"hold_at_step": self.cfg.run.max_steps})
        child = self.cfg.model_copy(update=update)
        if self.secured:
            from rftbus.apps.run.secure import for_children

            child = for_children(child, self.given)
        return write_config(child, self.run_dir / "config.yaml")

    def child_specs(self, config_path: Path) -> list[ChildSpec]:
        specs = child_specs(self.cfg, config_path)
        if self.secured:  # each child is its role's user (in its environment, not in the shared file)
            from rftbus.apps.run.secure import child_env

            for spec in specs:
                spec.env = {**spec.env, **child_env(spec.name, self.cfg)}
        return specs

    # ---- the loop ----------------------------------------------------------------------------
    def _done(self, statuses: list[dict], evals: list[dict]) -> str | None:
        r = self.cfg.run
        if time.time() - self.started > r.max_minutes * 60:
            return f"time budget of {r.max_minutes:g} min reached"
        step = trainer_step(statuses)
        if r.max_steps and step >= r.max_steps:
            return f"trainer reached step {step}"
        if r.target_eval_reward is not None and len(evals) > 1 and evals[-1]["reward"] >= r.target_eval_reward:
            return f"eval reward {evals[-1]['reward']:.3f} reached the target {r.target_eval_reward}"
        return None

    def _note(self, events) -> None:
        """Supervisor events go to the live view and to <run_dir>/events.log, so every crash and
        restart stays on record after the view has scrolled past it."""
        self._log([f"{e.child}: {e.kind} {e.detail}" for e in events])

    def _log(self, lines: list[str]) -> None:
        self.events += lines
        if lines:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            with open(self.run_dir / "events.log", "a") as f:
                f.writelines(f"{time.strftime('%H:%M:%S')} {line}\n" for line in lines)

    def _on_signal(self, signum, frame) -> None:
        self._stop_requested = True

    def run(self) -> dict:
        # Handlers first: a Ctrl-C during start-up (broker, tasks, the v0 eval) is honoured once that
        # phase ends, with the same clean stop, instead of a KeyboardInterrupt out of a library call.
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            return self._run()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            self.committed.close()
            if self.started_broker:  # on success and on any error: leave nothing running
                if self.broker is not None:
                    self.broker.wait()
                embedded.stop(self.cfg)
                self.console.print("embedded Kafka broker stopped")

    def _run(self) -> dict:
        # Everything at once (#19: start learning at once): the broker starts in a thread while the children
        # import torch and DeepSpeed and build their models (each waits for the broker: kafka.wait_s) and
        # another thread loads the evaluator's. This thread only watches, so a Ctrl-C during start-up stops
        # the children at once instead of after the slowest load.
        self.console.print(self.bus_line)
        t = split_cores(self.cfg)
        self.console.print(f"threads on {t.cores} cores: trainer {t.trainer}, {self.cfg.run.explorers} explorer(s) "
                           f"{t.explorer} each" + (" (auto: trainer.threads / explorer.threads)" if t.auto else ""))
        sup = Supervisor(self.child_specs(self.write_child_config()))
        stop_metrics = self.start_metrics(sup)
        reason = "stopped by the user"
        evaluator = None
        stop_tracking: Callable[[], None] | None = None
        pool = ThreadPoolExecutor(2, thread_name_prefix="start")
        try:
            bus = pool.submit(self.bring_up_bus)
            if not self._stop_requested:
                self._note(sup.start())
            loading = pool.submit(self._load_evaluator)
            while not self._stop_requested and not (bus.done() and (loading.done() or bus.exception())):
                time.sleep(0.1)
            if not self._stop_requested:
                admin, evaluator = bus.result(), loading.result()
                self.eval_points = evaluator.points
                self.candidate_evals = evaluator.candidate_points
                stop_tracking = start_tracking(self.cfg, lambda m: self.events.append(m))
                # beside training, not in front of it (#19): v0 is scored in the evaluator's thread
                self.console.print("evaluating the initial weights (v0) on the held-out split beside training ...")
                evaluator.start()
                reason = self._watch(sup, admin, evaluator) or reason
            self.console.print(f"stopping: {reason}")
            order = [n for kind in STOP_ORDER for n in sup.children if n.startswith(kind)]
            # the analytics sink last, after the final eval: that point goes to rft.metrics too, and the sink
            # drains to the end on its way out, so analytics holds everything Kafka does
            sink = {n for n in order if n.startswith("analytics")}
            codes = sup.stop(order=order, timeout=60, leave=sink)
            if evaluator is not None:
                evaluator.finish()
            if stop_tracking is not None:
                stop_tracking()  # after the final eval point: the trackers get it
                stop_tracking = None
            codes.update(sup.stop(order=sorted(sink), timeout=60))
            self.exit_codes = codes
            self.console.print("children stopped: " + ", ".join(f"{n}={c}" for n, c in codes.items()))
        finally:
            sup.stop(timeout=10)  # no-op when already stopped; a safety net on errors
            if stop_tracking is not None:
                stop_tracking()
            if stop_metrics is not None:
                stop_metrics()
            pool.shutdown(wait=True)  # a broker still starting is up (and stopped by run()) or failed
        if self._stop_requested and evaluator is None:
            bus.result()  # an error of the start-up itself is still the run's error, not a silent stop
        return self.summarize(evaluator.points if evaluator is not None else [], reason, sup)

    def start_metrics(self, sup: Supervisor):
        """Prometheus /metrics of the run's children (rftbus/apps/run/metrics.py); its stop, or None when off."""
        r = self.cfg.run
        if r.metrics_port is None:
            return None
        from rftbus.apps.run.metrics import StatusCollector, serve_metrics

        collector = StatusCollector(self.cfg.state_dir, lambda: dict(self.lags),
                                    lambda: {n: c.restarts for n, c in sup.children.items()},
                                    lambda: self.eval_points[-1] if self.eval_points else None)
        started = serve_metrics(r.metrics_host, r.metrics_port, collector)
        if started is None:
            self.events.append(f"metrics: port {r.metrics_port} is taken; no /metrics for this run")
            return None
        stop, port = started
        self.console.print(f"metrics: http://{r.metrics_host}:{port}/metrics")
        return stop

    def _load_evaluator(self):
        from rftbus.apps.run.evaluator import Evaluator  # torch and transformers: seconds, beside the broker's start

        return Evaluator(self.cfg, self.started, report=lambda m: self.events.append(f"eval: {m}"),
                         log_path=self.run_dir / "eval.jsonl")

    def _feed_tick(self, admin, kind: str) -> None:
        self.feed.tick(admin, read_statuses(self.cfg.state_dir), kind)

    def _watch(self, sup: Supervisor, admin, evaluator) -> str | None:
        """The live view until the run is done (its reason), a stage is given up on, or a stop is asked (None)."""
        lag_view = LagView(self.cfg, admin, self.lag_groups, self.events.append).start()
        feeders = [Ticker(partial(self._feed_tick, admin, kind), 1.0, f"{kind} feed", self.events.append).start()
                   for kind in KINDS]
        headless = not self.console.is_terminal  # output to a file (nohup, Slurm, Kubernetes): lines, not frames
        view: Any = Live(console=self.console, refresh_per_second=2, transient=False) if not headless else nullcontext()
        last_line = time.monotonic()
        try:
            with view as live:
                while not self._stop_requested:
                    self._note(sup.poll())
                    if self.broker is not None:
                        self._log(self.broker.poll())
                    statuses = read_statuses(self.cfg.state_dir)
                    self.pace.see(time.time(), statuses)
                    self.streams_seen.update({(st.get("id"), st.get("pid")): st for st in statuses
                                              if st.get("role") == "streams"})
                    self.lags = lags = lag_view.lags
                    children = {n: child_state(c) for n, c in sup.children.items()}
                    if self.broker is not None:
                        children["broker"] = self.broker.state
                    frame = dict(started=self.started, statuses=statuses, lags=lags, evals=evaluator.points,
                                 events=self.events, children=children)
                    if not headless:
                        live.update(render(**frame))
                    elif time.monotonic() - last_line >= self.cfg.run.progress_every_s:
                        self.console.print(progress_line(**frame), soft_wrap=True, markup=False, highlight=False)
                        last_line = time.monotonic()
                    done = self._done(statuses, evaluator.points)
                    if done:
                        return done
                    dead = self._dead(sup)
                    if dead and (self.cfg.run.on_give_up == "stop" or len(dead) == len(children)):
                        reason = "gave up on " + "; ".join(f"{n} ({cause})" for n, cause in dead.items())
                        self.err.print(f"[red]stopping the run: {reason}[/]")
                        return reason
                    time.sleep(0.5)
        finally:
            for feeder in feeders:
                feeder.stop()
            lag_view.stop()
        return None

    def _dead(self, sup: Supervisor) -> dict[str, str]:
        """Stages given up on (children and the broker) -> the cause of their last crash."""
        dead = sup.gave_up()
        if self.broker is not None and self.broker.gave_up:
            dead["broker"] = self.broker.cause
        return dead

    # ---- the end -----------------------------------------------------------------------------
    def summarize(self, evals: list[dict], reason: str, sup: Supervisor) -> dict:
        """The summary, written even when the broker cannot be read any more (the reconciliation then
        fails and says why)."""
        from rftbus.apps.run.summary import Reconciliation, reconcile, shown

        dead = self._dead(sup)
        try:
            rec = reconcile(self.cfg, dead=list(dead))
            reconcile_error = None
        except (KafkaException, TimeoutError, RftbusError, OSError) as e:  # the summary is written regardless
            rec, reconcile_error = Reconciliation(dead=list(dead)), f"{type(e).__name__}: {e}"
            self.err.print(f"[red]could not reconcile the counts: {reconcile_error}[/]")
        versions = sorted({p["version"] for p in evals})
        plots = plot_eval(evals, self.run_dir, title=f"{self.cfg.taskset.name}: held-out eval reward")
        self.pace.see(time.time(), read_statuses(self.cfg.state_dir), last=True)
        pace = pace_summary(self.pace, evals, rec, self.started, self.broker_ready, time.time())
        plots += plot_steps(pace["steps_timeline"], self.run_dir, title=f"{self.cfg.taskset.name}: trainer steps")
        live, live_plots = live_summary(self.cfg, self.started, rec.rejected_by_reason, self.run_dir, evals,
                                        self.candidate_evals, list(self.streams_seen.values()), rec.trained_past_eta)
        plots += live_plots
        best = read_best(self.run_dir)
        prof = collect_profile(self.cfg.state_dir, self.started,
                               {str(k): v for k, v in self.broker.pids.items()} if self.broker is not None else None)
        self.console.print(profile_table(prof))
        summary = {
            "stop_reason": reason,
            "eval_reward_initial": evals[0]["reward"] if evals else None,
            "eval_reward_final": evals[-1]["reward"] if evals else None,
            "eval_points": evals,
            "trainer_steps": rec.trainer_steps,
            "versions_published": max(versions, default=0),
            "experiences_produced": rec.produced,
            "experiences_trained": rec.trained,
            "expert_experiences_trained": rec.expert_trained,
            "experiences_rejected": rec.rejected_by_reason,
            "tasks_rejected": rec.tasks_rejected_by_reason,
            "experiences_in_flight": rec.in_flight,
            "tasks_skipped_no_signal": sum(int(st.get("tasks_skipped_no_signal") or 0)
                                           for st in read_statuses(self.cfg.state_dir) if st.get("role") == "explorer"),
            "trainer_skipped_steps": sum(int(st.get("skipped_steps") or 0) for st in read_statuses(self.cfg.state_dir)
                                         if st.get("role") == "trainer"),
            "experiences_lost": rec.lost,
            "duplicated": rec.duplicated,
            "quarantined": rec.quarantined[:10],  # outcomes streams could not write: the inputs named by offset
            "lost_or_duplicated_examples": rec.examples[:10],
            "counts_reconcile": rec.ok and reconcile_error is None,
            "reconcile_error": reconcile_error,
            "stages_dead": dead,
            "max_staleness_trained": rec.max_staleness_trained,
            "trained_past_eta": rec.trained_past_eta, "trained_past_eta_p50": rec.trained_past_eta_p50,
            "rollouts_by_generation_time": rec.rollouts_by_generation_time,
            "explorer_versions_used": len(rec.explorer_versions),
            "explorer_newest_version": max(rec.explorer_versions, default=0),
            "max_staleness": self.cfg.rl.max_staleness,
            "restarts": {n: c.restarts for n, c in sup.children.items()}
                        | ({"broker": self.broker.restarts} if self.broker is not None else {}),
            "crashes": {n: c.causes for n, c in sup.children.items() if c.causes}
                       | ({"broker": self.broker.causes} if self.broker is not None and self.broker.causes else {}),
            "exit_codes": self.exit_codes,
            "curriculum": self.feed.curriculum.summary() if self.feed.curriculum else [],
            **pace,
            **live,
            **synthesis_summary(self.cfg),
            "eval_best": best and {**best, "path": shown(best["path"])},
            "wall_seconds": round(time.time() - self.started, 1),
            "profile": prof,
            "plots": [shown(p) for p in plots],
        }
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        return summary
