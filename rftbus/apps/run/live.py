"""The live-traffic part of a run's summary (with `run.serve`): the live reward of the served answers
(per minute, and its PNG), the feedback join latency, and what became of the feedback (late grades included: joined past η, trained
corrected, too late).

Counts come from the streams' and the simulator's status files; experiences left ungraded past the TTL
(`no_feedback`) from the reconciliation's rejections. Empty when nothing was served.
"""

from __future__ import annotations

from pathlib import Path

from rftbus.ground.config import Config
from rftbus.apps.run.plots import plot_gate, plot_live
from rftbus.apps.simulate import live_reward
from rftbus.ground.status import read_statuses


def _join_latency(streams: list[dict]) -> dict:
    """p50/p99 of the busiest worker's window (each worker process keeps its own; one worker in the demos): of the
    statuses now and as last seen of every process during the run (a restarted worker starts an empty window)."""
    best = max((s for s in streams if s.get("feedback_join_n")), key=lambda s: s["feedback_join_n"], default=None)
    if best is None:
        return {"feedback_join_p50_s": None, "feedback_join_p99_s": None}
    return {"feedback_join_p50_s": best["feedback_join_p50_s"], "feedback_join_p99_s": best["feedback_join_p99_s"]}


def live_summary(cfg: Config, started: float, rejected_by_reason: dict[str, int], out_dir: Path,
                 evals: list[dict] | None = None, candidate_evals: list[dict] | None = None,
                 streams_seen: list[dict] | None = None, trained_past_eta: int = 0) -> tuple[dict, list[Path]]:
    if not cfg.run.serve:
        return {}, []
    statuses = read_statuses(cfg.state_dir)
    streams = [s for s in statuses if s.get("role") == "streams"]
    sims = [s for s in statuses if s.get("role") == "simulate"]
    rows = [r for r in live_reward.read_answers(cfg.state_dir) if r["t"] >= started]
    out = live_reward.summary(rows, started)
    out.update(_join_latency(streams + (streams_seen or [])))
    total = lambda key: sum(int(s.get(key) or 0) for s in streams)  # noqa: E731
    out["feedback"] = {
        "joined": total("joined"), "joined_groups": total("joined_groups"),
        "no_feedback_experiences": int(rejected_by_reason.get("no_feedback", 0)
                                       + rejected_by_reason.get("episode_no_feedback", 0)),
        # late grades: joined past η (kept under rl.max_feedback_staleness), trained under the correction, and
        # too late (their group was released at feedback_ttl_s before the grade came: feedback_expired)
        "joined_past_eta": total("graded_past_eta"), "trained_corrected": trained_past_eta,
        "stale_experiences": int(rejected_by_reason.get("stale", 0)),
        "late": total("feedback_expired"), "duplicate": total("feedback_duplicate"),
        "retries": total("feedback_retries"), "received": total("feedback_in"),
        "waiting_experiences": total("waiting_for_feedback"),
    }
    if cfg.otel.reads_traces:  # what agents' traces gave: summed over the streams workers
        traced: dict[str, int] = {}
        for s in streams:
            for k, v in (s.get("traces") or {}).items():
                traced[k] = traced.get(k, 0) + int(v)
        out["otel"] = traced
    if sims:
        keys = ("requests", "answers", "multi_turn", "ungraded", "feedback_posted", "feedback.reward",
                "feedback.rating", "feedback.thumbs", "feedback.correction", "feedback.preference",
                "feedback.duplicate", "feedback_unposted_at_stop", "request_errors", "feedback_held_for_versions")
        out["simulated"] = {k: sum(int(s.get(k) or 0) for s in sims) for k in keys}
    plots = plot_live(out["live_reward_by_minute"], out_dir, f"{cfg.taskset.name}: live reward of served answers")
    if cfg.gate.enabled:
        out["gate"] = {**gate_summary(cfg), "candidate_evals": candidate_evals or []}
        plots += plot_gate(out["live_reward_by_minute"], evals or [], out["gate"]["timeline"], started, out_dir,
                           f"{cfg.taskset.name}: served behind the promotion gate", candidate_evals or [])
    return out, plots


def gate_summary(cfg: Config) -> dict:
    """The gate's decisions of this run (topics.decisions): how many of each, what serves at the end, and each
    promote, rollback and canary in order with its reason."""
    from rftbus.consumers.gate.audit import audit_log
    from rftbus.ground.models.lineage import label
    from rftbus.ground.weights.decisions import decisions_so_far

    made = decisions_so_far(cfg, timeout_s=30, strict=False)
    counts: dict[str, int] = {}
    for d in made:
        counts[d.decision] = counts.get(d.decision, 0) + 1
    last = made[-1] if made else None
    return {"decisions": counts, "serving": label(last.serving_lineage, last.serving) if last else None,
            "candidate": label(last.lineage, last.candidate) if last and last.candidate is not None else None,
            "timeline": [{"t": d.created_at / 1000, "decision": d.decision, "version": d.version,
                          "lineage": d.lineage, "serving": d.serving, "serving_lineage": d.serving_lineage,
                          "reason": d.reason[:200]} for d in made if d.decision != "hold"],
            "audit": audit_log(cfg, timeout_s=30, decisions=made)}
