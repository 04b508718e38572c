"""Write `data/gsm8k-mini/{train,eval}.jsonl`: small math word problems in GSM8K's format, from a seed.

Each row is `{"question": ..., "answer": "<reasoning with <<a+b=c>>c steps>\\n#### <number>"}`, the shape of
openai/gsm8k, so a taskset, its template and the `math` reward are exercised on data shaped like a team's
own (the eval rows are drawn apart from the train rows and never repeat one). Nothing is downloaded.

    python scripts/make_gsm8k_mini.py [--train 500] [--eval 100] [--seed 0] [--out data/gsm8k-mini]
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from pathlib import Path

NAMES = [("Natalia", "she"), ("Tom", "he"), ("Aisha", "she"), ("Ken", "he"), ("Maria", "she"), ("Leo", "he"),
         ("Priya", "she"), ("Omar", "he"), ("Yuki", "she"), ("Sam", "he")]
ITEMS = ["apples", "clips", "stickers", "marbles", "pencils", "cookies", "cards", "shells"]
THINGS = ["a book", "lunch", "a ticket", "a toy", "paint"]

Problem = tuple[str, list[tuple[str, int]], int]  # question, steps (expression, value), answer


def _more(r: random.Random) -> Problem:
    (n, p), it = r.choice(NAMES), r.choice(ITEMS)
    a, b = r.randint(3, 60), r.randint(2, 40)
    return (f"{n} has {a} {it}. {p.capitalize()} gets {b} more. How many {it} does {n} have now?",
            [(f"{a}+{b}", a + b)], a + b)


def _half(r: random.Random) -> Problem:
    (n, _), it = r.choice(NAMES), r.choice(ITEMS)
    a = 2 * r.randint(4, 40)
    return (f"{n} sold {a} {it} in April, and then half as many {it} in May. How many {it} did {n} sell "
            "altogether in April and May?", [(f"{a}/2", a // 2), (f"{a}+{a // 2}", a + a // 2)], a + a // 2)


def _boxes(r: random.Random) -> Problem:
    it = r.choice(ITEMS)
    a, b = r.randint(3, 24), r.randint(2, 12)
    return f"A box holds {a} {it}. How many {it} are in {b} boxes?", [(f"{a}*{b}", a * b)], a * b


def _spend(r: random.Random) -> Problem:
    (n, _), t = r.choice(NAMES), r.choice(THINGS)
    a = r.randint(20, 120)
    b = r.randint(1, a - 1)
    return f"{n} had ${a} and spent ${b} on {t}. How many dollars does {n} have left?", [(f"{a}-{b}", a - b)], a - b


def _pages(r: random.Random) -> Problem:
    n, p = r.choice(NAMES)
    a, b = r.randint(5, 40), r.randint(2, 14)
    return (f"{n} reads {a} pages a day. How many pages does {p} read in {b} days?", [(f"{a}*{b}", a * b)], a * b)


def _share(r: random.Random) -> Problem:
    it = r.choice(ITEMS)
    b, k = r.randint(2, 9), r.randint(2, 15)
    return (f"{b * k} {it} are shared equally among {b} friends. How many {it} does each friend get?",
            [(f"{b * k}/{b}", k)], k)


def _wage(r: random.Random) -> Problem:
    n, p = r.choice(NAMES)
    a, b = r.randint(8, 25), r.randint(2, 8)
    c = r.randint(1, a * b - 1)
    return (f"{n} earns ${a} an hour and works {b} hours. Then {p} spends ${c}. How many dollars does {n} have "
            "left?", [(f"{a}*{b}", a * b), (f"{a * b}-{c}", a * b - c)], a * b - c)


def _shop(r: random.Random) -> Problem:
    it = r.choice(ITEMS)
    a = r.randint(30, 200)
    b = r.randint(1, a // 2)
    c = r.randint(1, a - b - 1)
    return (f"A shop has {a} {it}. It sells {b} in the morning and {c} in the afternoon. How many {it} are left?",
            [(f"{b}+{c}", b + c), (f"{a}-{b + c}", a - b - c)], a - b - c)


KINDS: list[Callable[[random.Random], Problem]] = [_more, _half, _boxes, _spend, _pages, _share, _wage, _shop]


def row(problem: Problem) -> dict[str, str]:
    question, steps, answer = problem
    lines = [f"{expr} = <<{expr}={value}>>{value}" for expr, value in steps]
    return {"question": question, "answer": "\n".join(lines) + f"\n#### {answer}"}


def generate(n_train: int, n_eval: int, seed: int) -> tuple[list[dict], list[dict]]:
    r = random.Random(seed)
    seen: set[str] = set()
    out: list[dict] = []
    while len(out) < n_train + n_eval:
        rec = row(r.choice(KINDS)(r))
        if rec["question"] not in seen:  # eval never repeats a train question
            seen.add(rec["question"])
            out.append(rec)
    return out[:n_train], out[n_train:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", type=int, default=500)
    ap.add_argument("--eval", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("data/gsm8k-mini"))
    a = ap.parse_args()
    train, ev = generate(a.train, a.eval, a.seed)
    a.out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("eval", ev)):
        (a.out / f"{name}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
        print(f"{a.out / name}.jsonl: {len(rows)} problems")


if __name__ == "__main__":
    main()
