"""The loop's pure decisions tested directly (#35), not only through worker processes: what streams make of a
group (`curate.decide`), the staleness rule, admission's bound and rates, and which task offsets an explorer may
commit (`AckTracker`). docs/DESIGN.md, "Versions and staleness" and "Delivery guarantees"."""

from __future__ import annotations

import pytest

from rftbus.ground.config.streams import StreamsConfig
from rftbus.producers.acks import AckTracker, DeliveryFailed
from rftbus.producers.admission import AcceptanceRate, ConsumptionRate, admission_bound
from rftbus.ground.schemas import Source
from rftbus.streams.curate import decide
from rftbus.streams.priority import PassRates
from rftbus.ground.schemas.verify import Drop
from rftbus.ground.schemas.view import GroupView, SampleView
from rftbus.ground.weights.staleness import is_stale, staleness


def view(rewards: list[float | None], versions: list[int] | None = None, source: Source = Source.explorer,
         task: str = "t1") -> GroupView:
    versions = versions or [5] * len(rewards)
    samples = [SampleView(f"e{i}", r, v, {}, 4, 4, 4, True) for i, (r, v) in enumerate(zip(rewards, versions))]
    return GroupView("g1", task, source, "ex-0", 3, samples, {}, b"")


def run(g: GroupView, latest: int = 5, eta: int = 1, drops: dict[int, Drop] | None = None, **cfg):
    return decide(g, drops or {}, latest=latest, max_staleness=eta, cfg=StreamsConfig(**cfg), pass_rates=PassRates(0.1))


# --- the staleness rule ----------------------------------------------------------------------------

def test_staleness_is_versions_behind_and_the_bound_is_inclusive():
    assert staleness(7, 5) == 2
    assert not is_stale(5, latest=6, max_staleness=1) and is_stale(5, latest=7, max_staleness=1)
    assert not is_stale(7, latest=7, max_staleness=0) and is_stale(6, latest=7, max_staleness=0)


# --- curate.decide ---------------------------------------------------------------------------------

def test_a_group_with_varied_rewards_keeps_every_sample_with_centred_advantages():
    d = run(view([1.0, 0.0, 1.0, 0.0]))
    assert d.survivors == [0, 1, 2, 3] and not d.drops
    assert sum(d.advantages.values()) == pytest.approx(0.0)
    assert d.advantages[0] > 0 > d.advantages[1]


def test_graded_answers_have_the_feedback_bound_and_rollouts_keep_eta():
    """A grade that came back hours later (live, human) is judged against rl.max_feedback_staleness, an
    explorer rollout against η; the bound is never tighter than η."""
    from rftbus.ground.config import RLConfig
    from rftbus.ground.weights.staleness import bound

    rl = RLConfig(max_staleness=1, max_feedback_staleness=100)
    assert bound(rl, Source.live) == bound(rl, "human") == 100 and bound(rl, Source.explorer) == 1
    assert bound(RLConfig(max_staleness=4, max_feedback_staleness=0), Source.live) == 4
    assert not is_stale(0, latest=60, max_staleness=bound(rl, Source.live))
    assert is_stale(0, latest=101, max_staleness=bound(rl, Source.live))


def test_stale_samples_are_dropped_by_name_and_the_rest_decided():
    d = run(view([1.0, 0.0, 1.0], versions=[2, 5, 5]), latest=5, eta=1)
    assert d.drops[0].reason == "stale" and "model_version 2" in d.drops[0].detail
    assert d.survivors == [1, 2]


def test_a_group_without_reward_variance_is_dropped_as_zero_variance():
    d = run(view([0.5, 0.5, 0.5]))
    assert not d.survivors and {x.reason for x in d.drops.values()} == {"zero_variance"}
    kept = run(view([0.5, 0.5, 0.5]), drop_zero_variance=False)
    assert kept.survivors == [0, 1, 2]


def test_samples_verify_dropped_stay_dropped_and_are_not_decided_again():
    bad = Drop("non_finite_reward", "reward nan", "verify")
    d = run(view([None, 1.0, 0.0]), drops={0: bad})
    assert d.drops[0] is bad and d.survivors == [1, 2]


def test_a_lone_graded_answer_is_compared_with_a_baseline_not_dropped():
    d = run(view([1.0], source=Source.live))
    assert d.survivors == [0] and d.advantages[0] == pytest.approx(0.5)  # no baseline yet: 0.5


def test_the_same_inputs_give_the_same_decision():
    """Pure: a replayed group after a crash is decided the same way (its outputs are recognised)."""
    a, b = run(view([1.0, 0.0, 0.25])), run(view([1.0, 0.0, 0.25]))
    assert (a.survivors, a.advantages, a.priority, a.priority_lane) == (b.survivors, b.advantages, b.priority,
                                                                        b.priority_lane)


# --- admission -------------------------------------------------------------------------------------

def test_admission_bound_shrinks_with_the_explorers_own_lag():
    assert admission_bound(max_staleness=1, groups_per_version=8, lag=0) == 16
    assert admission_bound(max_staleness=1, groups_per_version=8, lag=1) == 8
    assert admission_bound(max_staleness=1, groups_per_version=8, lag=3) == 0


def test_rates_start_at_their_prior_and_follow_the_window():
    acc = AcceptanceRate(floor=0.2, min_records=10)
    assert acc.update(0.0, 0, 0) == 1.0  # nothing measured: everything counts
    assert acc.update(1.0, 20, 5) == 0.25
    assert acc.update(2.0, 40, 5) == 0.2  # 5 of 40: below the floor, clamped
    eat = ConsumptionRate(batch_groups=8)
    assert eat.update(0.0, 0, 0) == 8.0
    assert eat.update(1.0, 4, 12) == 3.0  # 12 groups over 4 versions


# --- which task offsets an explorer may commit -------------------------------------------------------

class Msg:
    def topic(self) -> str:
        return "rft.experiences.raw"


class Err:
    def str(self) -> str:
        return "Broker: Message size too large"


def test_only_the_acknowledged_sealed_prefix_is_committable():
    t = AckTracker()
    for off in (10, 11, 12):
        t.begin(0, off)
    acks = {off: t.expect(0, off) for off in (10, 11, 12)}
    t.seal(0, 10), t.seal(0, 11), t.seal(0, 12)
    assert t.committable() == {} and t.unacked_groups() == 3
    acks[11](None, Msg())
    assert t.committable() == {}  # 10 is still out: nothing past it
    acks[10](None, Msg())
    assert t.committable() == {0: 12}  # 10 and 11 done; 12 not yet
    acks[12](None, Msg())
    assert t.committable() == {0: 13} and t.outstanding_groups() == 0


def test_an_unsealed_offset_holds_the_commit_back_and_a_failed_delivery_stops_it():
    t = AckTracker()
    t.begin(1, 5)
    t.expect(1, 5)(None, Msg())
    assert t.committable() == {}  # not sealed: more records may come for it
    t.begin(1, 6)
    with pytest.raises(DeliveryFailed, match="too large"):
        t.expect(1, 6)(Err(), Msg())
