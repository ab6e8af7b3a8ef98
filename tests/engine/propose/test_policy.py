"""engine.propose.policy: the learned proposer learns from rewards, masks what is not in the
space, and persists per arch."""

from __future__ import annotations

import torch

from engine.problem import Problem
from engine.propose.policy import Policy, policy_path
from engine.propose.space import SearchSpace

PROBLEM = Problem.parse("4096x4096x1024", "tn")


def small_space(n: int = 40) -> SearchSpace:
    full = SearchSpace.full(PROBLEM, families=["sm80"])
    return SearchSpace(PROBLEM, full.configs[:: max(1, len(full) // n)][:n])


def test_reinforce_raises_the_probability_of_the_best_config():
    space = small_space()
    best = space.configs[17].name
    policy = Policy(["sm90", "sm80"], seed=0, lr=0.05)
    generator = torch.Generator().manual_seed(0)
    before = policy.probabilities(PROBLEM, space)[best]
    for _ in range(60):
        batch = policy.sample(PROBLEM, space, 8, generator=generator)
        policy.update(PROBLEM, space, {c.name: 1.0 if c.name == best else 0.0 for c in batch})
    after = policy.probabilities(PROBLEM, space)[best]
    assert abs(before - 1 / len(space)) < 1e-6
    assert after > 0.3 > 10 * before


def test_pretraining_on_recorded_rewards_makes_the_best_config_the_most_likely():
    space = small_space()
    rewards = {c.name: -0.1 * (i % 7) for i, c in enumerate(space.configs)}
    rewards[space.configs[5].name] = 0.5
    policy = Policy(["sm80"], seed=1)
    history = policy.pretrain([(PROBLEM, space, rewards)], steps=150)
    probabilities = policy.probabilities(PROBLEM, space)
    assert max(probabilities, key=probabilities.get) == space.configs[5].name
    assert history[-1] > history[0]


def test_the_distribution_covers_only_the_space_and_skips_tried_configs():
    space = small_space(12)
    policy = Policy(["sm90", "sm80"])
    assert abs(sum(policy.probabilities(PROBLEM, space).values()) - 1) < 1e-6
    tried = {c.name for c in space.configs[:9]}
    picks = policy.sample(PROBLEM, space, 10, exclude=tried)
    assert {c.name for c in picks} == {c.name for c in space.configs[9:]}
    assert policy.entropy(PROBLEM, space, tried) > 0.99  # still uniform over the untried


def test_a_saved_policy_loads_with_the_same_distribution(tmp_path):
    space = small_space()
    policy = Policy(["sm90", "sm80"], seed=3)
    policy.update(PROBLEM, space, {space.configs[0].name: 1.0, space.configs[1].name: 0.0})
    path = policy_path(tmp_path, "sm_90")
    policy.save(path)
    loaded = Policy.load(path, ["sm90", "sm80"])
    assert loaded is not None
    assert loaded.updates == 1
    assert loaded.probabilities(PROBLEM, space) == policy.probabilities(PROBLEM, space)


def test_a_policy_saved_for_another_knob_space_is_ignored(tmp_path):
    path = tmp_path / "sm_90.pt"
    Policy(["sm80"]).save(path)
    assert Policy.load(path, ["sm90", "sm80"]) is None
    path.write_bytes(b"not a checkpoint")
    assert Policy.load(path, ["sm80"]) is None


def test_logits_pretraining_never_saw_start_at_the_mean_of_the_trained_ones():
    from engine.codegen.sm80 import Sm80Config
    from engine.codegen.triton import inductor_configs

    left_out = Sm80Config.SPACE["stages"][-1]
    space = SearchSpace(PROBLEM, [c for c in small_space(80).configs if c.stages != left_out])
    rewards = {c.name: 0.3 - 0.05 * (i % 9) for i, c in enumerate(space.configs)}
    policy = Policy(["sm90", "sm80", "triton"], seed=1)
    policy.pretrain([(PROBLEM, space, rewards)], steps=100)
    logits = policy.logits(PROBLEM).detach()
    trained_scores = policy.scores(PROBLEM, space).detach()
    # a family no training config belonged to: each of its configs scores the trained mean
    triton = SearchSpace.from_configs(PROBLEM, inductor_configs(PROBLEM))
    assert torch.allclose(
        policy.scores(PROBLEM, triton).detach(),
        trained_scores.mean().expand(len(triton)),
        atol=1e-4,
    )
    assert abs(trained_scores.mean().item()) > 0.1  # not merely 0, as an untrained logit is
    # a knob value no training config had: the mean of that knob's trained values
    seen = sorted({c.stages for c in space.configs})
    unseen = [v for v in Sm80Config.SPACE["stages"] if v not in seen]
    assert left_out in unseen
    start = policy.offsets[("sm80", "stages")]
    values = list(Sm80Config.SPACE["stages"])
    trained = torch.stack([logits[start + values.index(v)] for v in seen])
    for value in unseen:
        assert torch.isclose(logits[start + values.index(value)], trained.mean(), atol=1e-5)
    # the same holds for another problem: rows of the output layer, not one problem's logits
    other = Problem.parse("256x512x8192", "tn")
    other_space = SearchSpace(other, space.configs)
    other_triton = SearchSpace.from_configs(other, inductor_configs(other))
    assert torch.allclose(
        policy.scores(other, other_triton).detach(),
        policy.scores(other, other_space).detach().mean().expand(len(other_triton)),
        atol=1e-4,
    )


def family_mass(policy: Policy, problem: Problem, space: SearchSpace) -> dict[str, float]:
    mass: dict[str, float] = {}
    for name, p in policy.probabilities(problem, space).items():
        family = space.config(name).FAMILY
        mass[family] = mass.get(family, 0.0) + p
    return mass


def test_the_shipped_policy_reaches_triton_on_a_small_shape_it_never_saw():
    from engine.codegen.triton import inductor_configs
    from engine.propose.policy import policy_families, pretrained_path

    policy = Policy.load(pretrained_path("sm_90"), policy_families("sm_90"))
    assert policy is not None, "the shipped policy is for another knob space: retrain it"
    assert any("triton" in source for source in policy.trained_on)
    families = ("sm90", "sm80", "triton")
    small = Problem.parse("96x384x192", "nn")  # in no recorded table
    space = SearchSpace.library(small, families=families)
    assert family_mass(policy, small, space)["triton"] > 0.2
    probabilities = policy.probabilities(small, space)
    ranked = sorted(probabilities, key=lambda name: -probabilities[name])
    inductor = {c.name for c in inductor_configs(small)}
    assert next(i for i, name in enumerate(ranked) if name in inductor) < 20
    large = Problem.parse("4096x4096x4096", "nn")
    assert family_mass(policy, large, SearchSpace.library(large, families=families))["sm90"] > 0.5


def test_the_shipped_policy_reaches_longk_on_a_long_k_shape_it_never_saw():
    from engine.propose.policy import policy_families, pretrained_path

    policy = Policy.load(pretrained_path("sm_90"), policy_families("sm_90"))
    assert policy is not None, "the shipped policy is for another knob space: retrain it"
    long_k = Problem.parse("192x320x12288", "nn")  # in no recorded table
    space = SearchSpace.library(long_k, families=("sm90", "sm80", "triton", "longk"))
    assert family_mass(policy, long_k, space)["longk"] > 0.2
