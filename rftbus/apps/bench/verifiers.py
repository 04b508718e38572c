"""`rftbus bench verifiers`: answer pairs scored by the old hand-written verifier and by math-verify (reward
"math"), each against the value a person wrote by hand. Prints the table, the agreement per category and
overall, writes a PNG (`--plot`) and JSON (`--json`)."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path

import typer
from rftbus.ground.figures import save_png

GSM8K_FIELD = ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips "
               "altogether in April and May.\n#### 72")

# (category, response, reference answer, correct?): the last value written by hand, by reading the pair
CASES: list[tuple[str, str, str, bool]] = [
    ("gsm8k", "She has 5+3=8 apples.\n#### 8", "8", True),
    ("gsm8k", "Natalia sold 24 clips in May, so 48+24=72 in all.\n#### 72", "72", True),
    ("gsm8k", "\\boxed{72}", GSM8K_FIELD, True),
    ("gsm8k", "The total is 1,234 dollars.\n#### 1,234", "1234", True),
    ("gsm8k", "48 + 22 = 70\n#### 70", "72", False),
    ("gsm8k", "The answer is 72. Check: 70 + 2 = 72", "72", True),
    ("gsm8k", "The answer is 72. Check: 36 * 2", "72", True),
    ("gsm8k", "It costs $18.50 in total.\n#### 18.5", "18.50", True),
    ("boxed", "\\boxed{42}", "42", True),
    ("boxed", "First \\boxed{3}, corrected: \\boxed{4}", "4", True),
    ("boxed", "\\boxed{41}", "42", False),
    ("boxed", "$\\boxed{-7}$", "-7", True),
    ("boxed", "\\boxed{2\\sqrt{2}}", "\\sqrt{8}", True),
    ("boxed", "\\boxed{x^2-1}", "(x-1)(x+1)", True),
    ("fractions", "\\boxed{\\dfrac12}", "\\frac{1}{2}", True),
    ("fractions", "\\boxed{\\frac13}", "1/3", True),
    ("fractions", "\\boxed{0.5}", "\\frac{1}{2}", True),
    ("fractions", "\\boxed{\\frac{6}{8}}", "\\frac{3}{4}", True),
    ("fractions", "\\boxed{\\tfrac{2}{3}}", "2/3", True),
    ("fractions", "\\boxed{\\frac{1}{3}}", "0.33", False),
    ("fractions", "\\boxed{\\frac{3}{2}}", "\\frac{2}{3}", False),
    ("sets", "\\boxed{\\{2,1\\}}", "\\{1,2\\}", True),
    ("sets", "\\boxed{\\{1,2,3\\}}", "\\{1,2\\}", False),
    ("sets", "The roots are \\boxed{-2, 2}", "2, -2", True),
    ("sets", "\\boxed{\\{1, 3\\}}", "\\{1,2\\}", False),
    ("intervals", "\\boxed{(1,2]}", "(1,2]", True),
    ("intervals", "\\boxed{[1,2]}", "(1,2]", False),
    ("intervals", "\\boxed{(-\\infty, 3)}", "(-\\infty,3)", True),
    ("intervals", "so $x \\in [0, 1)$, that is \\boxed{[0,1)}", "[0,1)", True),
    ("equations", "$x=3$", "3", True),
    ("equations", "\\boxed{x = 3}", "3", True),
    ("equations", "\\boxed{y=2x+1}", "y = 1 + 2x", True),
    ("equations", "\\boxed{x=4}", "3", False),
    ("units", "\\boxed{5\\text{ cm}}", "5", True),
    ("units", "The area is \\boxed{12 \\text{ m}^2}", "12", True),
    ("units", "\\boxed{25\\%}", "25", True),
    ("units", "\\boxed{90^\\circ}", "90", True),
    ("units", "\\boxed{\\$18.50}", "18.5", True),
    ("numbers", "\\boxed{1000}", "1,000", True),
    ("numbers", "\\boxed{3.0}", "3", True),
    ("numbers", "\\boxed{2\\pi}", "6.283185307", True),
    ("numbers", "\\boxed{-0}", "0", True),
    ("malformed", "no answer here", "3", False),
    ("malformed", "\\boxed{", "3", False),
    ("malformed", "\\boxed{__import__('os').system('true')}", "0", False),
    ("malformed", "", "1", False),
    ("malformed", "\\boxed{\\frac{1}{0}}", "1", False),
    ("malformed", "\\boxed{\\frac{1}{2}", "\\frac{1}{2}", False),
]


def _old(answer: str, response: str) -> str:
    from rftbus.apps.bench.old_math_answer import score
    try:
        return "1" if score(answer, response) else "0"
    except Exception as e:  # noqa: BLE001  # what the old reward did: the task was rejected task_failed
        return f"error: {type(e).__name__}"


def _new(fn, answer: str, response: str) -> str:
    from rftbus.ground.schemas import Task
    try:
        return "1" if fn(Task(taskset="bench", prompt="?", answer=answer), response)["reward"] else "0"
    except Exception as e:  # noqa: BLE001
        return f"error: {type(e).__name__}"


def run_cases() -> list[dict]:
    from rftbus.ground.rewards.math_verify import MathVerifyReward

    fn = MathVerifyReward()
    rows = []
    for cat, response, answer, want in CASES:
        t0 = time.perf_counter()
        new = _new(fn, answer, response)
        ms = (time.perf_counter() - t0) * 1000
        old = _old(answer, response)
        rows.append({"category": cat, "response": response, "answer": answer, "expected": int(want), "old": old,
                     "math_verify": new, "math_verify_ms": round(ms, 2)})
    return rows


def _right(got: str, want: int) -> bool:
    return got == str(want)


def summary(rows: list[dict]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = defaultdict(lambda: {"n": 0, "old": 0, "math_verify": 0})
    for r in rows:
        for key in (r["category"], "all"):
            out[key]["n"] += 1
            out[key]["old"] += _right(r["old"], r["expected"])
            out[key]["math_verify"] += _right(r["math_verify"], r["expected"])
    return dict(out)


def plot(sums: dict[str, dict[str, int]], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cats = [c for c in sums if c != "all"] + ["all"]
    x = range(len(cats))
    fig, ax = plt.subplots(figsize=(9, 4.0))
    for k, (key, label) in enumerate((("old", "old hand-written verifier"), ("math_verify", "math-verify"))):
        ax.bar([i + (k - 0.5) * 0.4 for i in x], [sums[c][key] / sums[c]["n"] for c in cats], width=0.4, label=label)
    ax.set_xticks(list(x), [f"{c}\n({sums[c]['n']})" for c in cats])
    ax.set_ylabel("agrees with the hand-written value")
    ax.set_ylim(0, 1.05)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    ax.set_title(f"{sums['all']['n']} answer pairs: verdicts against a person's")
    fig.tight_layout()
    save_png(fig, path, dpi=110)


def verifiers(
    json_out: bool = typer.Option(False, "--json", help="print one JSON line with every row and the sums"),
    save: Path | None = typer.Option(None, help="write the rows and sums as JSON here"),
    plot_path: Path | None = typer.Option(None, "--plot", help="write the agreement per category as a PNG"),
) -> None:
    """Score every answer pair with the old verifier and math-verify, against the hand-written verdict."""
    rows = run_cases()
    sums = summary(rows)
    data = {"rows": rows, "sums": sums}
    if save:
        save.write_text(json.dumps(data, indent=1) + "\n")
    if plot_path:
        plot(sums, plot_path)
    if json_out:
        print(json.dumps(data))
        return
    print("| # | category | response | reference | right | old | math-verify |\n|---|---|---|---|---|---|---|")
    def cell(s: str) -> str:
        return "`" + s.replace("\n", "⏎").replace("|", "\\|")[:60] + "`" if s else "(empty)"

    for i, r in enumerate(rows, 1):
        old, new = (r[k] + ("" if _right(r[k], r["expected"]) else " ✗") for k in ("old", "math_verify"))
        print(f"| {i} | {r['category']} | {cell(r['response'])} | {cell(r['answer'])} | {r['expected']} | {old} | {new} |")
    print()
    for cat, s in sorted(sums.items(), key=lambda kv: kv[0] == "all"):
        print(f"{cat:10s} {s['n']:3d} pairs: old {s['old']}/{s['n']}, math-verify {s['math_verify']}/{s['n']}")
