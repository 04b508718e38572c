"""Math answers checked by Hugging Face's `math-verify` (the verifier of open-r1 and TRL), reward "math".

It extracts the final answer the way graders expect (the last \\boxed{}: an answer corrected in a later box counts
as corrected; "the answer is ...", a GSM8K
"#### 72" line, else the last number) and compares it with the reference numerically and symbolically:
LaTeX fractions (\\dfrac12), sets in any order, intervals, equations (x=3 against 3), percentages and units.
A reference in bare LaTeX is read whole as math (`$...$`: "2\\sqrt{2}" is not the number 2), any other as
written, then as math, so "\\{1,2\\}", "(1,2]" and a GSM8K answer field ("... #### 72") all work.

math-verify bounds its own time with SIGALRM, which only the main thread may set and which the explorer's task
deadline (rftbus/producers/rollout.py, an ITIMER_REAL on the same clock) already uses: math-verify's `alarm(0)` would
cancel it. So the check runs in a helper process, with no alarm, that is killed and replaced if it overruns
`timeout_s`: a pathological answer costs reward 0 with `timeout: 1`, never a hung worker or a lost deadline.
"""

from __future__ import annotations

import json
import logging
import select
import subprocess
import sys
import threading

from rftbus.ground.rewards.base import RewardFn
from rftbus.ground.schemas import Task


def check(answer: str, response: str, timeout_s: int | None = None) -> dict[str, float]:
    """{"reward": 1/0, "parsed": 1/0}: whether `response`'s final answer equals `answer`. `timeout_s`:
    math-verify's own SIGALRM bound (main thread only); None: unbounded (the helper process is timed)."""
    from math_verify import parse, verify

    latex = "\\" in answer and "$" not in answer and "\\boxed" not in answer  # bare LaTeX: read it all as math
    gold = (parse(f"${answer}$", parsing_timeout=timeout_s) if latex else []) or parse(answer, parsing_timeout=timeout_s)
    if not gold and not latex:
        gold = parse(f"${answer}$", parsing_timeout=timeout_s)
    if not gold:
        raise ValueError(f"the reference answer {answer[:80]!r} is not math that math-verify can read")
    last = max(response.rfind("\\boxed{"), response.rfind("\\fbox{"))
    pred = parse(response[last:] if last > 0 else response, parsing_timeout=timeout_s)  # the final answer wins
    ok = bool(pred) and verify(gold, pred, timeout_seconds=timeout_s)
    return {"reward": 1.0 if ok else 0.0, "parsed": 1.0 if pred else 0.0}


def _serve() -> None:
    """The helper process (`python -m rftbus.ground.rewards.math_verify`): a JSON request per line on
    stdin, a JSON answer per line on stdout; no alarm (the parent times each request)."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # (its "timeout is disabled" warning: timed here)
    check("1", "\\boxed{1}")  # imports math-verify and sympy and warms their parsers before the first answer
    sys.stdout.write(json.dumps(["ready", None]) + "\n")
    sys.stdout.flush()
    for line in sys.stdin:
        answer, response = json.loads(line)
        try:
            out: list = ["ok", check(answer, response)]
        except Exception as e:  # noqa: BLE001  # handed back to the caller, which raises it there
            out = ["error", f"{type(e).__name__}: {e}"]
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


# How long a new helper may take to import math-verify and sympy (1-2 s alone; much more on a loaded machine).
# Apart from the answer's own `timeout_s`: counted against the answer, a slow start timed out every answer,
# each time-out replaced the helper and so the next answer paid the start again.
START_TIMEOUT_S = 120.0


class _Helper:
    """The helper process that runs `check` off the main thread; replaced when it overruns or dies."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        """A new helper, once it says it is ready (its imports done): answers are timed from then on."""
        proc = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, bufsize=1)
        self.proc = proc
        assert proc.stdout is not None
        try:
            ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
            line = proc.stdout.readline() if ready else None
        except BaseException:  # the task's deadline: a half-started helper is not kept
            self._kill()
            raise
        if not line or json.loads(line)[0] != "ready":
            self._kill()
            raise RuntimeError("the math-verify helper process " + (
                f"did not start within {START_TIMEOUT_S:g} s" if line is None else "exited while it started"))
        return proc

    def _kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(5)
        self.proc = None

    def __call__(self, answer: str, response: str, timeout_s: float) -> dict[str, float] | None:
        """The result, or None when it ran past `timeout_s` (the helper is then replaced)."""
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self._start()
            assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
            try:
                self.proc.stdin.write(json.dumps([answer, response]) + "\n")
                self.proc.stdin.flush()
            except BrokenPipeError:
                self._kill()
                raise RuntimeError("the math-verify helper process exited") from None
            try:
                ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
                line = self.proc.stdout.readline() if ready else None
            except BaseException:  # the task's deadline (an async exception): the answer must not go to the next one
                self._kill()
                raise
            if line is None:
                self._kill()
                return None
            if not line:
                self._kill()
                raise RuntimeError("the math-verify helper process exited")
        kind, value = json.loads(line)
        if kind == "error":
            raise ValueError(value)
        return value

    def __del__(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()


class MathVerifyReward(RewardFn):
    """reward 1 if the response's final answer equals task.answer (math-verify), else 0."""

    name = "math"

    def __init__(self, timeout_s: float = 5.0, require_boxed: bool = False):
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.timeout_s, self.require_boxed = timeout_s, require_boxed
        self._helper = _Helper()

    def __call__(self, task: Task, response: str) -> dict[str, float]:
        if task.answer is None:
            raise ValueError(f"task {task.task_id} has no reference answer")
        boxed = "\\boxed{" in response or "\\fbox{" in response
        if self.require_boxed and not boxed:
            return {"reward": 0.0, "boxed": 0.0, "parsed": 0.0, "timeout": 0.0}
        out = self._helper(task.answer, response, self.timeout_s)
        if out is None:
            return {"reward": 0.0, "boxed": float(boxed), "parsed": 0.0, "timeout": 1.0}
        return {**out, "boxed": float(boxed), "timeout": 0.0}


if __name__ == "__main__":
    _serve()
