"""The run dashboard's panels: held-out eval, live reward, reward by version, staleness, feedback delay, rejections
and throughput over time (analytics), and each consumer group's lag (Kafka itself: what is waiting now)."""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from rftbus.ground.config import Config
from rftbus.consumers.analytics import report_sql as R

from . import charts
from . import sql as S
from .data import Reader


@dataclass
class Panel:
    key: str
    title: str
    html: str  # a chart (SVG) or a table
    note: str = ""


@dataclass
class Dashboard:
    panels: list[Panel] = field(default_factory=list)
    built_ms: float = 0.0  # how long the queries took
    at: float = field(default_factory=time.time)
    since_ms: int = 0


def bucket_ms(span_ms: int) -> int:
    """About 60 points over the run, in whole 10-second steps."""
    return max(10_000, (span_ms // 60 // 10_000 + 1) * 10_000)


def _by(rows: list[dict[str, Any]], key: str, x: str, y: str, scale: float = 1.0) -> dict[str, list[tuple[float, float]]]:
    """One series per `key`, with 0 in the buckets where a series had nothing (a gap is a zero, not a slope)."""
    per: dict[str, dict[int, float]] = defaultdict(dict)
    for r in rows:
        per[str(r[key])][int(r[x])] = float(r[y])
    if not per:
        return {}
    lo, hi = min(min(v) for v in per.values()), max(max(v) for v in per.values())
    return {k: [(b * scale, v.get(b, 0.0)) for b in range(lo, hi + 1)] for k, v in per.items()}


def build(cfg: Config, r: Reader, lags: list[dict[str, Any]] | None, since_ms: int = 0) -> Dashboard:
    """`since_ms`: leave out what came before (the current run of a reused state folder); 0 = everything."""
    t_start = time.perf_counter()
    d = Dashboard(since_ms=since_ms)
    span = r.rows(S.SPAN, {"since": since_ms})
    t0 = int(span[0]["t0"] or 0) if span else 0
    t1 = int(span[0]["t1"] or 0) if span else 0
    b = bucket_ms(max(0, t1 - t0))
    minutes = b / 60_000
    params = {"t0": t0, "bucket_ms": b, "pass": repr(float(cfg.analytics.pass_threshold)), "since": since_ms}

    ev = r.rows(S.EVAL, params)
    d.panels.append(Panel("eval", "Held-out eval", charts.line_chart(
        {"eval reward": [((int(p["ms"]) - t0) / 60_000, float(p["reward"])) for p in ev]},
        "held-out eval over time", "minutes into the run", "eval reward", (0.0, 1.0)),
        _eval_note(ev)))
    d.panels.append(Panel("eval_version", "Held-out eval by version", charts.line_chart(
        {"eval reward": [(float(p["version"]), float(p["reward"])) for p in ev]},
        "held-out eval by weight version", "weight version", "eval reward", (0.0, 1.0))))

    live = r.rows(S.LIVE_REWARD, params)
    d.panels.append(Panel("live_reward", "Live reward", charts.line_chart(
        {"graded live answers": [(float(p["b"]) * minutes, float(p["mean"])) for p in live]},
        "live reward", "minutes into the run (when served)", "mean grade", (0.0, 1.0)),
        f"{sum(int(p['n']) for p in live)} graded live answers" if live else "no live traffic graded yet"))

    rv = r.report_rows(R.REWARD_BY_VERSION, params)
    d.panels.append(Panel("reward_version", "Reward by version", charts.line_chart(
        {"mean reward": [(float(p["version"]), float(p["mean"])) for p in rv],
         "pass rate": [(float(p["version"]), float(p["pass_rate"])) for p in rv]},
        "explorer reward by weight version", "behaviour weight version", "reward", (0.0, 1.0), markers=False)))

    st = r.report_rows(R.STALENESS, params)
    total = sum(int(p["n"]) for p in st)
    d.panels.append(Panel("staleness", "Staleness trained", charts.bar_chart(
        [(float(p["staleness"]), float(p["n"])) for p in st], "staleness of trained experiences",
        "versions behind at training", "experiences"),
        f"{total} RL experiences trained" if total else ""))

    d.panels.append(feedback_delay_panel(r.report_rows(R.FEEDBACK_DELAY_BY_VERSIONS, params), cfg))

    rej = r.report_rows(R.REJECTIONS, params)
    d.panels.append(Panel("rejections", "Rejections by reason", charts.line_chart(
        _by(rej, "reason", "b", "n", minutes), "rejections by reason", "minutes into the run",
        f"experiences per {b // 1000} s", markers=False), _totals(rej, "reason")))

    tp = r.report_rows(R.THROUGHPUT, params)
    d.panels.append(Panel("throughput", "Throughput per stage", charts.line_chart(
        _by(tp, "stage", "b", "n", minutes), "throughput per stage", "minutes into the run",
        f"experiences per {b // 1000} s", markers=False), _totals(tp, "stage")))

    d.panels.append(gate_panel(r.rows(S.DECISIONS, params), t0))
    d.panels.append(lag_panel(lags))
    d.built_ms = (time.perf_counter() - t_start) * 1000
    return d


def feedback_delay_panel(rows: list[dict[str, Any]], cfg: Config) -> Panel:
    """How late graded answers' grades came, in versions (bars) and seconds (the note); η marked in the note."""
    n = sum(int(p["n"]) for p in rows)
    chart = charts.bar_chart([(float(p["delay_versions"]), float(p["n"])) for p in rows],
                             "feedback delay of graded answers", "versions between answer and grade", "answers")
    if not n:
        return Panel("feedback_delay", "Feedback delay", chart, "no graded live or human answers yet")
    eta = cfg.rl.max_staleness
    past = sum(int(p["n"]) for p in rows if int(p["delay_versions"]) > eta)
    slowest = max(float(p["max_s"]) for p in rows)
    cum, p50 = 0, 0.0
    for p in rows:  # the median answer's delay in versions
        cum += int(p["n"])
        if cum * 2 >= n:
            p50 = float(p["delay_versions"])
            break
    return Panel("feedback_delay", "Feedback delay", chart,
                 f"{n} graded answers; p50 {p50:g} versions late, slowest grade {slowest:.0f} s; {past} past η = {eta} "
                 f"(trained corrected up to rl.max_feedback_staleness)")


def _eval_note(ev: list[dict[str, Any]]) -> str:
    if not ev:
        return "no eval published yet"
    best = max(ev, key=lambda p: float(p["reward"]))
    return (f"{len(ev)} evals; latest {float(ev[-1]['reward']):.3f} (v{ev[-1]['version']}), "
            f"best {float(best['reward']):.3f} (v{best['version']})")


def _totals(rows: list[dict[str, Any]], key: str) -> str:
    tot: dict[str, int] = defaultdict(int)
    for r in rows:
        tot[str(r[key])] += int(r["n"])
    return ", ".join(f"{k} {v}" for k, v in sorted(tot.items(), key=lambda kv: -kv[1]))


def gate_panel(rows: list[dict[str, Any]], t0: int) -> Panel:
    """What the promotion gate decided: each canary, promote and rollback, and the numbers it decided on."""
    from html import escape

    from rftbus.ground.models.lineage import label

    if not rows:
        return Panel("gate", "Promotion gate", '<p class="empty">no gate decisions (gate.enabled is off, or no '
                     'version published yet)</p>')
    out = []
    for r in rows:
        version = label(str(r["lineage"] or ""), int(r["version"]))
        serving = label(str(r["serving_lineage"] or ""), int(r["serving"]))
        test = (f"{float(r['mean_c']):.3f} (n={int(r['n_c'])}) vs {float(r['mean_s']):.3f} (n={int(r['n_s'])}), "
                f"z={float(r['z']):.2f} / {float(r['z_crit']):.2f}") if r["tested"] else ""
        out.append(f'<tr class="{escape(str(r["decision"]))}"><td class="num">{(int(r["ms"]) - t0) / 60_000:.1f}</td>'
                   f"<td>{escape(str(r['decision']))}</td><td>{escape(version)}</td><td>{escape(serving)}</td>"
                   f"<td>{escape(test)}</td><td>{escape(str(r['reason'])[:160])}</td></tr>")
    counts: dict[str, int] = defaultdict(int)
    for r in rows:
        counts[str(r["decision"])] += 1
    return Panel("gate", "Promotion gate",
                 "<table><thead><tr><th>min</th><th>decision</th><th>version</th><th>serving after</th>"
                 f"<th>live test</th><th>reason</th></tr></thead><tbody>{''.join(out)}</tbody></table>",
                 ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + " (the latest 30, newest first)")


def lag_panel(lags: list[dict[str, Any]] | None, waited_s: float | None = None) -> Panel:
    return Panel("lag", "Lag per stage", _lag_table(lags, waited_s))


def _lag_table(lags: list[dict[str, Any]] | None, waited_s: float | None) -> str:
    from html import escape

    if lags is None:
        within = f" within {waited_s:g} s" if waited_s else ""
        return f'<p class="empty">Kafka did not answer{within} (is the broker up?): lags unknown</p>'
    if not lags:
        return '<p class="empty">no consumer groups yet</p>'
    rows = []
    for g in lags:
        topics: dict[str, int] = defaultdict(int)
        for tp, n in g["partitions"].items():
            topics[tp.rsplit("[", 1)[0]] += n
        per = ", ".join(f"{escape(t)} {n}" for t, n in sorted(topics.items()))
        rows.append(f"<tr><td>{escape(g['group_id'])}</td><td>{escape(g['state'])}</td>"
                    f"<td class=\"num\">{g['lag']}</td><td>{per}</td></tr>")
    return ("<table><thead><tr><th>consumer group</th><th>state</th><th>lag</th><th>by topic</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")
