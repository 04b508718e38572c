"""Producers: taskset producer, explorer rollout workers, live-traffic proxy, feedback producers."""
