"""A weight-sync follower process for `rftbus bench sync`: it reports when it generates with each version.

Two kinds, so the benchmark can tell the transport from the explorer's own loop:
- `explorer`: the explorer's real parts — rftbus.ground.weights.follower.WeightFollower (prefetch + sha256
  check) and the transformers rollout engine's load_weights — checked between 1-token generations,
  as the explorer checks between batches;
- `minimal`: a bare follower: poll the weights topic, load_weights (sha256 verified), load_state_dict
  into a transformers model, generate one token.
Each prints JSON lines: {"ready": true} once caught up, then {"version": v, "t": wall time} when it
has generated with version v.
"""

from __future__ import annotations

import json
import sys
import time
import uuid

import torch


def _say(**fields) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def run_explorer(cfg) -> None:
    from rftbus.ground.weights.follower import WeightFollower
    from rftbus.ground.models.loading import load_tokenizer
    from rftbus.producers.engines.transformers import TransformersEngine

    tok = load_tokenizer(cfg.model)
    engine = TransformersEngine(cfg, tok)
    follower = WeightFollower(cfg).start()
    follower.caught_up.wait(60)
    prompt = tok("1+1=")["input_ids"]
    _say(ready=True)
    while True:
        ready = follower.take_ready(engine.version)
        if ready is not None:
            rec, state = ready
            engine.load_weights(state, rec.version)
            engine.generate([prompt], cfg.explorer.sampling, max_new_tokens=1)
            _say(version=rec.version, t=time.time())
        else:
            engine.generate([prompt], cfg.explorer.sampling, max_new_tokens=1)


def run_minimal(cfg) -> None:
    from confluent_kafka import OFFSET_END, TopicPartition

    from rftbus.ground.kafka.clients import make_consumer
    from rftbus.ground.models.loading import load_policy, load_tokenizer
    from rftbus.ground.schemas import WeightVersion, make_codec
    from rftbus.ground.models.lora import load_version
    from rftbus.ground.weights import load_weights

    tok = load_tokenizer(cfg.model)
    model = load_policy(cfg.model, tok).eval()
    decode = make_codec(cfg.schema_registry.url, cfg.schema_registry.client).deserializer(WeightVersion)
    topic = cfg.topics.weights.name
    consumer = make_consumer(cfg, f"bench-sync-{uuid.uuid4().hex[:8]}", **{"fetch.wait.max.ms": 10})
    parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_END) for p in parts])
    consumer.poll(0.5)  # join the partition ends before saying ready
    ids = tok("1+1=", return_tensors="pt")
    _say(ready=True)
    while True:
        msg = consumer.poll(0.05)
        if msg is None or msg.error():
            continue
        rec = decode(msg.value(), None)
        if rec is None:
            continue
        model = load_version(model, load_weights(rec.uri, rec.sha256))
        with torch.inference_mode():
            model.generate(**ids, max_new_tokens=1, do_sample=False, pad_token_id=tok.pad_token_id)
        _say(version=rec.version, t=time.time())


def main() -> None:
    from rftbus.ground.config import load_config

    kind, config_path = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    cfg = load_config(config_path, environ={})
    {"explorer": run_explorer, "minimal": run_minimal}[kind](cfg)


if __name__ == "__main__":
    main()
