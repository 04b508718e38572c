"""Consumers: the analytics sink and the studio (the trainer's batch source is trainer/batch_source.py, the weights
follower rftbus/weights/follower.py)."""
