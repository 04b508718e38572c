"""MLflow: a run in `run.tracking.mlflow_uri` (default a SQLite store, <state_dir>/mlflow.db; a server's http URL
works the same), the config as its parameters, every value as a metric on the trainer's step."""

from __future__ import annotations

from typing import Any

from rftbus.consumers.trackers.base import Point

MAX_PARAM_CHARS = 500  # the shortest limit an MLflow store puts on a parameter's value


class MlflowTracker:
    name = "mlflow"

    def __init__(self, uri: str, experiment: str):
        self.uri, self.experiment = uri, experiment
        self.client: Any = None
        self.run_id = ""

    def start(self, run_name: str, params: dict[str, Any]) -> None:
        import logging

        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)  # "creating tables" on every start

        self.client = MlflowClient(tracking_uri=self.uri)
        exp = self.client.get_experiment_by_name(self.experiment)
        exp_id = exp.experiment_id if exp is not None else self.client.create_experiment(self.experiment)
        self.run_id = self.client.create_run(exp_id, run_name=run_name).info.run_id
        items = [Param(k, str(v)[:MAX_PARAM_CHARS]) for k, v in sorted(params.items())]
        for i in range(0, len(items), 100):  # log_batch takes at most 100 parameters a call
            self.client.log_batch(self.run_id, params=items[i:i + 100])

    def log(self, point: Point) -> None:
        from mlflow.entities import Metric

        ms = int(point.at * 1000)
        metrics = [Metric(k.replace("/", "."), v, ms, point.step) for k, v in point.named().items()]
        if point.prefix == "eval":
            metrics.append(Metric("eval.version", float(point.version), ms, point.step))
        for i in range(0, len(metrics), 1000):
            self.client.log_batch(self.run_id, metrics=metrics[i:i + 1000])

    def close(self) -> None:
        if self.client is not None and self.run_id:
            self.client.set_terminated(self.run_id)
