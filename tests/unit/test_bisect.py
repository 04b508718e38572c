"""Bisecting a non-finite loss to the samples that caused it (rftbus/trainer/bisect.py): pure logic, no model."""

from __future__ import annotations

import math

from rftbus.trainer.bisect import culprits, split_take, units_of


def probe_of(values):
    """A loss that is the sum of the units' values (an overflow is inf)."""
    calls = []

    def finite(units) -> bool:
        calls.append(len(units))
        return math.isfinite(sum(values[u] for u in units))
    return finite, calls


def test_one_culprit_among_many_is_found_in_logarithmic_probes():
    values = [1.0] * 64
    values[37] = math.inf
    finite, calls = probe_of(values)
    found = culprits(list(range(64)), finite)
    assert found.culprits == [37] and found.isolated
    assert found.probes == len(calls) <= 1 + 2 * 6


def test_several_culprits_are_all_found_and_nothing_else():
    values = [1.0] * 20
    for i in (0, 7, 19):
        values[i] = math.nan
    found = culprits(list(range(20)), probe_of(values)[0])
    assert sorted(found.culprits) == [0, 7, 19]


def test_a_finite_part_blames_nothing():
    found = culprits([0, 1, 2], probe_of([1.0, 2.0, 3.0])[0])
    assert found.culprits == [] and found.isolated


def test_a_combination_that_overflows_only_together_is_not_isolated():
    values = [1e308, 1e308, 1e308, 1e308]  # each half's sum is inf too: keeps halving
    assert sorted(culprits(list(range(4)), probe_of(values)[0]).culprits) == [0, 1, 2, 3]
    big = [1e308, -1e308, 1e308, 1e308]  # halves: 0 and 2e308 (inf) -> [2, 3] then each alone is finite
    found = culprits(list(range(4)), probe_of(big)[0])
    assert sorted(found.culprits) == [2, 3]
    together = [1.7e308, 1.7e308]  # each alone is finite, only the two together overflow
    assert not culprits([0, 1], probe_of(together)[0]).isolated


def test_the_probe_budget_bounds_the_work_and_blames_what_is_still_in_doubt():
    values = [math.inf] * 256
    finite, calls = probe_of(values)
    found = culprits(list(range(256)), finite, max_probes=9)
    assert len(calls) <= 9 and sorted(found.culprits) == list(range(256))


class G:
    def __init__(self, pairs: bool = False):
        self.metadata = {"preference_pair": "p0"} if pairs else {}


def test_units_keep_preference_pairs_together_and_split_takes_keep_every_record():
    take = [("a", [0, 1, 2]), ("b", [0, 1]), ("c", []), ("d", [3])]
    units = units_of(take, [G(), G(pairs=True), G(), G()])
    assert units == [(0, (0,)), (0, (1,)), (0, (2,)), (1, (0, 1)), (3, (3,))]
    kept, gone = split_take(take, [(0, (1,)), (3, (3,))])
    assert kept == [("a", [0, 2]), ("b", [0, 1]), ("c", []), ("d", [])] and gone == {0: [1], 3: [3]}
