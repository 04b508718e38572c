"""Which samples made a batch's loss non-finite, so that only they are rejected and the rest trains (#36).

The per-sample bounds (checks.py) keep NaN, huge advantages and positive logprobs out, but a finite
record can still overflow a loss. Rejecting the whole batch then cost every valid experience batched with
it (151 of them for two hostile records in the hostile sweep). Instead the batch is halved and each half's
loss probed (a forward pass, no gradient), halving the halves that are still not finite down to single
units: a sample, or a whole group where its samples form preference pairs (a DPO pair must stay
together). About 2·k·log2(n) probes for k culprits among n units; past `max_probes` the parts still in
doubt are the culprits. When every half is finite but the whole is not (the cause is the combination, as
with batch-level advantage whitening) nothing is isolated and the caller rejects the batch as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from rftbus.ground.bisect import DEFAULT_MAX_PROBES, Found, culprits

T = TypeVar("T")
__all__ = ["DEFAULT_MAX_PROBES", "Found", "culprits", "split_take", "units_of"]

Unit = tuple[int, tuple[int, ...]]  # (position in the take, sample indices trained together)


def units_of(take: Sequence[tuple[object, Sequence[int]]], groups: Sequence[object]) -> list[Unit]:
    """One unit per sample to train, except a group with preference pairs, which stays whole."""
    out: list[Unit] = []
    for pos, ((_, idx), g) in enumerate(zip(take, groups)):
        if not idx:
            continue
        if getattr(g, "metadata", {}).get("preference_pair") is not None:
            out.append((pos, tuple(idx)))
        else:
            out.extend((pos, (i,)) for i in idx)
    return out


def split_take(take: Sequence[tuple[T, list[int]]], blamed: Sequence[Unit]) -> tuple[list[tuple[T, list[int]]], dict[int, list[int]]]:
    """The take without the blamed samples (every record kept, so each is finished), and position ->
    blamed sample indices."""
    gone: dict[int, list[int]] = {}
    for pos, idx in blamed:
        gone.setdefault(pos, []).extend(idx)
    kept = [(r, [i for i in idx if i not in gone.get(pos, ())]) for pos, (r, idx) in enumerate(take)]
    return kept, {pos: sorted(v) for pos, v in gone.items()}
