"""`rftbus run`'s passes over the taskset (rftbus/apps/run/passes.py): a later pass does not wait for the previous one's
acknowledgements (#46: a frozen leader held a third of every pass's records, and the trainer, which takes a pass
of demonstrations in seconds, ran dry), but only one pass is produced at a time and at most IN_FLIGHT await
Kafka at once. Publishing is replaced by a function that holds its acknowledgements until released; publishing
itself is tested on the real broker (tests/integration/test_tasks_publish.py), the whole feed in the chaos runs."""

from __future__ import annotations

import threading
import time

from rftbus.ground.config import load_config
from rftbus.ground.kafka import clients as clients_mod
from rftbus.producers.tasks import publish as publish_mod
from rftbus.producers.tasks.publish import PublishReport
from rftbus.apps.run import passes as passes_mod


def _until(cond, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_pass_waiting_for_acknowledgements_does_not_hold_the_next(monkeypatch):
    release, produced, calls = threading.Event(), threading.Event(), []

    def fake_publish(cfg, rows, *, expert=False, tasks=True, on_row=None, on_produced=None, demo_of=None,
                     producer=None):
        assert demo_of is None or demo_of is maker
        producers.append(producer)
        calls.append("expert" if expert and not tasks else "first" if tasks and expert else "tasks")
        if on_produced:
            on_produced()
        produced.set()
        if len(calls) > 1:
            release.wait(10)  # acknowledgements held by a frozen leader
        return PublishReport(published=10, expert=10)

    made, producers = [], []

    def maker(task):
        return None

    monkeypatch.setattr(publish_mod, "publish_tasks", fake_publish)
    monkeypatch.setattr(publish_mod, "expert_maker", lambda cfg: made.append(1) or maker)
    monkeypatch.setattr(clients_mod, "make_producer", lambda cfg: object())
    cfg = load_config(overrides={"run": {"expert": True, "expert_epochs": 20, "task_passes": 1}}, environ={})
    tp = passes_mod.TaskPasses(cfg, lambda: [], lambda lines: None, time.time())
    tp.start([])
    _until(lambda: tp.ready and tp.wants() == ["expert"])
    for _ in range(passes_mod.IN_FLIGHT):
        produced.clear()
        tp.tick({"expert": 0})  # fewer than one pass waiting: the next pass
        _until(produced.is_set)
        _until(lambda: not tp._producing)
    assert calls == ["first"] + ["expert"] * passes_mod.IN_FLIGHT  # none waited for the last one's acks
    assert tp.wants() == []  # IN_FLIGHT passes await Kafka: no more until one is acknowledged
    assert made == [1]  # the demonstrations' maker (a tokenizer load) made once for every later pass
    # one producer for every pass: a new one asks a bootstrap node first, which waited on a frozen one
    assert len({id(p) for p in producers}) == 1 and producers[0] is not None
    release.set()
    _until(lambda: tp.wants() == ["expert"])


def test_demonstrations_are_kept_ahead_of_the_trainer_for_its_next_seconds(monkeypatch):
    """#46: with one pass as the only mark the toy trainer took each pass as it landed, so every node failover
    (4-6 s) emptied its lane: the feed keeps what the trainer takes in RUN_AHEAD_S waiting, at its recent rate."""
    from rftbus.apps.run.feed import RUN_AHEAD_S, TakeRate

    now = [0.0]
    rate = TakeRate(clock=lambda: now[0])
    assert rate.ahead(0) == 0  # no rate seen yet
    now[0] = 1.0
    assert rate.ahead(200) == 0  # under 2 s seen
    now[0] = 4.0
    assert rate.ahead(800) == int(200 * RUN_AHEAD_S)  # 200 records/s
    now[0] = 5.0
    assert rate.ahead(100) == 0  # positions moved back (a restart from its checkpoint): measured afresh
    for t in range(6, 40):
        now[0] = float(t)
        got = rate.ahead(100 + 50 * (t - 5))
    assert got == int(50 * RUN_AHEAD_S)  # the window keeps the last WINDOW_S only

    started = []
    monkeypatch.setattr(passes_mod.TaskPasses, "_run", lambda self, fn, *args: started.append(args))
    cfg = load_config(overrides={"run": {"expert": True, "expert_epochs": 20, "task_passes": 1}}, environ={})
    tp = passes_mod.TaskPasses(cfg, lambda: [], lambda lines: None, time.time())
    tp.ready, tp.size = True, {"tasks": 600, "expert": 600}
    assert not tp.tick({"expert": 900})  # more than a pass waiting, nothing asked ahead
    assert not tp.tick({"expert": 900}, {"expert": 500})
    assert tp.tick({"expert": 900}, {"expert": 2000}) and started == [("expert", 2)]
