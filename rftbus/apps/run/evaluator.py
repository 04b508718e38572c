"""Held-out eval during the main job: v0 at start, every k-th published version, the last one at the end, and
(gate.enabled with gate.eval_candidates) each version the promotion gate puts on canary, of any trainer's lineage.

It runs in the main job's process, beside (not inside) the trainer, so eval never delays a training
step; v0 too is scored in its thread while the loop starts (it used to stand in front of everything).
It follows the weights topic exactly as an explorer does (sha256-verified checkpoints). Each point is also
published on the metrics topic (kind="eval"), so analytics and the studio's dashboard have it. The best-scoring
version's weights are kept in `<state_dir>/run/best.safetensors` (+ `best.json`): the store keeps only
the newest few versions, and a run's last eval is not always its best (`rftbus export OUT --best`).
It generates on `run.eval_device` (a GPU when there is one), with transformers' greedy `generate` or, under
`run.eval_engine: explorer`, on an engine of the explorers' kind (vLLM) built there. A candidate is scored on a
transformers model of its own (built at the first candidate), so the newest version's model is never disturbed; its
point goes on the metrics topic under its lineage's weights key, where the gate's eval rule reads it.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from pathlib import Path

import torch
from confluent_kafka import KafkaException

from rftbus.ground.config import Config
from rftbus.ground.errors import RftbusError
from rftbus.ground.kafka.clients import make_producer
from rftbus.ground.weights.decisions import DecisionFollower
from rftbus.ground.weights.follower import WeightFollower
from rftbus.ground.models.lineage import label, weights_key
from rftbus.ground.models.loading import load_policy, load_tokenizer
from rftbus.ground.models.devices import resolve
from rftbus.ground.models.lora import Adapter, load_version, stored, version_payload
from rftbus.ground.prompting import run_prompt_format
from rftbus.ground.rewards import make_rewards
from rftbus.ground.profile import phase
from rftbus.ground.tasksets.data import open_taskset
from rftbus.apps.run.pace import BEST_META, BEST_WEIGHTS
from rftbus.ground.schemas import TrainerMetric, make_codec, topic_context
from rftbus.trainer.evaluate import engine_greedy, evaluate
from rftbus.ground.weights import sha256_hex
from rftbus.ground.weights.store import state_bytes


def due(scored: int, newest: int, k: int) -> bool:
    """Score the newest version once it has crossed a multiple of k since the last one scored. It jumps to the
    newest published, so "a multiple of k" alone skipped every mark passed between two looks (v90 when
    v89 and then v91 were the newest: 20 versions between points where 10 were asked for)."""
    return newest // k > scored // k


class Evaluator:
    def __init__(self, cfg: Config, started: float, report=lambda msg: None, log_path: Path | None = None):
        """`log_path`: each eval point is also appended there as a JSON line as soon as it is scored,
        so a run can be followed (`tail -f`) and read back while it is still going."""
        self.cfg, self.started, self.report, self.log_path = cfg, started, report, log_path
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_path.write_text("")  # this run's points only
        self.tokenizer = load_tokenizer(cfg.model)
        self.prompt = run_prompt_format(self.tokenizer, cfg)
        self.device = resolve(cfg.run.eval_device)
        self.engine = None  # run.eval_engine: explorer
        self.model = None
        self.payload: tuple[dict, dict | None] | None = None  # the weights scored, for best.safetensors
        if cfg.run.eval_engine == "explorer":
            from rftbus.producers.engines import make_engine

            on = cfg.explorer.engine.model_copy(update={"device": cfg.run.eval_device})
            self.engine = make_engine(cfg.model_copy(update={"explorer": cfg.explorer.model_copy(
                update={"engine": on})}), self.tokenizer)
        else:
            self.model = load_policy(cfg.model, self.tokenizer, str(self.device)).to(self.device)
        self.taskset = open_taskset(cfg.taskset)
        self.scorer = make_rewards(cfg.explorer.rewards)  # the explorers' rewards score eval too
        self.points: list[dict] = []
        self.version, self.step = 0, 0
        self.published_at: float | None = None  # when the version being scored was published (the curve's x)
        self.best: dict | None = None  # the best point so far, with where its weights are kept
        self.follower = WeightFollower(cfg, report=report)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="evaluator", daemon=True)
        self.producer = make_producer(cfg)
        self.encode = make_codec(cfg.schema_registry.url, cfg.schema_registry.client).serializer(TrainerMetric)
        # the gate's candidates: (lineage, version, when asked) to score, each once
        self.candidates: queue.Queue[tuple[str, int, float]] = queue.Queue()
        self.candidate_points: list[dict] = []
        self._candidate_model = None
        self._lineages: dict[str, WeightFollower] = {}  # another trainer's versions (the first's: self.follower)
        self.decisions = DecisionFollower(cfg, self._on_decision, report) \
            if cfg.gate.enabled and cfg.gate.eval_candidates else None

    def _on_decision(self, d) -> None:
        if d.decision == "canary" and d.candidate is not None:
            self.candidates.put((d.lineage, d.candidate, time.monotonic()))

    def _score_candidate(self, lineage: str, version: int, asked: float) -> bool:
        """One candidate's eval point; False while its weights record is not read yet (retried for a minute)."""
        if not lineage:
            follower = self.follower  # it keeps every version record it read, not only the newest
        elif lineage not in self._lineages:
            follower = self._lineages[lineage] = WeightFollower(self.cfg, report=self.report, prefetch=False,
                                                                model=weights_key(self.cfg.model.name, lineage)).start()
        else:
            follower = self._lineages[lineage]
        try:
            payload = follower.load(version)
        except RftbusError as e:
            if time.monotonic() - asked > 60:
                self.report(f"eval of candidate {label(lineage, version)} given up: {e}")
                return True
            return False
        with self._lock, phase("eval"), torch.no_grad():
            if self._candidate_model is None:
                self._candidate_model = load_policy(self.cfg.model, self.tokenizer, str(self.device)).to(self.device)
            self._candidate_model = load_version(self._candidate_model, payload)
            res = self._evaluate(self._candidate_model)
        point = {"version": version, "lineage": lineage, "seconds": round(time.time() - self.started, 2),
                 "reward": res["mean_reward"], "candidate": 1}
        self.candidate_points.append(point)
        self._publish(point, weights_key(self.cfg.model.name, lineage))
        self.report(f"eval of candidate {label(lineage, version)}: {point['reward']:.3f}")
        return True

    def _candidates(self) -> None:
        """Score the candidates waiting (a version already scored is not scored again)."""
        done = {(p["lineage"], p["version"]) for p in self.candidate_points} \
            | {("", p["version"]) for p in self.points}
        later = []
        while not self._stop.is_set():
            try:
                lineage, version, asked = self.candidates.get_nowait()
            except queue.Empty:
                break
            if (lineage, version) in done:
                continue
            done.add((lineage, version))  # a decision read twice (a restarted gate wrote it again): scored once
            try:
                if not self._score_candidate(lineage, version, asked):
                    later.append((lineage, version, asked))
                    done.discard((lineage, version))
            except Exception as e:  # noqa: BLE001 - user rewards run here; one bad point must not end the eval
                self.report(f"eval of candidate {label(lineage, version)} failed: {type(e).__name__}: {str(e)[:300]}")
        for item in later:
            self.candidates.put(item)

    def _evaluate(self, policy) -> dict:
        """One pass over the held-out split: the same tasks, budget and rewards for every point."""
        return evaluate(policy, self.prompt, self.taskset, self.cfg.run.eval_n,
                        max_new_tokens=self.cfg.trainer.eval_max_new_tokens or self.cfg.explorer.sampling.max_new_tokens,
                        scorer=self.scorer)

    def _score(self, version: int) -> dict:
        with self._lock, phase("eval"):
            res = self._evaluate(engine_greedy(self.engine) if self.engine is not None else self.model)
            now = round(time.time() - self.started, 2)
            point = {"version": version, "seconds": now,
                     "published_s": round(self.published_at - self.started, 2) if self.published_at else 0.0,
                     "reward": res["mean_reward"], **{k: v for k, v in res.items() if k != "mean_reward"}}
            self.points.append(point)
            if self.log_path is not None and (self.best is None or point["reward"] > self.best["reward"]):
                self._keep_best(point)
        if self.log_path is not None:
            with open(self.log_path, "a") as f:
                f.write(json.dumps(point) + "\n")
        self._publish(point)
        return point

    def _publish(self, point: dict, model: str | None = None) -> None:
        """The point on the metrics topic (best effort: eval.jsonl and the summary keep it either way)."""
        values = {k: float(v) for k, v in point.items() if isinstance(v, (int, float)) and k != "version"}
        rec = TrainerMetric(model=model or self.cfg.model.name, kind="eval", step=self.step, version=point["version"],
                            values=values)
        topic = self.cfg.topics.metrics.name
        try:
            self.producer.produce(topic, key=rec.model.encode(), value=self.encode(rec, topic_context(topic)))
            self.producer.poll(0)
        except (BufferError, KafkaException) as e:
            self.report(f"eval point v{point['version']} not published on {topic}: {e}")

    def _keep_best(self, point: dict) -> None:
        """Write the weights just scored as the run's best (atomically: a crash leaves the old best)."""
        assert self.log_path is not None
        folder = self.log_path.parent
        payload = self.payload or self._seed_payload()
        if payload is None:  # v0 on an engine that holds no torch model (vLLM): the seed is the base model
            self.best = {"version": point["version"], "reward": point["reward"], "seconds": point["seconds"],
                         "sha256": None, "path": None}
            (folder / BEST_META).write_text(json.dumps(self.best, indent=2) + "\n")
            return
        data = state_bytes(*payload)  # a LoRA run's best is its adapter
        tmp = folder / (BEST_WEIGHTS + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(folder / BEST_WEIGHTS)
        self.best = {"version": point["version"], "reward": point["reward"], "seconds": point["seconds"],
                     "sha256": sha256_hex(data), "path": str(folder / BEST_WEIGHTS)}
        (folder / BEST_META).write_text(json.dumps(self.best, indent=2) + "\n")

    def _seed_payload(self) -> tuple[dict, dict | None] | None:
        model = self.model if self.model is not None else getattr(self.engine, "model", None)
        return version_payload(model) if model is not None else None

    def _swap(self, newer_than: int) -> bool:
        ready = self.follower.take_ready(newer_than)
        if ready is None:
            return False
        record, state = ready
        with self._lock, torch.no_grad():
            try:
                if self.engine is not None:
                    self.engine.load_weights(state, record.version)
                    self.payload = stored(state.state, state.spec, state.base) if isinstance(state, Adapter) \
                        else (state, None)
                else:
                    self.model = load_version(self.model, state)
                    self.payload = None  # read from the model (a LoRA model: its adapter, as published)
            except (RuntimeError, ValueError, KeyError, RftbusError) as e:  # wrong shapes, an adapter of another base
                self.follower.refuse(record, f"does not fit the model: {e}")
                return False
            self.version, self.step = record.version, record.step
            self.published_at = record.created_at / 1000
        return True

    def start(self) -> Evaluator:
        if self.device.type == "cpu":
            torch.set_num_threads(1)  # the cores are shared with the explorers and the trainer
        self.follower.start()
        if self.decisions is not None:
            self.decisions.start()
        self._thread.start()
        return self

    def _run(self) -> None:
        if self.cfg.run.eval_nice:
            try:  # this thread only (Linux: a thread's niceness is its own)
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self.cfg.run.eval_nice)
            except OSError as e:
                self.report(f"eval: niceness {self.cfg.run.eval_nice} not set ({e})")
        self._try_score(0)  # the seed's weights, which v0 is (the trainer publishes exactly them)
        while not self._stop.wait(0.5):
            scored = self.points[-1]["version"] if self.points else -1
            if self._swap(self.version) and due(scored, self.version, self.cfg.run.eval_every_versions):
                self._try_score(self.version)
            self._candidates()

    def _try_score(self, version: int) -> None:
        """One eval point; a failure (a reward that raises on some answer) is reported and the next version is
        tried, instead of ending the evaluator's thread and every later point with it."""
        try:
            self._score(version)
        except Exception as e:  # noqa: BLE001 - user rewards run here; one bad point must not end the eval
            self.report(f"eval of v{version} failed: {type(e).__name__}: {str(e)[:300]}")

    def finish(self, wait_s: float = 10.0) -> None:
        """Stop following; evaluate the newest published version if it has not been scored yet."""
        self._stop.set()
        self._thread.join(timeout=60)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and not self._swap(self.version):
            if self.follower.latest_version() in (None, self.version):
                break
            time.sleep(0.2)
        self.follower.stop()
        if self.decisions is not None:
            self.decisions.stop()
            for w in self._lineages.values():
                w.stop()
        if not self.points or self.points[-1]["version"] != self.version:
            self._try_score(self.version)
        self.producer.flush(5)
