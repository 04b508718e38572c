"""The proxy's core, apart from HTTP: generate, record as Experiences, publish feedback.

Acknowledgement rules (what a 2xx means):
- completion, serve.record_ack=kafka (default): the answer is sent only after Kafka acknowledged
  every Experience of it; otherwise 503 and no answer. buffered: after the records are in the bounded
  buffer (503 when it is full); a delivery that later fails is reported and counted.
- feedback: 202 only after Kafka acknowledged the Feedback (and, for a correction, the expert record).
A timed-out record may still reach Kafka later; it was never claimed, and a retried feedback with
the same feedback_id is one feedback downstream (the join applies the first).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from rftbus.ground.config import Config
from rftbus.ground.kafka.clients import make_producer
from rftbus.ground.models.loading import load_tokenizer
from rftbus.ground.prompting import run_prompt_format
from rftbus.ground.models.tool_calls import parse as parse_tool_calls
from rftbus.ground.config.explorer import SamplingConfig
from rftbus.producers.engines import RolloutEngine, make_engine
from rftbus.producers.engines.base import Completion
from rftbus.ground.web.auth import TokenAuth
from rftbus.ground.errors import RftbusError
from rftbus.ground.web.errors import BadRequest, EngineFailed, Unavailable
from rftbus.ground.grades.request import FeedbackRequest
from rftbus.producers.experience import correction_group
from rftbus.producers.serve.generator import Generated, Generator, GenRequest, TokenListener
from rftbus.ground.models.prompt import default_task_id
from rftbus.producers.serve.protocol import cut_at_stop
from rftbus.producers.serve.recorder import BufferFull, DeliveryFailed, Recorder
from rftbus.producers.serve.records import LivePrompt, RecentPrompts, RecordIds, live_group
from rftbus.producers.serve.gated import GatedVersions, NotServing, SessionRetired
from rftbus.producers.serve.sessions import Sessions
from rftbus.ground.images import ImageRefusal, from_data_uri
from rftbus.ground.schemas import ExperienceGroup, Feedback, Image, make_codec, topic_context
from rftbus.ground.schemas.records import new_id
from rftbus.ground.status import StatusFile
from rftbus.ground.weights.follower import WeightFollower

log = logging.getLogger("rftbus.serve")
MIN_TEMPERATURE = 1e-3  # temperature 0 (greedy) is sampled at this; the value used is stamped in metadata


@dataclass
class Answer:
    group: ExperienceGroup
    texts: list[str]  # what the client sees (stop strings and parsed tool calls removed)
    completions: list[Completion]
    version: int
    tool_calls: list[list[dict]] = field(default_factory=list)  # per choice, OpenAI's shape (tools in play)

    def finish_reason(self, i: int) -> str | None:
        return "tool_calls" if self.tool_calls and self.tool_calls[i] else self.group.samples[i].finish_reason


def engine_config(cfg: Config) -> Config:
    """The config make_engine reads, with serve.engine (if set) in place of explorer.engine."""
    if cfg.serve.engine is None:
        return cfg
    return cfg.model_copy(update={"explorer": cfg.explorer.model_copy(update={"engine": cfg.serve.engine})})


class LiveService:
    def __init__(self, cfg: Config, engine: RolloutEngine | None = None, report: Callable[[str], None] = log.warning):
        s = cfg.serve
        self.cfg, self.report = cfg, report
        self.id = s.id or f"{socket.gethostname()}-{os.getpid()}"
        self.model_name = s.served_model or cfg.model.name
        self.auth = TokenAuth.from_config(s)
        self.tokenizer = load_tokenizer(cfg.model)
        self.prompt = run_prompt_format(self.tokenizer, cfg)
        self.engine = engine or make_engine(engine_config(cfg), self.tokenizer)
        if cfg.gate.enabled and cfg.trainer.lora is None:
            raise RftbusError("gate.enabled serves several versions at once, each a LoRA adapter: set trainer.lora")
        # behind the gate, versions are served by name as the gate decides, not swapped in as they are published
        syncs = getattr(self.engine, "supports_weight_sync", True) and not s.accept_lora_pushes and not cfg.gate.enabled
        follower = WeightFollower(cfg, report=report) if syncs else None
        self.generator = Generator(self.engine, self.tokenizer, follower, max_batch=s.max_batch,
                                   batch_wait_s=s.batch_wait_ms / 1000, report=report,
                                   stop_ids=self.prompt.stop_ids)
        self.gated = GatedVersions(cfg, self.generator.add_adapter, report, s.max_sessions,
                                   remove_adapter=self.generator.remove_adapter) \
            if cfg.gate.enabled else None
        codec = make_codec(cfg.schema_registry.url, cfg.schema_registry.client)
        self.encode_group, self.encode_fb = codec.serializer(ExperienceGroup), codec.serializer(Feedback)
        # librdkafka gives up when the request does (kafka mode), so a 503'd record is not delivered later;
        # buffered records wait as long as it takes (0 = no timeout): the byte budget bounds them.
        ack_ms = int(s.ack_timeout_s * 1000)
        rec_ms = ack_ms if s.record_ack == "kafka" else 0
        self.records = Recorder(make_producer(cfg, **{"message.timeout.ms": rec_ms}), s.buffer_max_bytes,
                                "records", report)
        self.feedback = Recorder(make_producer(cfg, **{"message.timeout.ms": ack_ms}), s.buffer_max_bytes,
                                 "feedback", report)
        self.recent = RecentPrompts(s.recent_experiences)
        self.sessions = Sessions(s.max_sessions, s.max_calls_per_session)
        self.status = StatusFile(cfg.state_dir, "serve", self.id, s.status_interval_s,
                                 refresh=self.gated.stats if self.gated is not None else None)
        self.counts: Counter[str] = Counter()

    @property
    def reads_images(self) -> bool:
        """A vision-language model on an engine that generates from pixels: image_url parts are accepted."""
        return self.prompt.vision is not None and self.engine.reads_images

    def image_of(self, url: str) -> Image:
        """A request's image_url part as an Image record, written to the store (a live record carries the reference,
        not the bytes); a refused image is the request's 400, naming why."""
        try:
            return from_data_uri(url, self.cfg, by_reference=True)
        except ImageRefusal as e:
            raise BadRequest(str(e), param="messages", code=e.reason) from None

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        self.records.start()
        self.feedback.start()
        self.generator.start(self.cfg.serve.weights_wait_s)
        if self.gated is not None:
            self.gated.start().ready.wait(self.cfg.serve.weights_wait_s)
        self.status.update(state="running", model=self.model_name, version=self.generator.version,
                           address=f"{self.cfg.serve.host}:{self.cfg.serve.port}")
        self.status.start()

    def stop(self) -> None:
        self.status.update(state="stopping")
        if self.gated is not None:
            self.gated.stop()
        self.generator.stop()
        # kafka mode: whatever is left belongs to requests already answered 503 (librdkafka expires it anyway).
        s = self.cfg.serve
        lost = self.records.close(s.ack_timeout_s + (5 if s.record_ack == "buffered" else 0))
        lost += self.feedback.close(s.ack_timeout_s)
        self.snapshot(state="stopped", lost_on_shutdown=lost)
        self.status.stop(state="stopped")

    def snapshot(self, **extra) -> dict:
        data = {**self.counts, **self.records.stats(), **self.feedback.stats(), "version": self.generator.version,
                "batches": self.generator.batches, **(self.gated.stats() if self.gated is not None else {}), **extra}
        self.status.update(**data)
        return data

    # -- completions --------------------------------------------------------------------------
    def sampling(self, temperature: float | None, top_p: float | None, top_k: int | None) -> SamplingConfig:
        base = self.cfg.explorer.sampling
        upd = {}
        if temperature is not None:
            upd["temperature"] = max(temperature, MIN_TEMPERATURE)
        if top_p is not None:
            upd["top_p"] = top_p
        if top_k is not None:
            upd["top_k"] = top_k
        return base.model_copy(update=upd)

    def max_new(self, asked: int | None, prompt_len: int, param: str) -> int:
        s = self.cfg.serve
        n = asked or s.default_max_tokens or self.cfg.explorer.sampling.max_new_tokens
        if n > s.max_tokens_limit:
            raise BadRequest(f"{param} {n} is over serve.max_tokens_limit {s.max_tokens_limit}", param=param)
        ctx = self.generator.max_context
        if ctx is not None and prompt_len + n > ctx:
            raise BadRequest(f"the prompt is {prompt_len} tokens and {param} is {n}: over the model's context of "
                             f"{ctx} tokens", param=param if prompt_len < ctx else "prompt",
                             code="context_length_exceeded")
        return n

    def check_shape(self, prompt_ids: list[int], n: int) -> None:
        if not prompt_ids:
            raise BadRequest("the prompt is empty", param="prompt")
        if n > self.cfg.serve.max_n:
            raise BadRequest(f"n {n} is over serve.max_n {self.cfg.serve.max_n}", param="n")

    async def complete(self, prompt: LivePrompt, n: int, sampling: SamplingConfig, max_new: int,
                       stops: list[str], metadata: dict[str, str], listener: TokenListener | None = None,
                       ids: RecordIds | None = None, session_id: str | None = None, tools: bool = False,
                       adapter: str | None = None, client: str = "") -> Answer:
        """Generate, record (acknowledged per serve.record_ack), answer. A `listener` hears tokens as they are
        sampled (a stream, its record ids named in advance by `ids`); the record is written only once every
        choice is complete."""
        self.check_shape(prompt.ids, n)
        route = None
        if adapter is None and self.gated is not None:
            try:
                route = self.gated.route(session_id, client)
            except NotServing as e:
                raise Unavailable(str(e), code="no_version_serves") from None
            except SessionRetired as e:
                raise BadRequest(str(e), param="session_id", code="session_version_retired", status=409) from None
            adapter = route.adapter
        pixels = self.prompt.vision.inputs(prompt.images) if prompt.images else None
        fut = self.generator.submit(GenRequest(prompt.ids, n, sampling, max_new, listener, adapter, pixels=pixels))
        try:
            gen: Generated = await asyncio.wrap_future(fut)
        except Exception as e:  # noqa: BLE001 - the engine's error (reported by the engine thread) is this answer
            self.counts["engine_errors"] += 1
            raise EngineFailed(f"the {self.engine.name} engine failed: {type(e).__name__}: {e}",
                               code="engine_error") from None
        comps, texts, calls = [], [], []
        for c in gen.completions:
            hit = cut_at_stop(self.tokenizer, c.response_ids, stops)
            if hit:
                k, text = hit
                kept = self.tokenizer.decode(c.response_ids[:k], skip_special_tokens=True)
                assert isinstance(kept, str)  # (transformers 5 types decode as str | list[str]; ids in, str out)
                c = Completion(c.response_ids[:k], c.logprobs[:k], "stop", kept, dict(c.metadata))
            else:
                text = c.text
            comps.append(c)
            if tools:
                content, found = parse_tool_calls(text)
                text = content or ""
                calls.append(found)
            texts.append(text)
        meta = {**metadata, "served_model": self.model_name if route is not None else adapter or self.model_name}
        if route is not None:  # the decision that let this version serve, and which arm the call was on
            meta.update(gate_decision=route.decision, gate_arm=route.arm, gate_lineage=route.lineage)
        if session_id is not None:
            meta.update(session_id=session_id, session_turn=str(self.sessions.next_turn(session_id, client)))
        if sampling.temperature != self.cfg.explorer.sampling.temperature:
            meta["temperature"] = repr(sampling.temperature)
        group = live_group(prompt, comps, gen.version, self.id, gen.generation_ms, meta, ids)
        if self.cfg.serve.record:  # (off: a plain model server; its calls train through the agents' traces)
            await self._record(group)
            self.counts["experiences_recorded"] += len(group.samples)
        for s in group.samples:
            self.recent.add(s.experience_id, prompt)
        if session_id is not None:
            self.sessions.recorded(session_id, int(meta["session_turn"]), group.experience_ids())
        self.counts["completions"] += 1
        self.snapshot()
        return Answer(group, texts, comps, gen.version, calls)

    async def _record(self, group: ExperienceGroup) -> None:
        topic = self.cfg.topics.raw.name
        try:
            futs = self.records.send_many([(topic, group.group_id, _bytes(self.encode_group(group, topic_context(topic))))])
        except BufferFull as e:
            self.counts["records_refused"] += 1
            raise Unavailable(f"cannot record the completion: {e}", code="record_buffer_full") from None
        if self.cfg.serve.record_ack == "buffered":
            for f in futs:
                f.add_done_callback(self._report_late_failure)
            return
        await self._acknowledged(futs, "the recorded completion")

    def _report_late_failure(self, fut) -> None:
        if fut.exception() is not None:
            self.report(f"a buffered completion record was lost: {fut.exception()}")

    async def _acknowledged(self, futs: list, what: str) -> None:
        t = self.cfg.serve.ack_timeout_s
        try:
            await asyncio.wait_for(asyncio.gather(*(asyncio.wrap_future(f) for f in futs)), t)
        except (asyncio.TimeoutError, DeliveryFailed) as e:
            self.counts["kafka_unavailable"] += 1
            why = str(e) or f"no acknowledgement within serve.ack_timeout_s={t:g}s"
            raise Unavailable(f"Kafka at {self.cfg.bootstrap_servers} did not acknowledge {what} ({why}); "
                              f"it was not accepted", code="kafka_unavailable") from None

    # -- pushed adapters (serve.accept_lora_pushes) ----------------------------------------------
    def served_names(self) -> list[str]:
        return [self.model_name, *(n for n in self.generator.adapters if n != self.model_name)]

    def adapter_for(self, model: str | None) -> str | None:
        """The adapter a request is served with: the one it names; the base model (a zero adapter) once any was
        pushed; None before (what the engine holds). Behind the gate: None, the gate's routing picks the version."""
        if not self.generator.adapters or self.gated is not None:
            return None
        return model if model in self.generator.adapters else self.model_name

    def load_adapter(self, name: str, path: str) -> int:
        """vLLM's runtime LoRA loading: the PEFT folder at `path` served as model `name`; its version is the
        name's `-v<N>` suffix (what a pushing rftbus sends), else one past the newest."""
        import torch

        from rftbus.ground.models.lora import Adapter, base_fingerprint, read_peft_folder
        from rftbus.ground.models.source import ModelError

        model = getattr(self.engine, "model", None)
        if model is None:
            raise BadRequest(f"the {self.engine.name} engine cannot load LoRA adapters", param="lora_path")
        if name == self.model_name:
            raise BadRequest(f"{name!r} is the base model's name", param="lora_name")
        try:
            adapter = read_peft_folder(path, base_fingerprint(model))
        except ModelError as e:
            raise BadRequest(str(e), param="lora_path") from None
        m = re.search(r"-v(\d+)$", name)
        version = int(m.group(1)) if m else max((v for _, v in self.generator.adapters.values()), default=0) + 1
        if not self.generator.adapters:  # the base model, as the adapter that changes nothing
            zero = Adapter(adapter.spec, adapter.base, {k: torch.zeros_like(v) for k, v in adapter.state.items()})
            self.generator.add_adapter(self.model_name, zero, 0)
        self.generator.add_adapter(name, adapter, version)
        self.counts["adapters_loaded"] += 1
        self.report(f"adapter {name} (v{version}) loaded from {path}")
        return version

    # -- feedback -----------------------------------------------------------------------------
    async def publish_feedback(self, req: FeedbackRequest) -> tuple[list[Feedback], ExperienceGroup | None]:
        """The Feedback records of one request, acknowledged together: one, or one per experience of an episode."""
        problem = req.check_rating(self.cfg.streams.rating_scale)
        if problem:
            raise BadRequest(problem, param="rating", code="out_of_range")
        s = self.cfg.serve
        if req.session_id is not None:
            fbs = req.episode(self.sessions.calls(req.session_id), self.cfg.streams.rating_scale, s.episode_credit,
                              s.episode_discount)
        else:
            fbs = [req.to_record()]
        expert = None
        if req.correction is not None:
            expert = self._correction(fbs[0], req)
        fb_topic, expert_topic = self.cfg.topics.feedback.name, self.cfg.topics.expert.name
        out: list[tuple[str, bytes | str | None, bytes]] = [
            (fb_topic, fb.experience_id, _bytes(self.encode_fb(fb, topic_context(fb_topic)))) for fb in fbs]
        if expert is not None:
            out.insert(0, (expert_topic, expert.group_id, _bytes(self.encode_group(expert, topic_context(expert_topic)))))
        await self._publish(out, "the feedback")
        self.counts["feedback_published"] += 1
        if req.session_id is not None:
            self.counts["episodes_graded"] += 1
        if expert is not None:
            self.counts["corrections_published"] += 1
        self.snapshot()
        return fbs, expert

    async def _publish(self, records: list[tuple[str, bytes | str | None, bytes]], what: str) -> None:
        """`records` (topic, key, value) through the feedback producer, all or none, acknowledged by Kafka before
        the request is answered (503 when its buffer is full or Kafka does not answer)."""
        try:
            futs = self.feedback.send_many(records)
        except BufferFull as e:
            raise Unavailable(f"cannot publish {what}: {e}", code="feedback_buffer_full") from None
        await self._acknowledged(futs, what)

    async def publish_traces(self, body: bytes, content_type: str) -> int:
        """An OTLP/HTTP export (POST /v1/traces) to topics.spans, one record per trace keyed by its hex id (as the
        Collector writes them), acknowledged before the answer. Returns the traces written; a body that is not an
        OTLP trace export is a 400 naming what was wrong."""
        from rftbus.ground.otel.otlp import OtlpError, by_trace, parse

        try:
            records = by_trace(parse(body, content_type))
        except OtlpError as e:
            raise BadRequest(str(e), param="body", code="not_otlp") from None
        if not records:
            return 0
        await self._publish([(self.cfg.topics.spans.name, t, v) for t, v in records], "the traces")
        self.counts["traces_published"] += len(records)
        return len(records)

    async def publish_trace_grade(self, req: FeedbackRequest) -> str:
        """A grade of a whole agent trace (`trace_id`): the span an agent would write on it, to topics.spans, where
        the traces stage joins it to every call of the trace (rftbus/ground/otel/grade.py). Returns the grade's id."""
        from rftbus.ground.otel.grade import grade_export

        problem = req.check_rating(self.cfg.streams.rating_scale)
        if problem:
            raise BadRequest(problem, param="rating", code="out_of_range")
        assert req.trace_id is not None
        grade_id = req.feedback_id or new_id()
        value = grade_export(req.trace_id, req.value(self.cfg.streams.rating_scale), grade_id,
                             self.cfg.otel.grade_attribute, req.annotator, service=self.id)
        await self._publish([(self.cfg.topics.spans.name, req.trace_id, value)], "the trace's grade")
        self.counts["trace_grades_published"] += 1
        self.snapshot()
        return grade_id

    def _correction(self, fb: Feedback, req: FeedbackRequest) -> ExperienceGroup:
        known = self.recent.get(fb.experience_id)
        if known is not None:
            return correction_group(fb, known.ids, known.text, known.task_id, self.prompt, self.id)
        if req.prompt:
            ids = self.prompt.task(req.prompt)
            return correction_group(fb, ids, req.prompt, default_task_id(ids), self.prompt, self.id)
        raise BadRequest(f"experience_id {fb.experience_id} was not recorded by this server recently: send `prompt` "
                         f"with the correction so it can become an expert experience", param="prompt")


def _bytes(data: bytes | None) -> bytes:
    assert data is not None  # (a record always encodes; only None is a tombstone)
    return data
