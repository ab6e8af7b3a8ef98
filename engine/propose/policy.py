"""The learned proposal policy: problem features → a factored distribution over kernel knobs.

A small MLP maps ``Problem.features()`` to one logit vector holding a categorical head for the
family and one per (family, knob) of each family's SPACE. A config's score is the sum of the
logits of its family and of its knob values; the distribution is the softmax of scores over the
configs of a SearchSpace, which holds only configs the families' ``is_valid`` accepts — so
invalid choices are masked exactly (their probability is 0, and the rest renormalise).

Learning is REINFORCE: advantage = reward − a running mean of that problem's rewards, plus an
entropy bonus, one Adam step per observed batch (online, during a campaign). ``pretrain`` uses a
dense recorded table: per training problem it fits p to the target q(c) ∝ exp(r(c) / T) by
cross-entropy, T = −ln 0.95, so a config 5 % slower than another gets 1/e of its weight. (Ascending
the exact expected reward Σ p(c)·r(c) instead gets stuck: once p settles on a decent config, the
gradient towards a better one it gives almost no mass vanishes with that mass, and on the
2026-12-03 H200 table the best configs of small shapes stayed ranked ~100th of 192 even on the
training shapes.) A policy is saved per GPU arch with a description of the knob space it was
built on (its ``space_id``, a hash of that description); a file for another space is ignored on
load.

Several processes share an arch's policy through :class:`PolicyFile` (the Celery compile steps of
every campaign, the CLI): each round's rewards are learnt once (the policy remembers the last
round it learnt of each campaign's problem, ``applied``), under an exclusive lock on the file,
loading the latest version first and replacing the file atomically, so that no process loses
another's update and a reader never sees half a file. A fresh install starts from the policy the
repository ships for its arch (:func:`pretrained_path`, rebuilt by ``python -m engine
pretrain-policy`` from every recorded table), else from a uniform one.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import hashlib
import json
import math
import os
import weakref
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.codegen import FAMILIES, KernelConfig
from engine.problem import Problem
from engine.propose.space import DEFAULT_FAMILIES_BY_ARCH, HOPPER_ARCHS, SearchSpace

# torch is imported where it is used: a process that only reads a campaign (the web app, a
# compile step without the rl proposer) never pays for its import
if TYPE_CHECKING:
    import torch

FORMAT_VERSION = 1
FEATURES = tuple(Problem(64, 64, 64).features())
FEATURE_SCALE = 16.0  # log2 sizes are ~6..20; keep inputs near unit range
TARGET_TEMPERATURE = -math.log(0.95)  # pretraining target: 5 % slower → 1/e of the weight


PRETRAINED_DIR = Path(__file__).resolve().parent / "pretrained"


def policy_path(cache_dir: Path, arch: str) -> Path:
    return Path(cache_dir) / "policy" / f"{arch}.pt"


def policy_families(arch: str, searched: Sequence[str] = ()) -> tuple[str, ...]:
    """The families an arch's policy has logits for: every family that runs on ``arch`` (on
    Hopper triton too, whether or not this machine has Triton to build it, so that one policy
    serves the machines that have it and those that do not), and any other ``searched``."""

    families = DEFAULT_FAMILIES_BY_ARCH.get(arch, ("sm80",))
    if arch in HOPPER_ARCHS and "triton" in FAMILIES:
        families += ("triton",)
    return families + tuple(f for f in searched if f not in families)


def pretrained_path(arch: str) -> Path:
    """The policy the repository ships for ``arch`` (it may be missing, or for another space)."""
    return PRETRAINED_DIR / f"{arch}.pt"


# A space's logit-index matrix per policy space_id, shared by every Policy of that space: a compile
# step loads the arch's policy anew each round, and a full sm90 space holds 275 000 configs.
_INDEX_CACHE: weakref.WeakKeyDictionary[SearchSpace, dict[str, torch.Tensor]] = (
    weakref.WeakKeyDictionary()
)


def problem_tensor(problem: Problem) -> torch.Tensor:
    import torch

    features = problem.features()
    return torch.tensor([features[name] / FEATURE_SCALE for name in FEATURES], dtype=torch.float32)


class Policy:
    def __init__(
        self,
        families: Sequence[str],
        *,
        hidden: int = 64,
        lr: float = 0.02,
        entropy_coef: float = 0.01,
        baseline_decay: float = 0.8,
        seed: int = 0,
    ) -> None:
        import torch
        from torch import nn

        self.families = tuple(families)
        self.entropy_coef = entropy_coef
        self.baseline_decay = baseline_decay
        self.hidden = hidden
        self.lr = lr
        # one logit per family, then per (family, knob, value); the last slot is a constant 0
        self.offsets: dict[tuple[str, str], int] = {}
        size = len(self.families)
        for family in self.families:
            for knob, values in FAMILIES[family].SPACE.items():
                self.offsets[(family, knob)] = size
                size += len(values)
        self.n_logits = size
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.net = nn.Sequential(
                nn.Linear(len(FEATURES), hidden), nn.Tanh(), nn.Linear(hidden, size)
            )
            nn.init.zeros_(self.net[2].weight)  # start uniform over any space
            nn.init.zeros_(self.net[2].bias)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=lr)
        self.running: dict[str, float] = {}  # problem key → running mean reward
        self.updates = 0
        self.applied: dict[str, int] = {}  # stream (campaign/problem) → last round learnt
        self.trained_on: list[str] = []  # what pretrained it (tables, campaign files)
        text = json.dumps(self.describe(), sort_keys=True)
        self.space_id = hashlib.sha256(text.encode()).hexdigest()[:16]

    # -- the space -------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """What the logits mean: families, knobs and values in order, and the features."""
        return {
            "version": FORMAT_VERSION,
            "features": list(FEATURES),
            "families": {
                f: {k: list(v) for k, v in FAMILIES[f].SPACE.items()} for f in self.families
            },
            "hidden": self.hidden,
        }

    def indices(self, config: KernelConfig) -> list[int]:
        """Logit positions whose sum is ``config``'s score."""
        family = config.FAMILY
        out = [self.families.index(family)]
        for knob, values in config.SPACE.items():
            out.append(self.offsets[(family, knob)] + list(values).index(getattr(config, knob)))
        return out

    def _index(self, space: SearchSpace) -> torch.Tensor:
        import torch

        by_policy = _INDEX_CACHE.setdefault(space, {})
        cached = by_policy.get(self.space_id)
        if cached is None:
            rows = [self.indices(c) for c in space.configs]
            width = max((len(r) for r in rows), default=1)
            pad = self.n_logits  # points at the appended constant-0 logit
            cached = torch.tensor([r + [pad] * (width - len(r)) for r in rows], dtype=torch.long)
            by_policy[self.space_id] = cached
        return cached

    # -- the distribution --------------------------------------------------------------------
    def logits(self, problem: Problem) -> torch.Tensor:
        import torch

        out = self.net(problem_tensor(problem))
        return torch.cat([out, out.new_zeros(1)])

    def scores(self, problem: Problem, space: SearchSpace) -> torch.Tensor:
        return self.logits(problem)[self._index(space)].sum(dim=1)

    def log_probs(
        self, problem: Problem, space: SearchSpace, exclude: set[str] | frozenset[str] = frozenset()
    ) -> torch.Tensor:
        import torch

        scores = self.scores(problem, space)
        if exclude:
            mask = torch.tensor([c.name in exclude for c in space.configs])
            scores = scores.masked_fill(mask, -math.inf)
        return torch.log_softmax(scores, dim=0)

    def probabilities(self, problem: Problem, space: SearchSpace) -> dict[str, float]:
        import torch

        with torch.no_grad():
            probs = self.log_probs(problem, space).exp().tolist()
        return {c.name: p for c, p in zip(space.configs, probs, strict=True)}

    def entropy(
        self, problem: Problem, space: SearchSpace, exclude: set[str] | frozenset[str] = frozenset()
    ) -> float:
        """Entropy of the distribution over the untried configs, as a fraction of the maximum."""
        import torch

        remaining = len(space) - len(exclude & space.by_name.keys())
        if remaining <= 1:
            return 0.0
        with torch.no_grad():
            logp = self.log_probs(problem, space, exclude)
            p = logp.exp()
            h = -(p * torch.where(p > 0, logp, torch.zeros_like(logp))).sum().item()
        return h / math.log(remaining)

    def sample(
        self,
        problem: Problem,
        space: SearchSpace,
        n: int,
        *,
        exclude: set[str] | frozenset[str] = frozenset(),
        generator: torch.Generator | None = None,
    ) -> list[KernelConfig]:
        """Up to ``n`` distinct untried configs, drawn without replacement."""
        import torch

        available = len(space) - len(exclude & space.by_name.keys())
        n = min(n, available)
        if n <= 0:
            return []
        with torch.no_grad():
            probs = self.log_probs(problem, space, exclude).exp()
        picks = torch.multinomial(probs, n, replacement=False, generator=generator)
        return [space.configs[i] for i in picks.tolist()]

    # -- learning ----------------------------------------------------------------------------
    def update(
        self, problem: Problem, space: SearchSpace, rewards: Mapping[str, float]
    ) -> dict[str, float]:
        """One REINFORCE step from observed ``rewards`` (config name → reward) of ``problem``."""
        import torch

        names = [n for n in rewards if n in space]
        if not names:
            return {}
        values = torch.tensor([rewards[n] for n in names], dtype=torch.float32)
        batch_mean = float(values.mean())
        baseline = self.running.get(problem.key, batch_mean)
        advantage = values - baseline
        logp = self.log_probs(problem, space)
        chosen = logp[torch.tensor([space.by_name[n] for n in names])]
        p = logp.exp()
        entropy = -(p * logp).sum()
        loss = -(advantage * chosen).mean() - self.entropy_coef * entropy
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        decay = self.baseline_decay if problem.key in self.running else 0.0
        self.running[problem.key] = decay * baseline + (1 - decay) * batch_mean
        self.updates += 1
        return {"loss": loss.item(), "entropy": entropy.item(), "baseline": baseline}

    def learn_once(
        self,
        problem: Problem,
        space: SearchSpace,
        rewards: Mapping[str, float],
        *,
        stream: str,
        step: int,
    ) -> bool:
        """:meth:`update` with round ``step`` of ``stream`` unless a round at or after it was
        learnt already (a retried step, a resumed campaign); True when it learnt."""
        if self.applied.get(stream, -1) >= step:
            return False
        self.update(problem, space, rewards)
        self.applied[stream] = step
        return True

    def pretrain(
        self,
        tasks: Sequence[tuple[Problem, SearchSpace, Mapping[str, float]]],
        *,
        steps: int = 200,
        temperature: float = TARGET_TEMPERATURE,
    ) -> list[float]:
        """Fits the policy of every task's problem to q ∝ exp(reward / temperature) over its
        recorded configs (mean cross-entropy, one Adam step per step); returns the mean expected
        reward (centred per problem) after each step."""
        import torch

        prepared = []
        for problem, space, rewards in tasks:
            known = [i for i, c in enumerate(space.configs) if c.name in rewards]
            if not known:
                continue
            r = torch.tensor([rewards[space.configs[i].name] for i in known])
            target = torch.softmax((r - r.max()) / temperature, dim=0)
            index = self._index(space)[known]
            prepared.append((problem_tensor(problem), index, r - r.mean(), target))
        if not prepared:
            return []
        features = torch.stack([f for f, _, _, _ in prepared])
        history = []
        for _ in range(steps):
            out = self.net(features)
            out = torch.cat([out, out.new_zeros(len(prepared), 1)], dim=1)
            loss = out.new_zeros(())
            expected = 0.0
            for row, (_, index, centred, target) in enumerate(prepared):
                logp = torch.log_softmax(out[row][index].sum(dim=1), dim=0)
                loss = loss - (target * logp).sum()
                expected += float((logp.detach().exp() * centred).sum())
            self.optimizer.zero_grad()
            (loss / len(prepared)).backward()
            self.optimizer.step()
            history.append(expected / len(prepared))
        self.start_unseen_at_mean([index for _, index, _, _ in prepared])
        return history

    def start_unseen_at_mean(self, trained: Sequence[torch.Tensor]) -> None:
        """Logits no trained config uses start at the mean of the trained ones, problem by
        problem (the output layer is linear in the hidden state, so a mean of rows is a mean of
        logits): an unseen value of a knob at the mean of that knob's trained values, and a
        family with no trained config at the mean score of the trained configs (its knobs at
        0). Left at 0, an unseen family or value would sit far below what training pushed up.

        ``trained``: logit-index matrices (a row a config, as :meth:`indices`, padded with the
        constant slot) of the training configs."""
        import torch

        layer = self.net[2]
        used = {i for index in trained for i in index.flatten().tolist()} - {self.n_logits}
        with torch.no_grad():
            rows = torch.cat([layer.weight, layer.bias[:, None]], dim=1)
            padded = torch.cat([rows, rows.new_zeros(1, rows.shape[1])])
            scores = torch.cat([padded[index].sum(dim=1) for index in trained])
            mean_score = scores.mean(dim=0)
            for position, family in enumerate(self.families):
                knobs = FAMILIES[family].SPACE
                if position not in used:
                    rows[position] = mean_score
                    for knob, values in knobs.items():
                        start = self.offsets[(family, knob)]
                        rows[start : start + len(values)] = 0.0
                    continue
                for knob, values in knobs.items():
                    start = self.offsets[(family, knob)]
                    span = range(start, start + len(values))
                    seen = [i for i in span if i in used]
                    unseen = [i for i in span if i not in used]
                    if seen and unseen:
                        rows[unseen] = rows[seen].mean(dim=0)
            layer.weight.copy_(rows[:, :-1])
            layer.bias.copy_(rows[:, -1])

    # -- persistence -------------------------------------------------------------------------
    def clone(self) -> Policy:
        """An independent copy (weights, optimiser state, running baselines)."""
        twin = Policy(
            self.families,
            hidden=self.hidden,
            lr=self.lr,
            entropy_coef=self.entropy_coef,
            baseline_decay=self.baseline_decay,
        )
        twin.net.load_state_dict(copy.deepcopy(self.net.state_dict()))
        twin.optimizer.load_state_dict(copy.deepcopy(self.optimizer.state_dict()))
        twin.running = dict(self.running)
        twin.updates = self.updates
        twin.applied = dict(self.applied)
        twin.trained_on = list(self.trained_on)
        return twin

    def adopt(self, other: Policy) -> None:
        """Takes ``other``'s weights, optimiser state and bookkeeping (same space), in place: the
        proposers holding this object see them."""
        self.net.load_state_dict(other.net.state_dict())
        self.optimizer.load_state_dict(other.optimizer.state_dict())
        self.running = dict(other.running)
        self.updates = other.updates
        self.applied = dict(other.applied)
        self.trained_on = list(other.trained_on)

    def save(self, path: Path) -> None:
        """Atomic write of the weights, optimiser state, running baselines and space."""
        import torch

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        torch.save(
            {
                "space": self.describe(),
                "space_id": self.space_id,
                "applied": dict(self.applied),
                "trained_on": list(self.trained_on),
                "state_dict": self.net.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "running": dict(self.running),
                "updates": self.updates,
                "settings": {
                    "lr": self.lr,
                    "entropy_coef": self.entropy_coef,
                    "baseline_decay": self.baseline_decay,
                },
            },
            tmp,
        )
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path, families: Sequence[str], **kwargs: Any) -> Policy | None:
        """The policy saved at ``path`` if it was built on the same space, else None."""
        import torch

        path = Path(path)
        if not path.is_file():
            return None
        try:
            data = torch.load(path, weights_only=True)
        except Exception:  # a corrupt or foreign file: start afresh rather than fail
            return None
        policy = cls(families, hidden=int(data["space"].get("hidden", 64)), **kwargs)
        if data["space"] != policy.describe():
            return None
        policy.net.load_state_dict(data["state_dict"])
        policy.optimizer.load_state_dict(data["optimizer"])
        policy.running = {str(k): float(v) for k, v in data["running"].items()}
        policy.updates = int(data["updates"])
        policy.applied = {str(k): int(v) for k, v in data.get("applied", {}).items()}
        policy.trained_on = [str(x) for x in data.get("trained_on", [])]
        return policy


class InMemoryLearner:
    """Learns each round's rewards into a policy held by this process only."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    def learn(
        self,
        problem: Problem,
        space: SearchSpace,
        records: Sequence[Any],
        *,
        stream: str,
        step: int,
    ) -> bool:
        rewards = {r.name: r.reward for r in records}
        return self.policy.learn_once(problem, space, rewards, stream=stream, step=step)


class PolicyFile:
    """An arch's policy shared through ``path`` by several processes (module docstring).

    ``policy`` is this process's copy, the object its proposers hold: :meth:`refresh` and
    :meth:`learn` bring the latest version into it. Where ``path`` holds no policy for this space,
    the first is ``start`` (the shipped pretrained one) if that one fits, else a fresh one."""

    def __init__(
        self, path: Path, families: Sequence[str], *, start: Path | None = None, seed: int = 0
    ) -> None:
        self.path = Path(path)
        self.families = tuple(families)
        self.start = start
        self.seed = seed
        self.policy, self.origin = self._initial()

    def _initial(self) -> tuple[Policy, str]:
        saved = Policy.load(self.path, self.families)
        if saved is not None:
            return saved, "file"
        if self.start is not None:
            shipped = Policy.load(self.start, self.families)
            if shipped is not None:
                return shipped, "pretrained"
        return Policy(self.families, seed=self.seed), "fresh"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def refresh(self) -> Policy:
        """The latest saved version (no lock: a save replaces the file atomically)."""
        saved = Policy.load(self.path, self.families)
        if saved is not None:
            self.policy.adopt(saved)
        return self.policy

    def learn(
        self,
        problem: Problem,
        space: SearchSpace,
        records: Sequence[Any],
        *,
        stream: str,
        step: int,
    ) -> bool:
        """Under the lock: the latest version, round ``step``'s rewards learnt once, saved."""
        rewards = {r.name: r.reward for r in records}
        with self._locked():
            current = Policy.load(self.path, self.families) or self.policy
            learnt = current.learn_once(problem, space, rewards, stream=stream, step=step)
            if learnt:
                current.save(self.path)
            if current is not self.policy:
                self.policy.adopt(current)
        return learnt
