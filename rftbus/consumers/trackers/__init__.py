"""Experiment trackers (`run.report_to`): TensorBoard, Weights & Biases, MLflow, fed from the metrics topic.

The metrics topic already holds every trainer step's values, every held-out eval point and the streams'
counters (TrainerMetric records), so one follower of that topic (follow.py) writes them to whichever trackers
the config names; no stage of the loop knows about trackers. `rftbus run` runs the follower in its process;
`rftbus track` runs it alone (compose, Kubernetes)."""
