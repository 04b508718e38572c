"""`run.report_to` (consumers/trackers): TrainerMetric records from the metrics topic reach TensorBoard, W&B
(offline) and MLflow (a file store) through the real libraries, and each is read back with that library's own
reader. The whole path inside `rftbus run` is tests/system/test_run_metrics.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rftbus.config import Config
from rftbus.schemas import TrainerMetric, make_codec

pytest.importorskip("wandb", reason="the `track` extra (make install installs it)")
pytest.importorskip("mlflow", reason="the `track` extra (make install installs it)")


def tensorboard_curve(folder: Path, tag: str) -> list[float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return [e.value for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else []


def wandb_history(state_dir: Path) -> list[dict]:
    """The history rows of the (one) offline W&B run, read from its .wandb file as `wandb sync` reads it."""
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    files = sorted((state_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1, files
    ds = datastore.DataStore()
    ds.open_for_scan(str(files[0]))
    rows = []
    while (data := ds.scan_data()) is not None:
        rec = wandb_internal_pb2.Record()
        rec.ParseFromString(data)
        if rec.WhichOneof("record_type") == "history":
            rows.append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in rec.history.item})
    return rows


def mlflow_run(state_dir: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(state_dir / "mlruns").absolute().as_uri())
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
                                         "tracking": {"run_name": "t1"}}})
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
    assert tensorboard_curve(tmp_path / "tb", "eval/reward") == [0.4]
