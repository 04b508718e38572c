"""No input acknowledged without an outcome (#36), through a real Faust worker on the real broker.

Oversized feedback and feedback naming an id no key can hold are rejected by name (they were acknowledged
and dropped); an output the broker refuses after the input was acknowledged is retried with backoff and
then quarantined by the input's offset, and the partition moves on.
"""

from __future__ import annotations

import time

from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from rftbus.apps.bench.synthetic import make_group
from rftbus.ground.kafka.clients import make_admin
from rftbus.ground.schemas import Feedback, FeedbackKind, Rejection
from rftbus.streams.checkpoint.deliveries import read_quarantine
from tests.integration.test_streams import LATEST, curated_of, feedback, send, streams_worker, wait_outputs


def _set_topic_limit(cfg, topic: str, value: str | None) -> None:
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    res = ConfigResource("topic", topic, incremental_configs=[ConfigEntry("max.message.bytes", value or "",
                                                                          incremental_operation=op)])
    admin = make_admin(cfg)  # (held while the futures run: a collected client cancels them)
    for f in admin.incremental_alter_configs([res]).values():
        f.result(timeout=30)


def test_every_input_gets_an_outcome(broker, tmp_path):
    with streams_worker(broker.broker.port, tmp_path, **{"streams.write_retries": 2,
                                                         "streams.write_retry_backoff_s": 0.2}) as (cfg, producer, worker):
        limit = cfg.streams.max_message_bytes
        big = Feedback(experience_id="someone", kind=FeedbackKind.correction, correction="x" * (limit + 10))
        long_id = Feedback(experience_id="i" * 100_000, kind=FeedbackKind.thumbs, thumbs_up=True)
        feedback(cfg, producer, [big, long_id])
        out = wait_outputs(cfg, lambda o: len([r for r in o["rejected"] if r.stage == "feedback"]) >= 2)
        by_reason = {r.reason: r for r in out["rejected"] if r.stage == "feedback"}
        assert set(by_reason) == {"too_large", "bad_feedback"}, by_reason
        assert str(limit) in by_reason["too_large"].detail
        assert "experience id of 100000 bytes" in by_reason["bad_feedback"].detail

        # the rejected topic now refuses every rejection: a garbage raw record's rejection is retried, then
        # quarantined by the raw record's offset, and the partition goes on to the good group behind it
        _set_topic_limit(cfg, cfg.topics.rejected.name, "100")
        where = {}
        key = b"garbage-then-good"
        producer.produce(cfg.topics.raw.name, key=key, value=b"not a group" * 20,
                         on_delivery=lambda err, m: where.update(p=m.partition(), o=m.offset()))
        good = make_group(rewards=[1.0, 0.0], model_version=LATEST, response_tokens=10, seed=8,
                          group_id=key.decode())
        send(cfg, producer, [good])
        deadline = time.monotonic() + 60
        while not read_quarantine(cfg.state_dir) and time.monotonic() < deadline:
            time.sleep(0.5)
        _set_topic_limit(cfg, cfg.topics.rejected.name, None)
        [q] = read_quarantine(cfg.state_dir)
        assert (q["topic"], q["partition"], q["offset"]) == (cfg.topics.raw.name, where["p"], where["o"]), q
        assert q["output"] == "rejected" and "after 2 retries" in q["reason"], q
        out = wait_outputs(cfg, lambda o: curated_of(o, good.group_id))
        assert curated_of(out, good.group_id), "the partition did not move on"
        deadline = time.monotonic() + 10
        while (worker.status() or {}).get("quarantined") != 1 and time.monotonic() < deadline:
            time.sleep(0.5)
        st = worker.status() or {}
        assert st.get("quarantined") == 1 and st.get("delivery_failures") == 1, {k: st.get(k) for k in (
            "quarantined", "delivery_failures")}
        assert worker.proc.poll() is None
        # later rejections are written again
        feedback(cfg, producer, [b"garbage feedback"])
        out = wait_outputs(cfg, lambda o: any(isinstance(r, Rejection) and r.original == b"garbage feedback"
                                              for r in o["rejected"]))
        assert any(r.original == b"garbage feedback" for r in out["rejected"])
