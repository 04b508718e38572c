"""`rftbus analytics report --out DIR`: the run, as plots (PNG) and a markdown summary embedding them.

Sections: reward by weight version, staleness of trained experiences, rejection reasons over time,
throughput and latency per stage (produced -> curated -> trained), per-task pass rate, feedback
volume and agreement. A section without data says so instead of drawing empty axes. `report.json`
lists each section's data points and file, so tools (and tests) can check what was drawn.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from matplotlib.ticker import MaxNLocator

from rftbus.ground.config import Config

from . import report_sql as Q
from .backends import Backend
from .backends.base import _PLACEHOLDER
from .tally import table_counts
from rftbus.ground.figures import save_png


@dataclass
class Section:
    title: str
    points: int = 0
    png: str | None = None
    lines: list[str] = field(default_factory=list)  # markdown below the plot


class Report:
    def __init__(self, cfg: Config, backend: Backend, out: Path):
        self.cfg, self.b, self.out = cfg, backend, Path(out)
        self.db = backend.database
        self.params: dict[str, str] = {"pass": repr(float(cfg.analytics.pass_threshold)), "since": "0"}
        self.sections: dict[str, Section] = {}

    def q(self, template: str):
        text = Q.sql(template, self.db)
        used = set(_PLACEHOLDER.findall(text))
        return self.b.query(text, {k: v for k, v in self.params.items() if k in used}).dicts()

    def _save(self, fig, name: str, section: Section) -> None:
        import matplotlib.pyplot as plt

        path = self.out / f"{name}.png"
        fig.tight_layout()
        save_png(fig, path, dpi=110)
        plt.close(fig)
        section.png = path.name

    # -- sections -------------------------------------------------------------------------------------
    def reward_by_version(self) -> Section:
        s = Section("Reward by weight version")
        rows = self.q(Q.REWARD_BY_VERSION)
        s.points = len(rows)
        if not rows:
            return s
        import matplotlib.pyplot as plt

        v = [r["version"] for r in rows]
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.errorbar(v, [r["mean"] for r in rows], yerr=[r["sd"] for r in rows], marker="o", capsize=3,
                    color="tab:blue", label="mean reward ± sd")
        ax2 = ax.twinx()
        ax2.plot(v, [r["pass_rate"] for r in rows], "s--", color="tab:orange", label="pass rate")
        ax2.set_ylim(0, 1.05)
        ax.set(xlabel="behaviour policy weight version", ylabel="reward", title="Explorer reward by weight version")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax2.set_ylabel(f"pass rate (reward ≥ {self.cfg.analytics.pass_threshold:g})")
        ax.legend(loc="upper left")
        ax2.legend(loc="lower right")
        self._save(fig, "reward_by_version", s)
        s.lines = ["| version | samples | mean reward | pass rate |", "|---:|---:|---:|---:|"] + [
            f"| {r['version']} | {r['n']} | {r['mean']:.3f} | {r['pass_rate']:.3f} |" for r in rows]
        return s

    def staleness(self) -> Section:
        s = Section("Staleness of trained experiences")
        rows = self.q(Q.STALENESS)
        s.points = len(rows)
        if not rows:
            return s
        import matplotlib.pyplot as plt

        eta = self.cfg.rl.max_staleness
        total = sum(r["n"] for r in rows)
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.bar([r["staleness"] for r in rows], [r["n"] for r in rows], color="tab:green", width=0.6)
        ax.axvline(eta + 0.5, color="tab:red", linestyle="--", label=f"bound η = {eta}")
        ax.set(xlabel="staleness (trainer version − behaviour version)", ylabel="experiences trained",
               title=f"Staleness of {total} trained RL experiences")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend()
        self._save(fig, "staleness", s)
        worst = max(r["staleness"] for r in rows)
        dist = ", ".join("{}: {}".format(r["staleness"], r["n"]) for r in rows)
        verdict = "respected" if worst <= eta else "**exceeded**"
        s.lines = [f"{total} RL experiences trained; staleness {dist}. Max {worst} (bound η = {eta}: {verdict})."]
        return s

    def rejections(self, secs: float) -> Section:
        s = Section("Rejection reasons over time")
        rows = self.q(Q.REJECTIONS)
        s.points = len(rows)
        if not rows:
            s.lines = ["No rejections."]
            return s
        import matplotlib.pyplot as plt

        by: defaultdict[str, dict] = defaultdict(dict)
        for r in rows:
            by[r["reason"]][r["b"]] = r["n"]
        xs = sorted({r["b"] for r in rows})
        fig, ax = plt.subplots(figsize=(8, 4))
        bottom = np.zeros(len(xs))
        for reason, pts in sorted(by.items()):
            ys = np.array([pts.get(x, 0) for x in xs], dtype=float)
            ax.bar([x * secs for x in xs], ys, bottom=bottom, width=secs * 0.9, align="edge", label=reason)
            bottom += ys
        ax.set(xlabel="seconds since the first record", ylabel=f"rejections per {secs:g} s",
               title="Rejection reasons over time")
        ax.legend(fontsize=8)
        self._save(fig, "rejections", s)
        s.lines = ["| reason | rejections |", "|---|---:|"] + [
            f"| {k} | {sum(v.values())} |" for k, v in sorted(by.items(), key=lambda kv: -sum(kv[1].values()))]
        return s

    def throughput_latency(self, secs: float) -> tuple[Section, Section]:
        thr, lat = Section("Throughput per stage"), Section("Latency per stage")
        import matplotlib.pyplot as plt

        rows = self.q(Q.THROUGHPUT)
        thr.points = len(rows)
        if rows:
            by: defaultdict[str, dict] = defaultdict(dict)
            for r in rows:
                by[r["stage"]][r["b"]] = r["n"]
            fig, ax = plt.subplots(figsize=(8, 4))
            span = range(min(r["b"] for r in rows), max(r["b"] for r in rows) + 1)  # empty buckets are zeros
            for stage in ("produced", "curated", "trained", "rejected"):
                if stage in by:
                    ax.plot([x * secs for x in span], [by[stage].get(x, 0) / secs for x in span], marker=".",
                            label=stage)
            ax.set(xlabel="seconds since the first record", ylabel="experiences / s", title="Throughput per stage")
            ax.legend()
            self._save(fig, "throughput", thr)
            thr.lines = ["| stage | experiences | mean rate (/s, active buckets) |", "|---|---:|---:|"] + [
                f"| {k} | {sum(v.values())} | {sum(v.values()) / (len(v) * secs):.1f} |" for k, v in by.items()]
        rows = self.q(Q.LATENCY)
        lat.points = len(rows)
        if rows:
            by_stage: dict[str, list[float]] = defaultdict(list)
            for r in rows:
                by_stage[r["stage"]].append(max(0.0, r["ms"]) / 1000)
            names = list(by_stage)
            fig, ax = plt.subplots(figsize=(8, 4))
            ax.boxplot([by_stage[n] for n in names], tick_labels=names, showfliers=False, patch_artist=True,
                       boxprops={"facecolor": "tab:cyan"})
            ax.set(ylabel="seconds", title="Latency per stage (per experience)")
            self._save(fig, "latency", lat)
            lat.lines = ["| stage | experiences | p50 s | p90 s | p99 s |", "|---|---:|---:|---:|---:|"] + [
                f"| {n} | {len(v)} | " + " | ".join(f"{q:.2f}" for q in np.percentile(v, [50, 90, 99])) + " |"
                for n, v in by_stage.items()]
        return thr, lat

    def task_pass_rate(self) -> Section:
        s = Section("Per-task pass rate")
        rows = self.q(Q.TASK_PASS)
        s.points = len(rows)
        if not rows:
            return s
        import matplotlib.pyplot as plt

        rates = [r["rate"] for r in rows]
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4))
        ax.hist(rates, bins=np.linspace(0, 1, 11), color="tab:purple", edgecolor="white")
        ax.set(xlabel=f"pass rate (share of samples with reward ≥ {self.cfg.analytics.pass_threshold:g})",
               ylabel="tasks", title=f"Per-task pass rate ({len(rows)} tasks)")
        # Partial-credit rewards pass rarely early on; the mean reward per task shows progress sooner.
        ax2.hist([r["mean_reward"] for r in rows], bins=20, color="tab:pink", edgecolor="white")
        ax2.set(xlabel="mean reward of the task's samples", ylabel="tasks", title="Per-task mean reward")
        self._save(fig, "task_pass_rate", s)
        solved = sum(1 for x in rates if x > 0)
        s.lines = [f"{len(rows)} tasks rolled out; {solved} passed at least once; mean pass rate "
                   f"{np.mean(rates):.3f}.", "", "Hardest tasks (lowest pass rate, most samples first):", "",
                   "| task | samples | pass rate | prompt |", "|---|---:|---:|---|"] + [
            f"| {r['task_id'][:12]} | {r['n']} | {r['rate']:.2f} | {_md(r['prompt'])} |" for r in rows[:5]]
        return s

    def feedback(self, secs: float) -> Section:
        s = Section("Feedback volume and agreement")
        vol = self.q(Q.FEEDBACK_VOLUME)
        agree = self.q(Q.FEEDBACK_AGREEMENT)
        cons = self.q(Q.FEEDBACK_CONSENSUS)[0]
        s.points = len(vol)
        if not vol:
            s.lines = ["No feedback records."]
            return s
        import matplotlib.pyplot as plt

        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
        by: defaultdict[str, dict] = defaultdict(dict)
        for r in vol:
            by[r["kind"]][r["b"]] = r["n"]
        xs = sorted({r["b"] for r in vol})
        bottom = np.zeros(len(xs))
        for kind, pts in sorted(by.items()):
            ys = np.array([pts.get(x, 0) for x in xs], dtype=float)
            ax1.bar([x * secs for x in xs], ys, bottom=bottom, width=secs * 0.9, align="edge", label=kind)
            bottom += ys
        ax1.set(xlabel="seconds since the first record", ylabel=f"feedback per {secs:g} s", title="Feedback volume")
        ax1.legend(fontsize=8)
        if agree:
            ax2.bar([r["kind"] for r in agree], [r["rate"] for r in agree], color="tab:olive")
            for i, r in enumerate(agree):
                ax2.text(i, r["rate"], f"n={r['n']}", ha="center", va="bottom", fontsize=8)
        ax2.set(ylim=(0, 1.1), ylabel="share agreeing with the automatic reward", title="Feedback agreement")
        self._save(fig, "feedback", s)
        total = sum(r["n"] for r in vol)
        s.lines = [f"{total} feedback records ({', '.join(f'{k}: {sum(v.values())}' for k, v in sorted(by.items()))})."]
        s.lines += [f"- {r['kind']}: {r['agree']}/{r['n']} agree with the experience's reward verdict ({r['rate']:.2f})"
                    for r in agree]
        if cons["experiences"]:
            s.lines.append(f"- annotators: {cons['unanimous']}/{cons['experiences']} experiences with several verdicts "
                           "are unanimous")
        return s

    def feedback_delay(self) -> Section:
        """How late graded answers' grades came: seconds and versions, against η (the bound explorer rollouts keep)
        and rl.max_feedback_staleness (the bound of graded answers)."""
        s = Section("Feedback delay of graded answers")
        rows = self.q(Q.FEEDBACK_DELAY)
        s.points = len(rows)
        if not rows:
            s.lines = ["No graded live or human answers."]
            return s
        import matplotlib.pyplot as plt

        secs = np.array([float(r["delay_s"]) for r in rows])
        vers = np.array([int(r["delay_versions"]) for r in rows])
        eta, bound = self.cfg.rl.max_staleness, max(self.cfg.rl.max_feedback_staleness, self.cfg.rl.max_staleness)
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
        ax1.hist(secs, bins=40, color="tab:purple")
        ax1.set(xlabel="seconds from answer to its first grade", ylabel="graded answers", title="Delay in seconds")
        ax2.hist(vers, bins=np.arange(0, max(int(vers.max()), eta + 1) + 2) - 0.5, color="tab:purple")
        ax2.axvline(eta + 0.5, color="tab:red", linestyle="--", label=f"η = {eta} (rollouts)")
        ax2.set(xlabel="versions published between answer and grade", ylabel="graded answers",
                title="Delay in versions")
        ax2.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax2.legend(fontsize=8)
        self._save(fig, "feedback_delay", s)
        past = int((vers > eta).sum())
        s.lines = [f"{len(rows)} graded answers: delay p50 {np.median(secs):.1f} s, p99 {np.percentile(secs, 99):.1f} s, "
                   f"max {secs.max():.1f} s; in versions p50 {np.median(vers):g}, max {vers.max()}.",
                   f"- {past} graded past η = {eta} (kept for training up to rl.max_feedback_staleness = {bound}, "
                   f"corrected: rftbus/trainer/losses/m2.py); {int((vers > bound).sum())} past that bound"]
        return s

    # -- the whole report -----------------------------------------------------------------------------
    def build(self) -> dict:
        import matplotlib

        matplotlib.use("Agg")
        self.out.mkdir(parents=True, exist_ok=True)
        span = self.q(Q.SPAN)[0]
        n = span["n"] or 0
        t0, t1 = (span["t0"], span["t1"]) if n else (0, 0)
        secs = max(1.0, round((t1 - t0) / 1000 / 40))  # about 40 buckets over the run
        self.params.update(t0=str(t0), bucket_ms=str(int(secs * 1000)))
        counts = table_counts(self.b)
        s = self.sections
        s["reward_by_version"] = self.reward_by_version()
        s["staleness"] = self.staleness()
        s["rejections"] = self.rejections(secs)
        s["throughput"], s["latency"] = self.throughput_latency(secs)
        s["task_pass_rate"] = self.task_pass_rate()
        s["feedback"] = self.feedback(secs)
        s["feedback_delay"] = self.feedback_delay()
        bad = self.q(Q.UNDECODABLE)
        trainer = self.q(Q.TRAINER)[0]
        md = self._markdown(counts, bad, trainer, (t1 - t0) / 1000)
        (self.out / "README.md").write_text(md)
        summary = {"database": self.b.describe, "window_s": (t1 - t0) / 1000, "bucket_s": secs, "counts": counts,
                   "undecodable": bad, "sections": {k: {"title": v.title, "points": v.points, "png": v.png}
                                                    for k, v in s.items()}}
        (self.out / "report.json").write_text(json.dumps(summary, indent=1, default=str))
        return summary

    def _markdown(self, counts: dict, bad: list[dict], trainer: dict, window_s: float) -> str:
        lines = ["# rftbus analytics report", "",
                 f"Data: {self.b.describe}, database `{self.db}`; {window_s:.0f} s of records; "
                 f"{trainer['steps'] or 0} trainer steps, newest weight version {trainer['versions'] or 0}.", "",
                 "## Records per topic", "", "| topic | distinct records | messages | undecodable |",
                 "|---|---:|---:|---:|"]
        lines += [f"| {k} | {v['records']} | {v['messages']} | {v['undecodable']} |" for k, v in counts.items()]
        if bad:
            lines += ["", "Undecodable messages: " + ", ".join(f"{r['topic']}/{r['reason']}: {r['n']}" for r in bad)]
        for sec in self.sections.values():
            lines += ["", f"## {sec.title}", ""]
            if sec.png:
                lines += [f"![{sec.title}]({sec.png})", ""]
            lines += sec.lines or ["No data."]
        return "\n".join(lines) + "\n"


def _md(text: str | None) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")[:60]


def build_report(cfg: Config, out: Path) -> dict:
    from .reader import open_reader

    with open_reader(cfg) as b:
        return Report(cfg, b, out).build()
