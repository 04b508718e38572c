"""The bad input sweep, against real processes on the session broker: every kind of bad record gets a
clear one-line rejection reason, and the worker that met it stays alive and keeps working.

Streams cases share one `rftbus streams` worker (WorkerProcess); each sends its bad record and then a
good group under the same key (same partition), so "keeps working" means the very partition that
held the poison moved on. Hostile reward code runs in a real `rftbus explore` process.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from aiokafka.partitioner import murmur2

from weights_store import placeholder_version

from rftbus.ground.kafka.clients import make_admin, make_producer
from rftbus.ground.kafka.topics import create_topics
from rftbus.ground.schemas import ExperienceGroup, Rejection, Task, make_codec
from rftbus.apps.bench.processes import WorkerProcess, read_all
from rftbus.apps.bench.synthetic import make_group
from tests.conftest import make_config
from tests.explorer_kafka import fresh_config, read_topic

LATEST = 3
KEYS = ["tasks", "raw", "curated", "curated_priority", "expert", "rejected", "feedback", "weights", "metrics"]
CODEC = make_codec(None)
DECODE = CODEC.deserializer()
MAX_BYTES = 200_000
CURATED_TOPIC_MAX = 150_000  # the curated lanes take less than raw records may hold (streams.max_message_bytes)
TESTS_DIR = Path(__file__).resolve().parents[1]


def _exp(prompt_text: str | None = None, group_id: str | None = None, **over) -> ExperienceGroup:
    """A group of one; `over` changes its sample."""
    g = make_group(rewards=[1.0], model_version=LATEST, response_tokens=20, seed=7, group_id=group_id)
    g = replace(g, samples=[replace(g.samples[0], **over)])
    return g if prompt_text is None else replace(g, prompt_text=prompt_text)


def _bad_utf8_prompt() -> bytes:
    marker = "MARKER\u00e9\u00e9"  # 10 bytes of UTF-8, replaced by 10 bytes that are not UTF-8
    data = CODEC.encode(_exp(prompt_text=marker), None)
    i = data.index(marker.encode())
    return data[:i] + b"\xff\xfe\xc3\x28\xa0\xa1\xed\xa0\x80\xc0" + data[i + len(marker.encode()):]


def _malformed_avro() -> bytes:
    good = CODEC.encode(_exp(), None)
    return good[:10] + bytes(400)  # a valid ExperienceGroup header (magic + fingerprint), a body that is not one


def _partition_mate(key: str, partitions: int) -> str:
    """Another group id whose records land on the same raw partition as `key` (Kafka's murmur2)."""
    def home(k: str) -> int:
        return (murmur2(k.encode()) & 0x7FFFFFFF) % partitions
    return next(f"{key}-{i}" for i in range(1000) if home(f"{key}-{i}") == home(key))


# case -> (bytes of a record keyed by the given group id, reason, words the detail must contain); a decodable
# group is keyed by its group id, else it is rejected `bad_key` before anything else is looked at
BAD = {
    "malformed_avro": (lambda gid: _malformed_avro(), "malformed", ["malformed_body"]),
    "wrong_schema_id": (lambda gid: b"\x00" + (424242).to_bytes(4, "big") + b"\x02body", "schema", ["424242"]),
    "truncated_frame": (lambda gid: CODEC.encode(_exp(), None)[:-9], "malformed", ["truncated"]),
    "huge_record": (lambda gid: CODEC.encode(_exp(response_ids=[5] * 70_000, logprobs=[-1.0] * 70_000,
                                              loss_mask=[True] * 70_000), None), "too_large", [str(MAX_BYTES)]),
    "nan_reward": (lambda gid: CODEC.encode(_exp(reward=math.nan, group_id=gid), None), "non_finite_reward", ["nan"]),
    "unknown_version": (lambda gid: CODEC.encode(_exp(model_version=LATEST + 50, group_id=gid), None), "unknown_version",
                        [str(LATEST + 50), f"latest published {LATEST}"]),
    "unicode_garbage_prompt": (lambda gid: _bad_utf8_prompt(), "malformed", ["utf-8"]),
}


@pytest.fixture(scope="module")
def env(broker, tmp_path_factory):
    tag = uuid.uuid4().hex[:6]
    cfg = make_config(
        tmp_path_factory.mktemp("badinput"), broker.broker.port,
        **{f"topics.{k}.name": f"bad{tag}.{k}" for k in KEYS},
        **{f"topics.{k}.config": {"max.message.bytes": str(CURATED_TOPIC_MAX)} for k in ("curated", "curated_priority")},
        **{"streams.app_id": f"bad{tag}", "streams.tick_interval_s": 0.5,
           "streams.version_wait_s": 0.5, "streams.commit_interval_s": 0.2, "streams.max_message_bytes": MAX_BYTES})
    create_topics(cfg, make_admin(cfg))
    producer = make_producer(cfg)
    wv = placeholder_version(cfg, LATEST)
    producer.produce(cfg.topics.weights.name, key=wv.model.encode(), value=CODEC.encode(wv, None))
    producer.flush(10)
    worker = WorkerProcess(cfg, f"bad{tag}", cfg.state_dir / "worker.log")
    try:
        worker.wait_ready(120)
        yield cfg, producer, worker
    finally:
        assert worker.stop() == 0, worker.tail()


def _send(cfg, producer, key: bytes, value: bytes | None) -> tuple[int, int]:
    where = {}
    producer.produce(cfg.topics.raw.name, key=key, value=value,
                     on_delivery=lambda err, m: where.update(err=err, p=m.partition(), o=m.offset()))
    producer.flush(10)
    assert where.get("err") is None, where
    return where["p"], where["o"]


def _wait(cfg, want, timeout=60.0):
    deadline = time.monotonic() + timeout
    while True:
        out = {role: read_all(cfg, getattr(cfg.topics, role).name, decode=DECODE, idle_s=0.3)
               for role in ("curated", "curated_priority", "rejected")}
        if want(out) or time.monotonic() > deadline:
            return out
        time.sleep(0.5)


def _curated(out, gid):
    """The survivors of group `gid` on the curated lanes."""
    return [e for role in ("curated", "curated_priority") for g in out[role] if g.group_id == gid for e in g.kept()]


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_record_is_rejected_with_a_clear_reason_and_the_worker_lives(env, case):
    cfg, producer, worker = env
    make_bytes, reason, words = BAD[case]
    key = f"bad-{case}-{uuid.uuid4().hex[:6]}"
    pid = worker.proc.pid
    bad = make_bytes(key)
    part, off = _send(cfg, producer, key.encode(), bad)
    mate = _partition_mate(key, cfg.topics.raw.partitions)  # the partition that held the poison must move on
    good = make_group(rewards=[1.0, 0.0], model_version=LATEST, response_tokens=10, seed=hash(case) % 1000,
                      group_id=mate)
    _send(cfg, producer, mate.encode(), CODEC.encode(good, None))

    def mine(out):
        return [r for r in out["rejected"] if isinstance(r, Rejection) and r.source_topic == cfg.topics.raw.name
                and (r.partition, r.offset) == (part, off)]

    out = _wait(cfg, lambda o: mine(o) and len(_curated(o, mate)) == 2)
    rejections = mine(out)
    assert len(rejections) == 1, f"{case}: {len(rejections)} rejections for the bad record"
    r = rejections[0]
    assert (r.reason, r.stage) == (reason, "verify"), (case, r.reason, r.detail)
    assert r.detail and "\n" not in r.detail, f"{case}: the detail must be one line: {r.detail!r}"
    for w in words:
        assert w.lower() in r.detail.lower(), f"{case}: detail {r.detail!r} does not name {w!r}"
    assert r.original == bad  # the bytes are kept for inspection
    assert len(_curated(out, mate)) == 2, f"{case}: the good group after the bad record was not curated"
    assert worker.proc.poll() is None and worker.proc.pid == pid, worker.tail()
    status = worker.status()
    assert status["pid"] == pid and status["errors"] == 0, status  # handled as input, not as a crash


def _group_of_bytes(n_bytes: int, group_id: str) -> ExperienceGroup:
    """A valid group whose encoding is about `n_bytes`: samples of up to 4,000 response tokens (under
    streams.max_tokens), 6 bytes per token, as many as it takes (an even count, rewards 1 and 0)."""
    tokens = min(4000, n_bytes // 12)
    k = max(2, n_bytes // (6 * tokens) // 2 * 2)
    g = make_group(rewards=[1.0, 0.0] * (k // 2), model_version=LATEST, response_tokens=10, seed=11, group_id=group_id)
    return replace(g, samples=[replace(s, response_ids=[5] * tokens, logprobs=[-1.0] * tokens, loss_mask=[True] * tokens)
                               for s in g.samples])


@pytest.mark.parametrize("case", ["raw_at_the_broker_limit", "curated_over_its_topic_limit"])
def test_records_at_the_size_limits_are_rejected_with_their_ids(env, case):
    """#18: a raw record at the broker's size limit (16 MiB here), and a valid group whose curated record
    would be over the curated topic's max.message.bytes, are rejected `too_large` naming every experience,
    the original kept by reference (never copied past the rejected topic's limit), and the same
    partition moves on."""
    cfg, producer, worker = env
    key = f"size-{case}-{uuid.uuid4().hex[:6]}"
    size = 16 * 1024 * 1024 - 256 * 1024 if case == "raw_at_the_broker_limit" else 180_000
    big = _group_of_bytes(size, key)
    data = CODEC.encode(big, None)
    pid = worker.proc.pid
    part, off = _send(cfg, producer, key.encode(), data)
    mate = _partition_mate(key, cfg.topics.raw.partitions)
    good = make_group(rewards=[1.0, 0.0], model_version=LATEST, response_tokens=10, seed=5, group_id=mate)
    _send(cfg, producer, mate.encode(), CODEC.encode(good, None))

    def mine(out):
        return [r for r in out["rejected"] if isinstance(r, Rejection) and (r.partition, r.offset) == (part, off)
                and r.source_topic == cfg.topics.raw.name]

    out = _wait(cfg, lambda o: mine(o) and len(_curated(o, good.group_id)) == 2, timeout=120)
    rejections = mine(out)
    assert [r.reason for r in rejections] == ["too_large"], [(r.reason, r.detail) for r in rejections]
    r = rejections[0]
    assert r.group_id == key and sorted(r.covers()) == sorted(big.experience_ids()), r.experience_ids
    if case == "raw_at_the_broker_limit":
        assert r.stage == "verify" and str(MAX_BYTES) in r.detail and "not copied" in r.detail and r.original is None
    else:
        assert r.stage == "streams" and str(CURATED_TOPIC_MAX - 16 * 1024) in r.detail, r.detail
    assert not _curated(out, key), "a too-large group reached a curated lane"
    assert len(_curated(out, good.group_id)) == 2, "the partition did not move on"
    assert worker.proc.poll() is None and worker.proc.pid == pid, worker.tail()
    assert worker.status()["errors"] == 0


def test_hostile_unicode_text_is_not_poison(env):
    """Odd but valid text (bidi overrides, NUL, emoji, non-characters, combining marks) flows through
    untouched: rejecting it would be losing it."""
    cfg, producer, worker = env
    text = "\u202e\u0000\U0001f4a5 \u0645\u0631\u062d\u0628\u0627 \ufeff\U0010fffd z\u0301\u0301\u0301 \ud7ff"
    gid = f"unicode-{uuid.uuid4().hex[:6]}"
    group = make_group(rewards=[1.0, 0.0], model_version=LATEST, response_tokens=10, seed=99, group_id=gid)
    group.prompt_text = text
    for e in group.samples:
        e.response_text = text[::-1]
    _send(cfg, producer, gid.encode(), CODEC.encode(group, None))
    out = _wait(cfg, lambda o: len(_curated(o, gid)) == 2)
    [got] = [g for role in ("curated", "curated_priority") for g in out[role] if g.group_id == gid]
    assert got.prompt_text == text and all(e.response_text == text[::-1] for e in got.samples)
    assert worker.proc.poll() is None


# ---- hostile reward code: a real `rftbus explore` process with the sandboxed code reward ----------------
# bwrap's own init is pid 1 of the sandbox's PID namespace, the code pid 2
GUARD = "import os, signal, sys\nif os.getpid() > 2:\n    print('not in a PID namespace: no attack'); sys.exit(42)\n"
HOSTILE = {
    # Each attack runs only as pid 2 of its own PID namespace (the guard), so a sandbox that lost its
    # isolation makes the test fail instead of taking this machine's processes down.
    "kill_everything": GUARD + "os.kill(-1, signal.SIGKILL)\nprint('survived kill -1')",
    "kill_parent_group": GUARD + "os.killpg(0, signal.SIGKILL)",
    "kill_by_pid": GUARD + "for pid in range(2, 40000):\n    try:\n        os.kill(pid, signal.SIGKILL)\n"
                           "    except OSError:\n        pass\nprint('swept')",
    "exit_nonzero": "import sys\nsys.exit(3)",
}


def test_hostile_reward_code_scores_zero_and_the_explorer_lives(broker, tmp_path):
    cfg = fresh_config(make_config, tmp_path, broker, **{
        "explorer.admission": False, "explorer.idle_exit_s": 8.0, "rl.group_size": 1, "explorer.task_retries": 0,
        "explorer.workflow.kind": "explorer_plugins:EchoCode",
        "explorer.rewards": [{"name": "code", "params": {"wall_s": 5.0, "cpu_s": 3, "memory_mb": 512, "max_procs": 8}},
                             {"name": "bad_input_plugins:exploding_reward", "weight": 0.0}]})
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # must outlive the attacks
    programs = {**HOSTILE, "good": "def add(a, b):\n    return a + b"}
    tasks = [Task(taskset="code", prompt=name, metadata={"program": prog, "tests": "assert add(2, 3) == 5"})
             for name, prog in programs.items()]
    failing = Task(taskset="code", prompt="reward_raises", metadata={"program": "pass", "tests": ""})
    producer = make_producer(cfg)
    for t in tasks + [failing]:
        producer.produce(cfg.topics.tasks.name, key=t.task_id, value=CODEC.encode(t, None))
    assert producer.flush(10) == 0
    (tmp_path / "explorer.yaml").write_text(__import__("json").dumps(cfg.model_dump(mode="json")))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RFTBUS_")},
           "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")])}
    log = open(tmp_path / "explorer.log", "wb")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "rftbus"), "--config", str(tmp_path / "explorer.yaml"),
                             "explore", "--id", "hostile"], stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    try:
        code = proc.wait(240)  # exits by itself after idle_exit_s without tasks
        assert bystander.poll() is None, "a sandboxed program killed a process outside the sandbox"
    finally:
        bystander.kill()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
    text = (tmp_path / "explorer.log").read_text(errors="replace")
    assert code == 0, f"the explorer did not survive (exit {code}):\n{text[-3000:]}"
    raw = {g.task_id: g.samples[0] for _, g in read_topic(cfg, "raw")}  # groups of one
    by_name = {t.prompt: raw[t.task_id] for t in tasks}
    assert by_name["good"].reward == 1.0
    for name in HOSTILE:
        e = by_name[name]
        assert e.reward == 0.0, (name, e.reward_components)
        assert e.reward_components["code.exit_code"] != 0.0, (name, e.reward_components)
        assert e.reward_components["code.exit_code"] != 42.0, f"{name}: the sandbox had no PID namespace"
    rejections = [r for _, r in read_topic(cfg, "rejected")]
    assert [(r.reason, r.stage) for r in rejections] == [("task_failed", "explorer")]
    assert "reward function exploded on purpose" in rejections[0].detail
