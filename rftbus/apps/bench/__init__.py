"""Benchmarks and the process harnesses they share with the tests (`rftbus bench ...`, docs/BENCHMARKS.md).

Nothing at runtime imports this package: it starts the real commands as subprocesses and measures them.
"""
