"""Fault injection and load for the main job: kill -9 every process kind, restart the broker, poison
every input topic, burst above steady state, then drain and reconcile by experience id.

`rftbus chaos` (driver.py) runs `rftbus run` as a subprocess, exactly as a user starts it, and attacks
it from outside; reconcile.py decides what was lost or duplicated from the logs themselves.
"""
