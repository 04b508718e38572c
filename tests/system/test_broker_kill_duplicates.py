"""A broker kill -9 during steady writes from the streams worker appends nothing twice (#36).

Its own broker (it is killed five times), a real Faust worker, a producer writing valid groups to raw the
whole time. A batch the broker had appended but not yet acknowledged when it died is sent again by the
worker's producer; only an idempotent producer (rftbus/streams/transport.py, `idempotent_producer`) has the broker drop the copy. The
kills are counted, every group must come out exactly once, and every batch on the output topics must carry
a producer id (the idempotent form: Kafka's own DumpLogSegments reads it from the log), so the test fails
without the patch even on a run where no kill happened to land inside a write.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
import uuid
from collections import Counter

import pytest

from rftbus.apps.bench.processes import read_all
from rftbus.apps.bench.synthetic import make_group
from rftbus.ground.broker import embedded, node_config
from rftbus.ground.broker.java import find_java
from rftbus.apps.chaos.faults import kill_broker, start_broker
from tests.conftest import JARS, _free_pair, make_config
from tests.integration.test_streams import CODEC, DECODE, LATEST, streams_worker

KILLS = 5
BATCH = re.compile(r"producerId: (-?\d+)")


def _producer_ids(data_dir, topic: str) -> list[int]:
    """The producer id of every record batch in the topic's log segments, read by Kafka's DumpLogSegments."""
    segments = sorted(str(p) for p in data_dir.glob(f"{topic}-*/*.log"))
    if not segments:
        return []
    out = subprocess.run([find_java().path, "-cp", f"{JARS}/*", "kafka.tools.DumpLogSegments", "--files",
                          ",".join(segments)], capture_output=True, text=True, timeout=120, check=True).stdout
    return [int(m) for m in BATCH.findall(out)]


@pytest.mark.timeout(600)
def test_broker_kill9_during_steady_streams_writes_appends_nothing_twice(tmp_path):
    port = _free_pair()
    bcfg = make_config(tmp_path / "broker", port)
    embedded.start(bcfg)
    try:
        with streams_worker(port, tmp_path / "worker", **{"streams.feedback_ttl_s": 60.0}) as (cfg, producer, worker):
            stop, sent = threading.Event(), []

            def feed() -> None:  # ~100 groups a second until told to stop, the broker up or not
                while not stop.is_set():
                    g = make_group(rewards=[1.0, 0.0], model_version=LATEST, response_tokens=30,
                                   seed=len(sent) % 50, group_id=uuid.uuid4().hex)
                    while True:
                        try:
                            producer.produce(cfg.topics.raw.name, key=g.group_id.encode(), value=CODEC.encode(g, None))
                            break
                        except BufferError:
                            producer.poll(0.1)
                    sent.append(g.group_id)
                    producer.poll(0)
                    time.sleep(0.01)

            feeder = threading.Thread(target=feed, daemon=True)
            feeder.start()
            kills = 0
            try:
                for _ in range(KILLS):
                    time.sleep(3.0)  # steady writes under way
                    kill_broker(bcfg)
                    kills += 1
                    start_broker(bcfg)
            finally:
                stop.set()
                feeder.join(30)
            assert producer.flush(120) == 0
            assert kills == KILLS
            want = set(sent)
            deadline = time.monotonic() + 240
            while True:
                out = {role: read_all(cfg, getattr(cfg.topics, role).name, decode=DECODE, idle_s=0.5)
                       for role in ("curated", "curated_priority", "rejected")}
                curated = Counter(g.group_id for role in ("curated", "curated_priority") for g in out[role])
                if want <= set(curated) or time.monotonic() > deadline:
                    break
                time.sleep(2.0)
            assert worker.proc.poll() is None, worker.tail()
        missing = want - set(curated)
        assert not missing, f"{len(missing)} of {len(want)} groups never came out"
        twice = {g: n for g, n in curated.items() if n > 1}
        assert not twice, f"{len(twice)} groups appended twice after {kills} broker kills: {list(twice)[:5]}"
        wrong = [(r.group_id, r.reason, r.stage, r.detail) for r in out["rejected"] if r.group_id in want]
        assert not wrong, f"{len(wrong)} valid groups rejected: {wrong[:5]}"
        data = node_config.BrokerPaths.of(bcfg).data
        ids = [i for role in ("curated", "curated_priority") for i in _producer_ids(data, getattr(cfg.topics, role).name)]
        assert len(ids) > KILLS, f"{len(ids)} batches found on the curated lanes"
        assert -1 not in ids, f"{ids.count(-1)} of {len(ids)} batches written without idempotence"
        print(f"{kills} broker kills, {len(want)} groups written, each out once, {len(ids)} idempotent batches")
    finally:
        embedded.stop(bcfg)
