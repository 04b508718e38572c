"""The live-join fault (#20): answers wait for their feedback while serve and a streams worker are
killed with -9 together; the feedback comes after both are back and must still join.

What it checks beyond the final reconciliation (which already proves nothing was lost): the join state
(the held groups and the join index) outlived the worker that held it, and the restarted serve takes
the grades of answers its predecessor gave.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from rftbus.ground.config import Config
from rftbus.ground.status import read_statuses
from rftbus.ground.tasksets import get_taskset


def answer(cfg: Config, n: int, timeout_s: float = 60.0) -> list[tuple[str, float]]:
    """`n` completions through serve, not graded yet: (experience_id, the taskset's score) each."""
    taskset = get_taskset(cfg.taskset.name, **cfg.taskset.params)
    out = []
    with httpx.Client(base_url=f"http://{cfg.serve.host}:{cfg.serve.port}", timeout=timeout_s) as client:
        for task in taskset.tasks("train", n, seed=7919):
            try:
                r = client.post("/v1/completions", json={"prompt": task.prompt, "max_tokens": 6, "task_id": task.task_id})
                r.raise_for_status()
                choice = r.json()["choices"][0]
            except (httpx.HTTPError, KeyError, ValueError):
                continue  # never answered: nothing promised
            out.append((choice["experience_id"], float(taskset.score(choice.get("text", ""), task.answer or "")["reward"])))
    return out


def grade(cfg: Config, answers: list[tuple[str, float]], timeout_s: float,
          still_running: Callable[[], bool] = lambda: True) -> int:
    """Post each grade, retrying (same feedback_id) while the new serve is not answering yet."""
    done = 0
    deadline = time.monotonic() + timeout_s
    with httpx.Client(base_url=f"http://{cfg.serve.host}:{cfg.serve.port}", timeout=30.0) as client:
        for eid, reward in answers:
            body = {"experience_id": eid, "reward": reward, "feedback_id": f"chaos-live-{eid}"}
            while time.monotonic() < deadline and still_running():
                try:
                    if client.post("/v1/feedback", json=body).status_code == 202:
                        done += 1
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.5)
    return done


def joined(state_dir, exclude: set[int]) -> int:
    """Grades joined by the streams workers now running (a killed worker's counts are gone with it)."""
    return sum(int(s.get("joined") or 0) for s in read_statuses(state_dir, "streams")
               if s.get("pid") not in exclude and s.get("state") != "stopped")


def wait_joined(state_dir, exclude: set[int], at_least: int, timeout_s: float,
                still_running: Callable[[], bool] = lambda: True) -> int:
    deadline = time.monotonic() + timeout_s
    n = joined(state_dir, exclude)
    while n < at_least and time.monotonic() < deadline and still_running():
        time.sleep(0.5)
        n = joined(state_dir, exclude)
    return n


def why(state_dir, exclude: set[int]) -> str:
    """For a live join that fell short: what the running streams workers did with feedback instead."""
    keys = ("feedback_retries", "feedback_duplicate", "feedback_expired", "index_resent", "pending_feedback")
    live = [s for s in read_statuses(state_dir, "streams") if s.get("pid") not in exclude and s.get("state") != "stopped"]
    counts = {k: sum(int(s.get(k) or 0) for s in live) for k in keys}
    counts["orphan_feedback"] = sum(int((s.get("rejected_by_reason") or {}).get("orphan_feedback") or 0) for s in live)
    return ", ".join(f"{k} {v}" for k, v in counts.items() if v)
