"""Consumers: the trainer's batch consumer, the weight-sync consumer, the analytics sink."""
