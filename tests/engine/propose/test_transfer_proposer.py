"""engine.propose.proposers.TransferProposer: winners carried over from the nearest other
problems (the same shape in the other layout first), in this problem's layout, valid and untried
here; seeded from a database's earlier campaigns (``engine optimize --proposers transfer``)."""

from __future__ import annotations

import random

import pytest

from engine.campaign.loop import CampaignSettings
from engine.campaign.storage import SqliteStorage
from engine.codegen.library import library
from engine.outcomes import CandidateRecord
from engine.problem import Layout, Problem
from engine.propose.mix import make_proposers
from engine.propose.proposers import TransferProposer, carried_over, problem_distance
from engine.propose.space import SearchSpace

SHAPE_NN = Problem.parse("128x128x16384", "nn")
SHAPE_TN = Problem.parse("128x128x16384", "tn")
NEAR = Problem.parse("128x128x8192", "nn")  # one octave of K away
FAR = Problem.parse("8192x8192x1024", "nn")


def sm80(layout: Layout, splits: int, tile_m: int = 64):
    return next(c for c in library("sm80", layout) if c.splits == splits and c.tile_m == tile_m)


def measured(config, reward: float, **fields) -> CandidateRecord:
    return CandidateRecord(
        config.name, config.FAMILY, config.knobs(), "evolve", fields.pop("status", "ok"), reward,
        **fields,
    )  # fmt: skip


def space(problem: Problem) -> SearchSpace:
    return SearchSpace.library(problem, families=["sm80", "sm90"])


def propose(proposer, problem, n=4, exclude=()) -> list:
    return proposer.propose(
        problem, space(problem), n, history=[], exclude=set(exclude), rng=random.Random(0)
    )


def test_the_other_layout_of_the_same_shape_is_nearer_than_any_other_shape():
    assert problem_distance(SHAPE_NN, SHAPE_TN) < problem_distance(SHAPE_NN, NEAR)
    assert problem_distance(SHAPE_NN, NEAR) == 1.0
    assert problem_distance(SHAPE_NN, NEAR) < problem_distance(SHAPE_NN, FAR)
    assert problem_distance(SHAPE_NN, SHAPE_NN) == 0.0


def test_it_carries_the_other_layouts_winner_over_in_this_layout():
    winner = sm80(Layout.TN, 16)
    proposer = TransferProposer([(SHAPE_TN, measured(winner, -0.3))])
    [proposal] = propose(proposer, SHAPE_NN, n=1)
    assert proposal.proposer == "transfer"
    assert proposal.config.layout is Layout.NN
    assert proposal.config.knobs() == {**winner.knobs(), "layout": "nn"}
    assert proposal.meta == {"carried_from": SHAPE_TN.key}  # stored with its record


def test_the_nearest_problems_best_come_before_anyones_second_best():
    near_best, near_second = sm80(Layout.NN, 16), sm80(Layout.NN, 8)
    far_best = sm80(Layout.NN, 32)
    known = [
        (FAR, measured(far_best, 0.2)),
        (NEAR, measured(near_second, -0.5)),
        (NEAR, measured(near_best, -0.1)),
    ]
    got = [p.config.name for p in propose(TransferProposer(known), SHAPE_NN, n=3)]
    assert got == [near_best.name, far_best.name, near_second.name]


def test_it_proposes_only_what_is_valid_and_untried_here():
    tried, fresh = sm80(Layout.NN, 16), sm80(Layout.NN, 8)
    known = [(NEAR, measured(tried, 0.1)), (NEAR, measured(fresh, 0.0))]
    got = propose(TransferProposer(known), SHAPE_NN, n=4, exclude={tried.name})
    assert [p.config.name for p in got] == [fresh.name]
    for proposal in got:
        assert proposal.config.name in space(SHAPE_NN)


def test_failures_and_model_sources_are_not_carried_over():
    a, b = sm80(Layout.NN, 16), sm80(Layout.NN, 8)
    known = [
        (NEAR, measured(a, 0.5, status="rejected")),
        (NEAR, measured(b, 0.5, source="__global__ void k() {}")),
    ]
    assert propose(TransferProposer(known), SHAPE_NN) == []


def test_this_problems_winners_from_an_earlier_campaign_come_first():
    earlier, other = sm80(Layout.NN, 32), sm80(Layout.TN, 16)
    known = [(SHAPE_TN, measured(other, 0.9)), (SHAPE_NN, measured(earlier, -0.2))]
    got = [p.config.name for p in propose(TransferProposer(known), SHAPE_NN, n=2)]
    assert got == [earlier.name, sm80(Layout.NN, 16).name]
    # what this campaign tried already is not proposed again
    again = propose(TransferProposer(known), SHAPE_NN, n=2, exclude={earlier.name})
    assert [p.config.name for p in again] == [sm80(Layout.NN, 16).name]


def test_it_learns_every_result_it_observes():
    proposer = TransferProposer()
    assert propose(proposer, SHAPE_NN) == []  # nothing known: its share goes to the others
    winner = sm80(Layout.TN, 16)
    proposer.observe(SHAPE_TN, space(SHAPE_TN), [measured(winner, 0.1)])
    assert [p.config.knobs()["splits"] for p in propose(proposer, SHAPE_NN)] == [16]


def test_a_config_from_another_engine_version_is_skipped():
    assert carried_over("sm80", {"no_such_knob": 1}, SHAPE_NN) is None
    assert carried_over("sm70", {}, SHAPE_NN) is None


def test_a_database_seeds_it_with_every_campaigns_measured_candidates(tmp_path):
    storage = SqliteStorage(tmp_path / "campaigns.sqlite")
    storage.open_campaign("tn-first", CampaignSettings(name="tn-first").to_dict())
    storage.add_problem("tn-first", SHAPE_TN)
    winner, loser = sm80(Layout.TN, 16), sm80(Layout.TN, 4)
    storage.record(
        "tn-first",
        SHAPE_TN.key,
        [measured(winner, 0.1), measured(loser, -1.0, status="rejected")],
    )
    known = storage.measured()
    assert [(p.key, r.name) for p, r in known] == [(SHAPE_TN.key, winner.name)]
    proposers = make_proposers({"transfer": 1.0}, known=known)
    [proposal] = propose(proposers["transfer"], SHAPE_NN, n=4)
    assert proposal.config.knobs()["splits"] == 16


@pytest.mark.parametrize("n", [0, 1])
def test_it_never_proposes_more_than_asked(n):
    known = [(NEAR, measured(sm80(Layout.NN, s), -s / 10)) for s in (8, 16, 32)]
    assert len(propose(TransferProposer(known), SHAPE_NN, n=n)) == n
