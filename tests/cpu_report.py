"""CPU seconds per test phase, reported after `--durations`: this process's and its reaped children's (a whole run's
`rftbus run` reaps its stages, so their CPU counts too). On a 2-core machine the suite is CPU-bound, and a wall
time measured beside two other workers says more about them than about the test; CPU says what each test costs."""

from __future__ import annotations

import resource

import pytest

KEY = "cpu_s"
_START = pytest.StashKey[float]()
_SEEN: list[tuple[float, str, str]] = []  # (cpu s, phase, node id), on the controller


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _start(item: pytest.Item) -> None:
    item.stash[_START] = _cpu()


pytest_runtest_setup = pytest.hookimpl(tryfirst=True)(_start)
pytest_runtest_call = pytest.hookimpl(tryfirst=True)(_start)
pytest_runtest_teardown = pytest.hookimpl(tryfirst=True)(_start)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if _START in item.stash:
        report.user_properties.append((f"{KEY}:{call.when}", round(_cpu() - item.stash[_START], 2)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for name, value in report.user_properties:
        if name == f"{KEY}:{report.when}" and isinstance(value, (int, float)):
            _SEEN.append((float(value), report.when, report.nodeid))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not _SEEN or config.getoption("collectonly", False):
        return
    total = sum(cpu for cpu, _, _ in _SEEN)
    terminalreporter.write_sep("=", f"most CPU, {min(30, len(_SEEN))} of {len(_SEEN)} phases ({total / 60:.1f} CPU-min in tests)")
    for cpu, when, nodeid in sorted(_SEEN, reverse=True)[:30]:
        terminalreporter.write_line(f"{cpu:8.1f}s cpu {when:<8} {nodeid}")
