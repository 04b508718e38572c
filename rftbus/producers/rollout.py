"""Running one task's workflow within its deadline; failures become a reason, not a crash.

The deadline is the task's whole budget (`explorer.task_timeout_s`, or the task's own
`metadata["timeout_s"]`): every attempt shares it, so a task never holds its partition longer. An attempt
that raises is retried (at most `explorer.task_retries` times) with the time left; one that runs out of
time is not, since nothing is left; a prompt that does not fit the model's context is rejected at once
(`prompt_too_long`), since trying again cannot help. The deadline interrupts the workflow at the next Python bytecode boundary (SIGALRM in the main
thread, an async exception elsewhere): `generate` loops in Python per token and the sandbox waits
in Python, so both stop promptly; a single long C call finishes first.
"""

from __future__ import annotations

import ctypes
import math
import signal
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass

from rftbus.producers.engines.base import PromptTooLong
from rftbus.producers.workflows import RolloutContext, Sample, load_workflow
from rftbus.ground.schemas import Task


class TaskTimeout(BaseException):
    """Raised inside a workflow when its deadline passes (BaseException: user code can't swallow it
    with `except Exception`)."""


@contextmanager
def deadline(seconds: float):
    if threading.current_thread() is threading.main_thread():
        def on_alarm(signum, frame):
            raise TaskTimeout()
        old = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        return
    tid = threading.get_ident()
    timer = threading.Timer(seconds, lambda: ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(tid), ctypes.py_object(TaskTimeout)))
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


@dataclass
class Outcome:
    samples: list[Sample] | None
    reason: str | None = None  # task_failed | task_timeout
    detail: str = ""
    attempts: int = 1


def task_deadline_s(task: Task, default_s: float) -> float:
    """The task's own `metadata["timeout_s"]` when it is a positive number, else the explorer's."""
    try:
        own = float(task.metadata.get("timeout_s", "nan"))
    except ValueError:
        return default_s
    return own if math.isfinite(own) and own > 0 else default_s


def run_task(task: Task, n: int, ctx: RolloutContext, default_workflow: str, timeout_s: float,
             retries: int) -> Outcome:
    """Samples for `task`, or the reason it failed; at most 1 + `retries` attempts, all within the task's
    deadline (`timeout_s` unless the task sets its own)."""
    budget = task_deadline_s(task, timeout_s)
    end = time.monotonic() + budget
    reason, detail = "task_failed", ""
    attempt = 0
    for attempt in range(1, retries + 2):
        left = end - time.monotonic()
        if left <= 0:
            break
        try:
            with deadline(left):
                workflow = load_workflow(task.workflow or default_workflow)
                samples = workflow.run(task, n, ctx)
            if len(samples) != n:
                raise ValueError(f"workflow returned {len(samples)} samples, expected {n}")
            for s in samples:
                if not (len(s.response_ids) == len(s.logprobs) == len(s.loss_mask)):
                    raise ValueError("sample has response_ids/logprobs/loss_mask of different lengths")
                if s.prompt_ids != samples[0].prompt_ids:
                    raise ValueError("the samples of one group must share one prompt (a group is one prompt x n)")
            return Outcome(samples, attempts=attempt)
        except TaskTimeout:
            return Outcome(None, "task_timeout", f"attempt {attempt} ran past the task's deadline of {budget:g}s "
                                                 "(not retried: the deadline covers every attempt)", attempt)
        except PromptTooLong as e:
            return Outcome(None, "prompt_too_long", str(e), attempt)
        except Exception as e:  # noqa: BLE001 - one task's error is reported, the worker goes on
            reason = "task_failed"
            detail = f"attempt {attempt}: {type(e).__name__}: {e}\n" + "".join(traceback.format_exc(limit=-3))
    return Outcome(None, reason, detail[:4000], attempts=attempt)
