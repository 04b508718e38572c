"""The hand-written math verifier rftbus shipped before math-verify (reward "math" until #33), kept only as the
baseline of `rftbus bench verifiers`; nothing at run time imports it.

Math answer verification: the final answer (last \\boxed{...}, else the last number) against the
reference, equal numerically (relative tolerance) or symbolically (sympy: simplify(a - b) == 0).

LaTeX is normalised with a small rewrite (\\frac, \\sqrt, \\cdot, ^, braces) because sympy's own
LaTeX parser needs antlr4. Expressions are parsed with sympy's parser only after a whitelist check
(characters, length, no dunders), since parse_expr evaluates Python.
"""

from __future__ import annotations

import math
import re
from tokenize import TokenError

import sympy
from sympy.parsing.sympy_parser import (
    convert_xor, implicit_multiplication_application, parse_expr, standard_transformations,
)


_SAFE = re.compile(r"^[0-9A-Za-z_+\-*/().,\s]*$")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?|-?\.\d+")
_TRANSFORMS = standard_transformations + (convert_xor, implicit_multiplication_application)
_NAMES = {n: getattr(sympy, n) for n in ("sqrt", "pi", "E", "exp", "log", "sin", "cos", "tan", "Integer",
                                          "Float", "Rational", "Symbol", "oo", "I", "Abs")}
_NAMES["ln"] = sympy.log
_NAMES["e"] = sympy.E


def last_boxed(text: str) -> str | None:
    """Contents of the last \\boxed{...} (or \\fbox{...}), braces balanced."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth = 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def extract_answer(text: str) -> str | None:
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    m = re.search(r"answer\s*(?:is|:)\s*\$?([^\n$]+)", text, re.IGNORECASE)
    if m:
        return m.group(1).strip().rstrip(".")
    nums = _NUMBER.findall(text)
    return nums[-1] if nums else None


def _unbrace(s: str, cmd: str, nargs: int, fmt: str) -> str:
    """Rewrite \\cmd{a}{b} -> fmt.format(a, b), innermost first."""
    pat = re.compile(re.escape(cmd) + r"\{([^{}]*)\}" * nargs)
    while True:
        new = pat.sub(lambda m: fmt.format(*m.groups()), s)
        if new == s:
            return s
        s = new


def normalize(s: str) -> str:
    s = s.strip().strip("$").replace("\\!", "").replace("\\,", "").replace("\\ ", "")
    s = s.replace("\\left", "").replace("\\right", "").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = re.sub(r"\\text\{[^{}]*\}", "", s).replace("\\%", "").replace("%", "")
    s = _unbrace(s, "\\frac", 2, "(({0})/({1}))")
    s = _unbrace(s, "\\sqrt", 1, "sqrt({0})")
    s = s.replace("\\cdot", "*").replace("\\times", "*").replace("\\pi", "pi").replace("^", "**")
    s = s.replace("{", "(").replace("}", ")").replace("\\", "")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    return s.strip()


def to_sympy(s: str):
    if len(s) > 200 or "__" in s or not _SAFE.match(s):
        raise ValueError(f"not a plain math expression: {s[:40]!r}")
    return parse_expr(s, local_dict=dict(_NAMES), global_dict={"__builtins__": {}, **_NAMES},
                      transformations=_TRANSFORMS, evaluate=True)


def equivalent(pred: str, ref: str, rel_tol: float = 1e-6) -> tuple[bool, bool]:
    """(equal, parsed): equal numerically or symbolically; parsed is False if pred is not math."""
    a, b = normalize(pred), normalize(ref)
    if a == b:
        return True, True
    try:
        ea, eb = to_sympy(a), to_sympy(b)
    except (ValueError, SyntaxError, TypeError, sympy.SympifyError, TokenError):
        return False, False
    try:
        if ea.is_number and eb.is_number:
            x, y = complex(ea.evalf()), complex(eb.evalf())
            return math.isclose(abs(x - y), 0, abs_tol=rel_tol * max(1.0, abs(y))), True
        return sympy.simplify(ea - eb) == 0, True
    except (TypeError, ValueError, AttributeError):
        return False, True


def score(answer: str, response: str) -> float:
    """What reward "math" gave: 1 if the extracted answer equals the reference, else 0 (as it raised)."""
    pred = extract_answer(response)
    return float(pred is not None and equivalent(pred, last_boxed(answer) or answer)[0])
