"""Proof by exhaustion (#57 item 5): the streams worker killed with SIGKILL at every event index in turn.

One scripted input (explorer groups, live groups, their feedback, a retried and a duplicate grade, a grade that comes
after its group was released, a poison group and a poison feedback) goes to fresh topics; the real worker
(`kill_worker.py`) dies at event i (a read, a table change, a send or a commit), the real `rftbus streams` is started
in its place and runs until every input topic is committed to its end; then the outputs (curated, curated.priority,
expert, rejected) are read back. For every i they must equal the run without a kill, record for record: key, value
bytes and headers (the raw record's timestamp header aside). So 0 lost, 0 duplicated and every rejection once.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaException

from rftbus.apps.bench.processes import WorkerProcess, read_all
from rftbus.apps.bench.synthetic import make_group
from rftbus.ground.config import Config, TopicsConfig, load_config, write_config
from rftbus.ground.kafka.clients import make_admin, make_producer
from rftbus.ground.kafka.committed import CommittedOffsets
from rftbus.ground.kafka.inspect import group_lag
from rftbus.ground.kafka.registry import JOIN, JOINED
from rftbus.ground.kafka.topics import create_topics
from rftbus.ground.schemas import Feedback, FeedbackKind, Rejection, Source, make_codec
from rftbus.streams.topology import OUTPUT_ROLES  # curated, curated_priority, expert, rejected

IGNORED_HEADERS = {"rftbus-t0"}  # the raw record's broker timestamp: new topics, new time
PARTITIONS = 2

Record = tuple[str, bytes, bytes]  # topic role, key, value
Out = tuple[str, bytes, bytes, tuple]  # role, key, value, headers


def script() -> list[Record]:
    """The input, in the order it is written: every kind of event the stages have, deterministic bytes."""
    codec = make_codec(None)
    # group priorities (mean |advantage|, no version lag): 1.0 and 0.87 -> both lanes of the 0.9 threshold; all 1.0
    # -> zero_variance
    explorer = [make_group(rewards=r, response_tokens=12, prompt_tokens=8, seed=s, group_id=f"ee-explorer-{s}")
                for s, r in ((1, [1.0, 0.0, 1.0, 0.0]), (2, [1.0, 0.0, 0.0, 0.0]), (3, [1.0, 1.0, 1.0, 1.0]))]
    live = [make_group(rewards=[None] * n, response_tokens=12, prompt_tokens=8, seed=10 + n, source=Source.live,
                       group_id=f"ee-live-{n}") for n in (2, 3)]
    for g in live:
        for k, e in enumerate(g.samples):
            e.experience_id = f"{g.group_id}-{k}"
    a, b = live
    # the first group's task again, in its partition (0), decided after it: its priority has the difficulty bonus
    # of the task's pass rate (0.5 -> +0.5: the priority lane), which a worker that forgot the rates at a restart
    # would not give it (0.87: the normal lane)
    again = make_group(rewards=[1.0, 0.0, 0.0, 0.0], response_tokens=12, prompt_tokens=8, seed=5,
                       task_id=explorer[0].task_id, group_id="ee-explorer-5")
    raw = [*explorer, a, b, again]
    grades = [Feedback(feedback_id="f1", experience_id=a.samples[0].experience_id, kind=FeedbackKind.reward, reward=1.0),
              Feedback(feedback_id="f2", experience_id=a.samples[1].experience_id, kind=FeedbackKind.reward, reward=0.0),
              Feedback(feedback_id="f3", experience_id=b.samples[0].experience_id, kind=FeedbackKind.reward, reward=1.0),
              Feedback(feedback_id="f3", experience_id=b.samples[0].experience_id, kind=FeedbackKind.reward, reward=1.0),
              Feedback(feedback_id="f4", experience_id=b.samples[0].experience_id, kind=FeedbackKind.reward, reward=0.0),
              Feedback(feedback_id="f5", experience_id=b.samples[1].experience_id, kind=FeedbackKind.thumbs,
                       thumbs_up=True),
              Feedback(feedback_id="f6", experience_id=b.samples[2].experience_id, kind=FeedbackKind.reward, reward=0.0),
              Feedback(feedback_id="f7", experience_id=a.samples[0].experience_id, kind=FeedbackKind.reward, reward=0.0)]
    out: list[Record] = [("raw", g.group_id.encode(), codec.encode(g, None)) for g in raw]  # (no registry)
    out.insert(3, ("raw", b"ee-poison", b"not a group at all"))
    out += [("feedback", f.experience_id.encode(), codec.encode(f, None)) for f in grades]
    out.append(("feedback", b"ee-poison", b"not a feedback"))
    return out


def case_config(base: Config, root: Path, tag: str) -> Config:
    """Fresh topics, consumer group and state folder for one case, on the base config's broker."""
    data = base.model_dump(mode="json", exclude={"serve"})
    data["state_dir"] = str(root / tag)
    for k in TopicsConfig.model_fields:
        data["topics"][k]["name"] = f"ee{tag}.{k}"
        if k in ("raw", "feedback", *OUTPUT_ROLES):
            data["topics"][k]["partitions"] = PARTITIONS
    data["streams"].update(app_id=f"ee{tag}", tick_interval_s=3600.0, feedback_ttl_s=3600.0, commit_interval_s=0.2,
                           version_wait_s=0.2, metrics_interval_s=3600.0, session_timeout_s=6.0)
    return load_config(overrides=data, environ={})


@dataclass
class Case:
    kill_at: int  # 0: no kill
    events: int = 0  # events the killed worker counted
    killed: bool = False
    outputs: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    last_event: str = ""


def _produce(cfg: Config, records: list[Record]) -> None:
    producer = make_producer(cfg)
    for role, key, value in records:
        producer.produce(getattr(cfg.topics, role).name, key=key, value=value)
    producer.flush(30)


def _inputs(cfg: Config) -> list[str]:
    return [cfg.topics.raw.name, cfg.topics.feedback.name, JOIN.name(cfg), JOINED.name(cfg)]


def _events(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _settled(cfg: Config, committed: CommittedOffsets) -> bool:
    """Every input topic committed to its end (a topic still being created is not settled)."""
    try:
        return group_lag(make_admin(cfg), committed, cfg.streams.app_id, _inputs(cfg)).lag == 0
    except KafkaException:
        return False


def _read_outputs(cfg: Config) -> Counter:
    """role, key, value, headers -> how many; the case's own topic prefix (in sources and rejections) made common."""
    mine, common = cfg.streams.app_id.encode(), b"ee" + b"x" * (len(cfg.streams.app_id) - 2)
    codec = make_codec(None)
    out: Counter = Counter()
    for role in OUTPUT_ROLES:
        for m in read_all(cfg, getattr(cfg.topics, role).name, idle_s=0.3):
            headers = tuple(sorted((k, v.replace(mine, common)) for k, v in (m.headers() or [])
                                   if k not in IGNORED_HEADERS))
            value = m.value() or b""
            if role == "rejected":  # when it was written, and an id hashed from the case's topic name
                rec = codec.decode(value)
                assert isinstance(rec, Rejection), rec
                rec.created_at, rec.rejection_id = 0, ""
                value = codec.encode(rec, None)
            out[(role, m.key(), value.replace(mine, common), headers)] += 1
    return out


def run_case(base: Config, root: Path, kill_at: int, records: list[Record], mode: str = "landed",
             timeout_s: float = 120.0) -> Case:
    """One input, one kill at event `kill_at` (0: none), one restart; the outputs once all input is committed."""
    t = time.monotonic()
    case = Case(kill_at)
    cfg = case_config(base, root, uuid.uuid4().hex[:8])
    create_topics(cfg, make_admin(cfg))
    _produce(cfg, records)
    state = Path(cfg.state_dir)
    cfg_path = write_config(cfg, state / "streams.yaml")
    events = state / "events.jsonl"
    with (state / "killed.log").open("ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "rftbus.apps.chaos.kill_worker", "--config", str(cfg_path),
                                 "--worker-id", "killed", "--kill-at", str(kill_at), "--mode", mode,
                                 "--events", str(events)], stdout=log, stderr=subprocess.STDOUT)
    committed = CommittedOffsets(cfg)
    try:
        deadline = time.monotonic() + timeout_s
        seen, quiet_since = -1, time.monotonic()
        while proc.poll() is None and time.monotonic() < deadline:
            n = _events(events)
            if n != seen:
                seen, quiet_since = n, time.monotonic()
            # (a kill index past the events this run has: settled and no event for 5 s, it is a run without a kill)
            if (kill_at == 0 or time.monotonic() - quiet_since > 5.0) and _settled(cfg, committed):
                break
            time.sleep(0.3)
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)
        else:
            case.killed = proc.returncode == -9
        lines = events.read_text().splitlines() if events.exists() else []
        case.events, case.last_event = len(lines), lines[-1] if lines else ""
        if kill_at and case.killed:
            # (under the killed worker's id: its state folder, so its tables on disk, as a supervisor restarts it)
            worker = WorkerProcess(cfg, "killed", state / "restarted.log")
            try:  # (ready first: a kill after the last commit leaves nothing to do, and a stop mid-start is unclean)
                worker.wait_ready(max(1.0, deadline - time.monotonic()))
                while not _settled(cfg, committed) and time.monotonic() < deadline:
                    if worker.proc.poll() is not None:
                        case.problems.append(f"the restarted worker exited {worker.proc.returncode}: {worker.tail()}")
                        break
                    time.sleep(0.3)
            finally:
                if worker.stop() != 0:
                    case.problems.append(f"the restarted worker did not stop cleanly: {worker.tail(800)}")
        if not _settled(cfg, committed):
            lags = {t: group_lag(make_admin(cfg), committed, cfg.streams.app_id, [t]) for t in _inputs(cfg)}
            case.problems.append(f"input not committed to its end after {timeout_s:g} s: " + ", ".join(
                f"{t} {lag.done}/{lag.end}" for t, lag in lags.items() if lag.lag))
        case.outputs = _read_outputs(cfg)
    finally:
        committed.close()
    case.seconds = time.monotonic() - t
    return case


def compare(baseline: Case, case: Case) -> list[str]:
    """What differs from the run without a kill: outputs missing (lost) or extra (duplicated or different)."""
    lost = baseline.outputs - case.outputs
    extra = case.outputs - baseline.outputs
    out = []
    for what, items in (("missing", lost), ("extra", extra)):
        for (role, key, _value, headers), n in sorted(items.items(), key=lambda kv: str(kv[0][:2])):
            src = dict(headers).get("rftbus-src", b"?").decode(errors="replace")
            rec = make_codec(None).decode(_value) if role == "rejected" else None
            why = f" ({rec.reason})" if isinstance(rec, Rejection) else ""
            out.append(f"{what} x{n}: {role}{why} key {key!r} of {src}")
    return out


@dataclass
class Sweep:
    baseline: Case
    cases: list[Case]

    @property
    def failed(self) -> list[Case]:
        return [c for c in self.cases if c.problems]


def sweep(base: Config, root: Path, indices: Iterable[int] | None = None, mode: str = "landed", stride: int = 1,
          progress: Callable[[Case, int], None] = lambda c, n: None) -> Sweep:
    """The baseline, then a kill at each index (default: every `stride`-th event the baseline counted, from 1)."""
    records = script()
    baseline = run_case(base, root, 0, records, mode)
    if baseline.problems or not baseline.outputs:
        raise RuntimeError(f"the run without a kill did not settle: {baseline.problems}")
    todo = list(indices) if indices is not None else list(range(1, baseline.events + 1, stride))
    cases = []
    for i in todo:
        c = run_case(base, root, i, records, mode)
        c.problems += compare(baseline, c)
        cases.append(c)
        progress(c, len(todo))
    return Sweep(baseline, cases)
