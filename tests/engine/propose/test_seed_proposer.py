"""engine.propose.seed: each searched family's prior picks in a shape's first round (Inductor's
configs for Triton, cuBLASLt's nearest for CUTLASS), and a floor of each family a round until it
is measured on the shape."""

from __future__ import annotations

import random

from engine.campaign.round import Round, RoundSettings
from engine.codegen.library import longk_prior
from engine.codegen.triton import (
    inductor_configs,
    inductor_k_splits,
    inductor_split_configs,
)
from engine.outcomes import CandidateRecord, CandidateStatus
from engine.problem import Layout, Problem
from engine.propose import mix
from engine.propose.mirror import MirrorProposer
from engine.propose.policy import Policy
from engine.propose.proposers import Proposal
from engine.propose.seed import (
    FLOOR_TRIES,
    SeedProposer,
    load_recorded_kernels,
    recorded_kernels_document,
    with_family_floor,
)
from engine.propose.space import SearchSpace, families_for_arch

SMALL = Problem(128, 256, 128, Layout.NN)


def lt_kernel(tile_m=64, tile_n=128, tile_k=64, cluster=(1, 1), splitk=1) -> dict:
    return {
        "tile_m": tile_m,
        "tile_n": tile_n,
        "tile_k": tile_k,
        "stages": None,
        "cluster_m": cluster[0],
        "cluster_n": cluster[1],
        "splitk": splitk,
        "label": f"algo66 {tile_m}x{tile_n}x{tile_k}",
    }


def library_space(problem: Problem = SMALL, families=("sm90", "triton")) -> SearchSpace:
    return SearchSpace.library(problem, families=families)


def record(config, status=CandidateStatus.OK, reward=0.0) -> CandidateRecord:
    return CandidateRecord(
        name=config.name,
        family=config.FAMILY,
        knobs=config.knobs(),
        proposer="random",
        status=status,
        reward=reward,
    )


def seed_propose(seed: SeedProposer, space: SearchSpace, n: int, *, history=(), exclude=()):
    return seed.propose(
        space.problem, space, n, history=list(history), exclude=set(exclude), rng=random.Random(0)
    )


def test_the_first_round_offers_inductors_configs_for_triton_and_mirrors_for_cutlass():
    space = library_space()
    kernel = lt_kernel()
    seed = SeedProposer({SMALL.key: [kernel]}, recorded={})
    proposals = seed_propose(seed, space, 6)
    triton = [p.config.name for p in proposals if p.config.FAMILY == "triton"]
    sm90 = [p.config.name for p in proposals if p.config.FAMILY == "sm90"]
    inductor = [c.name for c in inductor_configs(SMALL) if c.name in space]
    mirrored = [
        name
        for _, _, name, _ in MirrorProposer({SMALL.key: [kernel]}).ranking(SMALL, space)
        if space.config(name).FAMILY == "sm90"
    ]
    assert triton == inductor[:3]  # no policy: Inductor's own order
    assert sm90 == mirrored[:3]
    assert [p.config.FAMILY for p in proposals[:2]] == ["sm90", "triton"]  # families take turns
    assert all(p.proposer == "seed" for p in proposals)


def test_inductors_configs_keep_their_k_mask_free_variant_where_k_divides():
    space = library_space(families=("triton",))
    picks = seed_propose(SeedProposer(recorded={}), space, 40)
    assert picks
    assert all(p.config.even_k for p in picks)  # K = 128: every Inductor K tile divides it


def test_after_the_first_round_the_seed_proposes_nothing():
    space = library_space()
    seed = SeedProposer({SMALL.key: [lt_kernel()]}, recorded={})
    first = space.configs[0]
    assert seed_propose(seed, space, 4, history=[record(first)], exclude={first.name}) == []
    assert seed_propose(seed, space, 4, exclude={first.name}) == []  # round one in flight


def test_long_k_shapes_start_from_inductors_decompose_k_as_in_kernel_split_k():
    problem = Problem(128, 128, 16384, Layout.NN)
    assert inductor_k_splits(problem) == [2, 4, 8, 16, 32, 64, 128]
    assert inductor_k_splits(Problem(512, 256, 8192, Layout.NN)) == []  # K < 32·M
    space = SearchSpace.from_configs(
        problem, [*inductor_configs(problem), *inductor_split_configs(problem)]
    )
    picks = seed_propose(SeedProposer(recorded={}), space, 3)
    assert [p.config.splits for p in picks] == [2, 2, 2]  # K ≥ 64·max(M, N): splits first
    assert {c.splits for c in inductor_split_configs(problem)} == {2, 4, 8, 16}


def test_without_the_problems_own_kernels_it_copies_the_nearest_recorded_problems():
    space = library_space(families=("sm90",))
    near, far = lt_kernel(64, 128), lt_kernel(128, 256, cluster=(2, 1))
    recorded = {"128x256x256_nn": [near], "8192x8192x8192_nn": [far]}
    picks = seed_propose(SeedProposer(recorded=recorded), space, 1)
    expected = MirrorProposer({SMALL.key: [near]}).ranking(SMALL, space)[0][2]
    assert [p.config.name for p in picks] == [expected]


def test_kernels_a_gpu_step_measured_replace_a_nearby_problems():
    space = library_space(families=("sm90",))
    seed = SeedProposer(recorded={"128x256x256_nn": [lt_kernel(64, 128)]})
    seed_propose(seed, space, 1)
    measured = lt_kernel(128, 128, cluster=(1, 2))
    seed.learn_cublaslt_kernels(SMALL, {"cublaslt_autotune_nn": {"autotune": measured}})
    assert seed.mirror.targets[SMALL.key] == [measured]  # the borrowed one is gone


def test_a_policy_ranks_a_familys_picks():
    space = library_space(families=("triton",))
    inductor = [c for c in inductor_configs(SMALL) if c.name in space]
    favourite = inductor[-1]
    policy = Policy(["sm90", "sm80", "triton"], seed=0)
    rewards = {c.name: (1.0 if c is favourite else -0.5) for c in inductor}
    policy.pretrain([(SMALL, SearchSpace.from_configs(SMALL, inductor), rewards)], steps=80)
    picks = seed_propose(SeedProposer(recorded={}, policy=policy), space, 1)
    assert picks[0].config.name == favourite.name


def test_a_policy_only_breaks_ties_among_a_cutlass_familys_nearest_mirrors():
    """A policy trained where 64-wide tiles won must not trade cuBLASLt's 128×256 tile on a
    large shape for its favourite (the holdout's large shapes got a 16×64 tile this way)."""
    problem = Problem(2048, 2048, 16384, Layout.NN)
    space = library_space(problem, families=("sm90",))
    kernel = lt_kernel(128, 256, cluster=(2, 1))
    ranking = MirrorProposer({problem.key: [kernel]}).ranking(problem, space)
    nearest = [name for distance, _, name, _ in ranking if distance == ranking[0][0]]
    far = [space.config(name) for distance, _, name, _ in ranking if distance > ranking[0][0]]
    favourite = min(far, key=lambda c: c.tile_m * c.tile_n)
    policy = Policy(["sm90", "sm80", "triton"], seed=0)
    rewards = {c.name: (1.0 if c is favourite else -0.5) for c in space.configs}
    policy.pretrain([(problem, space, rewards)], steps=80)
    seed = SeedProposer({problem.key: [kernel]}, recorded={}, policy=policy)
    picks = seed_propose(seed, space, len(nearest))
    assert favourite.name not in nearest
    assert sorted(p.config.name for p in picks) == sorted(nearest)
    assert seed.priors(problem, space, "sm90")[0].name in nearest


def test_recorded_kernels_round_trip_with_the_fields_the_mirror_reads(tmp_path):
    kernel = {**lt_kernel(), "raw": {"tile_id": 13}, "algo_id": 66}
    document = recorded_kernels_document({"64x64x64_nn": [kernel] * 5}, sources=["a.json"])
    path = tmp_path / "kernels.json"
    path.write_text(__import__("json").dumps(document))
    loaded = load_recorded_kernels(path)
    assert loaded == {"64x64x64_nn": [lt_kernel()] * 3}
    assert load_recorded_kernels(tmp_path / "missing.json") == {}


# -- the family floor ----------------------------------------------------------------------------
def sm90_batch(space: SearchSpace, n: int) -> list[Proposal]:
    configs = [c for c in space.configs if c.FAMILY == "sm90"][:n]
    return [Proposal(c, "rl") for c in configs]


def floor(batch, space, n, history=(), seed=None) -> list[Proposal]:
    return with_family_floor(
        batch,
        space.problem,
        space,
        n,
        history=list(history),
        exclude={p.config.name for p in batch} | {r.name for r in history},
        rng=random.Random(0),
        seed=seed or SeedProposer(recorded={}),
    )


def test_an_unmeasured_family_takes_the_last_slot_of_a_family_with_more():
    space = library_space()
    batch = sm90_batch(space, 4)
    out = floor(batch, space, 4)
    assert [p.config.name for p in out[:3]] == [p.config.name for p in batch[:3]]
    assert out[3].config.FAMILY == "triton"
    assert out[3].config.name == next(c.name for c in inductor_configs(SMALL) if c.name in space)
    assert out[3].proposer == "seed"


def test_a_short_batch_is_filled_rather_than_cut():
    space = library_space()
    out = floor(sm90_batch(space, 2), space, 4)
    assert [p.config.FAMILY for p in out] == ["sm90", "sm90", "triton"]


def test_a_measured_family_has_no_floor():
    space = library_space()
    triton = next(c for c in space.configs if c.FAMILY == "triton")
    batch = sm90_batch(space, 4)
    out = floor(batch, space, 4, history=[record(triton)])
    assert out == batch


def test_a_family_that_keeps_failing_is_left_to_the_search():
    space = library_space()
    failed = [c for c in space.configs if c.FAMILY == "triton"][:FLOOR_TRIES]
    history = [record(c, CandidateStatus.COMPILE_ERROR, -2.0) for c in failed]
    batch = sm90_batch(space, 4)
    assert floor(batch, space, 4, history=history) == batch
    fewer = floor(batch, space, 4, history=history[:-1])
    assert fewer[-1].config.FAMILY == "triton"


def test_a_round_of_the_policy_alone_still_tries_every_family():
    space = library_space()
    policy = Policy(["sm90", "sm80", "triton"], seed=0)
    sm90 = [c for c in space.configs if c.FAMILY == "sm90"]
    policy.pretrain([(SMALL, SearchSpace.from_configs(SMALL, sm90), {sm90[0].name: 1.0})])
    settings = RoundSettings(budget=16, batch_size=4, mix={"rl": 1.0})
    round_ = Round(settings, mix.make_proposers({"rl": 1.0}, policy=policy))
    batch = round_.propose(SMALL, space, [], round_no=0, exclude=set())
    assert {p.config.FAMILY for p in batch} == {"sm90", "triton"}
    assert len(batch) == 4
    measured = [record(p.config) for p in batch]
    later = round_.propose(SMALL, space, measured, round_no=1, exclude={r.name for r in measured})
    assert all(p.proposer == "rl" for p in later)


# -- the default mix -----------------------------------------------------------------------------
def test_the_default_mix_starts_with_the_seed_proposer():
    from engine.campaign import round as round_module

    assert "seed" in mix.DEFAULT_MIX
    assert "seed" in mix.PROPOSER_NAMES
    assert round_module.DEFAULT_MIX is mix.DEFAULT_MIX
    assert RoundSettings(budget=8, batch_size=4).mix == mix.DEFAULT_MIX
    policy = Policy(["sm90", "sm80", "triton"])
    proposers = mix.make_proposers(mix.DEFAULT_MIX, policy=policy)
    assert isinstance(proposers["seed"], SeedProposer)
    assert proposers["seed"].policy is policy


def test_the_shipped_recorded_kernels_cover_the_grid():
    recorded = load_recorded_kernels()
    assert len(recorded) >= 80
    assert all(isinstance(k.get("tile_m"), int) for ks in recorded.values() for k in ks)


def test_a_default_mix_round_one_reaches_every_family_of_a_hopper_library_space():
    space = library_space(families=("sm90", "sm80", "triton"))
    policy = Policy(["sm90", "sm80", "triton"], seed=0)
    settings = RoundSettings(budget=32, batch_size=8)
    round_ = Round(settings, mix.make_proposers(settings.mix, policy=policy))
    batch = round_.propose(SMALL, space, [], round_no=0, exclude=set())
    families = [p.config.FAMILY for p in batch]
    assert {"sm90", "sm80", "triton"} <= set(families)
    assert sum(p.proposer == "seed" for p in batch) >= 3
    inductor = {c.name for c in inductor_configs(SMALL)}
    assert any(p.config.name in inductor for p in batch if p.proposer == "seed")


def test_a_family_without_prior_picks_still_gets_its_floor_from_its_members():
    space = library_space()
    seed = SeedProposer(recorded={})  # no cuBLASLt kernel known or recorded: no CUTLASS prior
    assert seed.priors(SMALL, space, "sm90") == []
    triton = [Proposal(c, "rl") for c in space.configs if c.FAMILY == "triton"][:3]
    out = floor(triton, space, 3, seed=seed)
    assert [p.config.FAMILY for p in out] == ["triton", "triton", "sm90"]


LONG_K = Problem(128, 128, 16384, Layout.NN)


def test_a_long_k_shapes_first_round_offers_the_longk_familys_prior():
    space = library_space(LONG_K, families=("sm90", "longk"))
    picks = SeedProposer(recorded={}).priors(LONG_K, space, "longk")
    assert picks
    assert {c.name for c in picks} <= {c.name for c in longk_prior(LONG_K)}


def test_the_default_hopper_search_holds_longk_only_where_it_serves():
    assert "longk" in families_for_arch("sm_90a")
    big = Problem(4096, 4096, 4096, Layout.NN)
    assert not any(c.FAMILY == "longk" for c in library_space(big, ("sm90", "longk")).configs)
    assert any(c.FAMILY == "longk" for c in library_space(LONG_K, ("sm90", "longk")).configs)


def test_a_mix_that_only_carries_kernels_in_gets_no_family_floor():
    space = library_space(families=("sm90", "sm80", "triton"))
    settings = RoundSettings(budget=32, batch_size=4, mix={"random": 1.0})
    searching = Round(settings, mix.make_proposers(settings.mix))
    batch = searching.propose(SMALL, space, [], round_no=0, exclude=set())
    assert {"sm90", "sm80", "triton"} <= {p.config.FAMILY for p in batch}
    assert any(p.proposer == "seed" for p in batch)  # the floor filled what random missed
    carried = RoundSettings(budget=32, batch_size=4, mix={"transfer": 1.0})
    round_ = Round(carried, mix.make_proposers(carried.mix))
    batch = round_.propose(SMALL, space, [], round_no=0, exclude=set())
    assert all(p.proposer != "seed" for p in batch)  # no family floor's picks
