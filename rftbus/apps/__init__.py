"""The apps and harnesses: the CLI, `rftbus run` that supervises the processes, the simulator of live traffic, and
the benchmark and chaos harnesses. Nothing in the ground or a component imports them (tests/unit/test_layers.py)."""
