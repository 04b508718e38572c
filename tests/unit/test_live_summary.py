"""The live part of a run's summary: the feedback join latency survives a streams worker's restart (its window is
in the killed process's memory; the run keeps each process's last status)."""

from rftbus.apps.run.live import _join_latency


def test_join_latency_is_the_busiest_process_window_even_after_a_restart():
    killed = {"id": "s0", "pid": 10, "feedback_join_n": 40, "feedback_join_p50_s": 0.8, "feedback_join_p99_s": 2.5}
    restarted = {"id": "s0", "pid": 11, "feedback_join_n": 0, "feedback_join_p50_s": None, "feedback_join_p99_s": None}
    assert _join_latency([restarted]) == {"feedback_join_p50_s": None, "feedback_join_p99_s": None}
    assert _join_latency([restarted, killed]) == {"feedback_join_p50_s": 0.8, "feedback_join_p99_s": 2.5}
    later = {**restarted, "feedback_join_n": 41, "feedback_join_p50_s": 0.3, "feedback_join_p99_s": 0.9}
    assert _join_latency([later, killed])["feedback_join_p50_s"] == 0.3
