"""The supervisor restarts crashed children within limits and stops the rest cleanly (real processes)."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from rftbus.apps.run.supervisor import ChildSpec, Supervisor


def _term_handled(pid: int) -> bool:
    """Whether the process catches SIGTERM and no longer blocks it (its signal masks in /proc)."""
    fields = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line)
    bit = 1 << (15 - 1)  # SIGTERM
    return bool(int(fields["SigCgt"], 16) & bit) and not int(fields["SigBlk"], 16) & bit


def _wait(sup: Supervisor, kinds: set[str], timeout: float = 20.0) -> list:
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen += sup.poll()
        if kinds <= {e.kind for e in seen}:
            return seen
        time.sleep(0.05)
    raise AssertionError(f"wanted {kinds}, saw {[(e.child, e.kind) for e in seen]}")


def test_crashing_child_is_restarted_then_given_up(tmp_path):
    crash = ChildSpec("crasher", [sys.executable, "-c", "import sys; sys.exit(3)"], max_restarts=2)
    steady = ChildSpec("steady", [sys.executable, "-c", "import time; time.sleep(60)"])
    sup = Supervisor([crash, steady], backoff_s=0.05)
    sup.start()
    events = _wait(sup, {"gave_up"})
    crashes = [e for e in events if e.child == "crasher" and e.kind == "crashed"]
    assert len(crashes) == 3 and all(e.detail == "exit code 3" for e in crashes)
    assert sum(e.kind == "restarted" for e in events) == 2
    assert sup.alive() == ["steady"]
    codes = sup.stop(timeout=5)
    assert codes["steady"] == -15  # SIGTERM ended it
    assert sup.alive() == []


def test_stubborn_child_is_killed(tmp_path):
    stubborn = ChildSpec("stubborn", [sys.executable, "-c",
                                      "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                                      "print('ready', flush=True); time.sleep(60)"], log=tmp_path / "s.log")
    sup = Supervisor([stubborn])
    sup.start()
    deadline = time.monotonic() + 10
    while "ready" not in (tmp_path / "s.log").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    t0 = time.monotonic()
    codes = sup.stop(timeout=1)
    assert codes["stubborn"] == -9
    assert time.monotonic() - t0 < 8


def test_a_give_up_names_the_last_crash_s_cause(tmp_path):
    """#18: a child that keeps crashing on the same input is given up on with the exception it died of."""
    code = "raise FloatingPointError('non-finite mix loss at update epoch 0')"
    crash = ChildSpec("trainer", [sys.executable, "-c", code], max_restarts=1, log=tmp_path / "t.log")
    sup = Supervisor([crash], backoff_s=0.05)
    sup.start()
    events = _wait(sup, {"gave_up"})
    crashed = [e.detail for e in events if e.kind == "crashed"]
    assert crashed == ["exit code 1: FloatingPointError: non-finite mix loss at update epoch 0"] * 2
    assert sup.gave_up() == {"trainer": crashed[-1]}
    assert "last crash: exit code 1: FloatingPointError" in next(e.detail for e in events if e.kind == "gave_up")


def test_the_live_view_shows_restarts_and_causes():
    """The causes show as written, markup-like text included (a traceback's `[rank0]:` is no style)."""
    from rich.console import Console

    from rftbus.apps.run.display import render
    from rftbus.apps.run.job import child_state
    from rftbus.apps.run.supervisor import Child

    dead = Child(ChildSpec("trainer", []), restarts=3, gave_up=True, causes=["exit code 1: [rank0]: IndexError: boom"])
    flaky = Child(ChildSpec("streams-0", []), restarts=1, causes=["signal 9"])
    children = {c.spec.name: child_state(c) for c in (dead, flaky)}
    console = Console(width=200, record=True)
    console.print(render(started=time.time(), statuses=[], lags={}, evals=[], events=[], children=children))
    text = console.export_text()
    assert re.search(r"trainer\s+gave up after 3 restarts: exit code 1: \[rank0\]: IndexError: boom", text), text
    assert re.search(r"streams-0\s+running \(restarts 1, last crash: signal 9\)", text), text


def test_an_optional_helper_given_up_on_is_not_a_dead_stage(tmp_path):
    """The studio is optional: its port taken, it gives up, and the run (which stops on a dead stage) goes on."""
    helper = ChildSpec("studio", [sys.executable, "-c", "import sys; sys.exit(1)"], max_restarts=1, optional=True)
    stage = ChildSpec("crasher", [sys.executable, "-c", "import sys; sys.exit(2)"], max_restarts=0)
    sup = Supervisor([helper, stage], backoff_s=0.05)
    sup.start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not all(c.gave_up for c in sup.children.values()):
        sup.poll()
        time.sleep(0.05)
    assert all(c.gave_up for c in sup.children.values())
    assert list(sup.gave_up()) == ["crasher"]
    sup.stop(timeout=5)


def test_a_kill_after_a_restart_does_not_name_the_previous_crash(tmp_path):
    """The log is shared by a child's restarts: a kill -9 (which writes nothing) of the restarted child must
    not be blamed on the error its previous run wrote."""
    import os
    import signal

    code = ("import os, sys, time\n"
            "if not os.path.exists(sys.argv[1]):\n"
            "    open(sys.argv[1], 'w').close(); raise ValueError('first run')\n"
            "print('second run', flush=True); time.sleep(60)\n")
    child = ChildSpec("w", [sys.executable, "-c", code, str(tmp_path / "flag")], log=tmp_path / "w.log")
    sup = Supervisor([child], backoff_s=0.05)
    sup.start()
    _wait(sup, {"restarted"})
    deadline = time.monotonic() + 10
    while "second run" not in (tmp_path / "w.log").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc = sup.children["w"].proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGKILL)
    events = _wait(sup, {"crashed"})
    sup.stop(timeout=5)
    assert sup.children["w"].causes[0] == "exit code 1: ValueError: first run"
    assert [e.detail for e in events if e.kind == "crashed"][-1] == "signal 9"


def test_deaths_further_apart_than_the_window_are_never_given_up_on():
    """A child dying every ~0.4 s with a budget of 1 restart per 0.2 s is restarted every time; the same child
    with a 60 s window (a crash loop) is given up on after its one restart."""
    code = "import time, sys; time.sleep(0.4); sys.exit(1)"
    spaced = ChildSpec("spaced", [sys.executable, "-c", code], max_restarts=1, restart_window_s=0.2)
    looping = ChildSpec("looping", [sys.executable, "-c", code], max_restarts=1, restart_window_s=60.0)
    sup = Supervisor([spaced, looping], backoff_s=0.01)
    sup.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and sup.children["spaced"].restarts < 4:
        sup.poll()
        time.sleep(0.02)
    sup.stop(timeout=5)
    assert sup.children["spaced"].restarts >= 4 and not sup.children["spaced"].gave_up
    assert sup.children["looping"].gave_up and sup.children["looping"].restarts == 1


def test_a_cli_one_line_error_is_a_crash_cause(tmp_path):
    """rftbus commands print `error: ...` (one line, no traceback) for what they refuse: that is the cause."""
    from rftbus.apps.run.supervisor import crash_cause

    log = tmp_path / "t.log"
    log.write_text("step 3\nerror: reading the offsets of raw[0]: Broker: Not leader for partition\n")
    assert crash_cause(log, 1) == "exit code 1: error: reading the offsets of raw[0]: Broker: Not leader for partition"


def test_a_stop_while_the_interpreter_starts_is_a_clean_stop(tmp_path):
    """SIGTERM at once after the spawn, before Python has run a line (the CI failure of stop 48: the studio died
    by the signal, -15): with SIGTERM held until `python -m rftbus` has its handler, the stop is an exit 0."""
    argv = [sys.executable, "-m", "rftbus", "--help"]
    held = ChildSpec("held", argv, log=tmp_path / "held.log", term_held=True)
    bare = ChildSpec("bare", argv, log=tmp_path / "bare.log")
    for _ in range(3):
        codes = {}
        for spec in (held, bare):
            sup = Supervisor([spec])
            sup.start()
            codes.update(sup.stop(timeout=30))
        assert codes["held"] == 0, (tmp_path / "held.log").read_text()
        assert codes["bare"] == -15  # the race the held start closes: the default action, mid-start-up


def test_a_held_start_still_stops_on_sigterm_once_running(tmp_path):
    """The held SIGTERM is let through once the handler is in: a child waiting for an unreachable broker (well
    past its start) stops at the first SIGTERM, not at the SIGKILL a still-blocked signal would come to."""
    argv = [sys.executable, "-m", "rftbus", "--state-dir", str(tmp_path / "state"), "tail", "raw", "--follow"]
    waiting = ChildSpec("waiting", argv, env={"RFTBUS_KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:1",
                                              "RFTBUS_KAFKA__WAIT_S": "120"},
                        log=tmp_path / "waiting.log", term_held=True)
    sup = Supervisor([waiting])
    sup.start()
    pid = sup.children["waiting"].proc.pid
    deadline = time.monotonic() + 60
    while not _term_handled(pid):  # past its start: its handler is in and SIGTERM no longer blocked
        assert time.monotonic() < deadline, (tmp_path / "waiting.log").read_text()
        time.sleep(0.1)
    assert sup.alive() == ["waiting"], (tmp_path / "waiting.log").read_text()
    assert sup.stop(timeout=10) == {"waiting": 0}


def test_children_start_with_the_environment_the_supervisor_was_made_with(tmp_path, monkeypatch):
    """What the run's own process sets later (the eval's CUDA_VISIBLE_DEVICES for run.eval_device) is not the
    children's: they, and their restarts, get the environment as it was."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    probe = ChildSpec("probe", [sys.executable, "-c", "import os, sys; sys.exit(7 if 'CUDA_VISIBLE_DEVICES' in os.environ "
                                "else 3)"], max_restarts=1)
    sup = Supervisor([probe], backoff_s=0.05)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # as show_only does in the run's process
    sup.start()
    events = _wait(sup, {"gave_up"})
    assert [e.detail for e in events if e.kind == "crashed"] == ["exit code 3", "exit code 3"]
