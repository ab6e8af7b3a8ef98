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
