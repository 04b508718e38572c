"""Consumers: the analytics sink and the studio (the trainer's batch source is rftbus/trainer/batch_source.py, the weights
follower rftbus/ground/weights/follower.py)."""
