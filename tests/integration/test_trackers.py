"""`run.report_to` (rftbus/consumers/trackers): TrainerMetric records from the metrics topic reach TensorBoard, W&B
(offline) and MLflow (its SQLite store) through the real libraries, and each is read back with that library's own
reader. The whole path inside `rftbus run` is tests/system/test_run_metrics.py."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from rftbus.ground.config import Config
from rftbus.ground.schemas import TrainerMetric, make_codec

pytest.importorskip("wandb", reason="the `track` extra (make install installs it)")
pytest.importorskip("mlflow", reason="the `track` extra (make install installs it)")


def tensorboard_curve(folder: Path, tag: str) -> list[float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return [e.value for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else []


def wandb_records(path: Path) -> list[bytes]:
    """The records of a .wandb file: a 7-byte W&B header, then LevelDB's log format (32 KiB blocks of chunks, each
    with a 7-byte header: CRC, length, kind full/first/middle/last). W&B 0.31 dropped its Python reader (its Go core
    reads the file for `wandb sync`), so the test reads the documented format itself."""
    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B", data[:8]
    pos, out, pending = 7, [], b""
    while pos + 7 <= len(data):
        space = block - pos % block
        if space < 7:  # a block's tail too short for a header is padding
            pos += space
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:  # zeros: the rest of the block is padding
            pos += space
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 1:
            out.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            out.append(pending + chunk)
    return out


def wandb_history(state_dir: Path) -> list[dict]:
    """The history rows of the (one) offline W&B run, decoded with W&B's own protobuf record type."""
    from wandb.proto import wandb_internal_pb2

    files = sorted((state_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1, files
    rows = []
    for data in wandb_records(files[0]):
        rec = wandb_internal_pb2.Record()
        rec.ParseFromString(data)
        if rec.WhichOneof("record_type") == "history":
            rows.append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in rec.history.item})
    return rows


def mlflow_run(state_dir: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{(state_dir / 'mlflow.db').absolute()}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert len(runs) == 1, runs
    return client, runs[0]


def tracked_eval_curves(state_dir: Path) -> dict[str, list[float]]:
    """The held-out eval curve as each tracker holds it."""
    client, run = mlflow_run(state_dir)
    return {
        "tensorboard": tensorboard_curve(state_dir / "tensorboard" / "loop", "eval/reward"),
        "wandb": [r["eval/reward"] for r in wandb_history(state_dir) if "eval/reward" in r],
        "mlflow": [m.value for m in sorted(client.get_metric_history(run.info.run_id, "eval.reward"),
                                           key=lambda m: (m.step, m.timestamp))],
    }


def test_every_tracker_gets_the_steps_the_eval_curve_and_the_config(tmp_path):
    from rftbus.consumers.trackers.follow import MetricsFollower, make_trackers

    cfg = Config.model_validate({"state_dir": str(tmp_path), "trainer": {"lr": 0.0007},
                                 "run": {"report_to": ["tensorboard", "wandb", "mlflow"],
                                         "tracking": {"run_name": "t1"}},
                                 # secrets in free-form client settings never reach a tracker (#63)
                                 "kafka": {"client": {"sasl.password": "hunter2-kafka"}},
                                 "schema_registry": {"client": {"basic.auth.user.info": "me:hunter2-registry"}}})
    said: list[str] = []
    follower = MetricsFollower(cfg, make_trackers(cfg), said.append)
    follower._start_trackers()
    assert [t.name for t in follower.trackers] == ["tensorboard", "wandb", "mlflow"], said
    encode = make_codec(None).serializer(TrainerMetric)
    name = cfg.model.name
    records = [TrainerMetric(model=name, kind="eval", step=0, version=0, values={"reward": 0.25}, created_at=1000)]
    for step in (1, 2, 3):
        records.append(TrainerMetric(model=name, kind="metric", step=step, version=step,
                                     values={"loss": 0.1 * step, "reward": 0.3}, created_at=1000 + step))
    records += [
        TrainerMetric(model=name, kind="eval", step=0, version=3, values={"reward": 0.5}, created_at=2000),
        TrainerMetric(model=name, kind="trained", step=3, version=3, values={"e1": 0.0}),  # lineage: not tracked
        TrainerMetric(model="another-model", kind="eval", step=0, version=9, values={"reward": 1.0}),
    ]
    for rec in records:
        follower.handle(encode(rec, None))
    follower.handle(b"not a record")  # the sink and the rejected topic deal with it; the trackers go on
    for t in follower.trackers:
        t.close()
    assert follower.logged == 5 and not said
    assert tracked_eval_curves(tmp_path) == {"tensorboard": [0.25, 0.5], "wandb": [0.25, 0.5], "mlflow": [0.25, 0.5]}
    assert tensorboard_curve(tmp_path / "tensorboard" / "loop", "train/loss") == pytest.approx([0.1, 0.2, 0.3])
    history = wandb_history(tmp_path)
    assert [r["trainer/step"] for r in history if "eval/reward" in r] == [0, 3]  # eval on the newest step seen
    client, run = mlflow_run(tmp_path)
    assert run.info.run_name == "t1" and run.data.params["trainer.lr"] == "0.0007"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train.loss")] == [1, 2, 3]
    assert run.data.params["kafka.client.sasl.password"] == "**********"
    leaked = [p for p in tmp_path.rglob("*") if p.is_file() and b"hunter2" in p.read_bytes()]
    assert not leaked, leaked  # not in the TensorBoard event file, wandb's or mlflow's files


def test_a_tracker_that_cannot_start_is_reported_and_the_others_go_on(tmp_path):
    from rftbus.consumers.trackers.follow import MetricsFollower
    from rftbus.consumers.trackers.mlflow import MlflowTracker
    from rftbus.consumers.trackers.tensorboard import TensorBoardTracker

    cfg = Config.model_validate({"state_dir": str(tmp_path)})
    said: list[str] = []
    broken = MlflowTracker("no-such-scheme://x", "p")
    follower = MetricsFollower(cfg, [broken, TensorBoardTracker(tmp_path / "tb")], said.append)
    follower._start_trackers()
    assert [t.name for t in follower.trackers] == ["tensorboard"]
    assert len(said) == 1 and said[0].startswith("tracker mlflow: not started:")
    encode = make_codec(None).serializer(TrainerMetric)
    follower.handle(encode(TrainerMetric(model=cfg.model.name, kind="eval", step=0, version=0,
                                         values={"reward": 0.4}), None))
    follower.trackers[0].close()
    assert tensorboard_curve(tmp_path / "tb", "eval/reward") == pytest.approx([0.4])
