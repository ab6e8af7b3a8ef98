"""Campaigns, their problems (shapes), the candidate kernels tried for them, and baselines."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models

from engine.problem import Layout as EngineLayout
from engine.problem import Problem as EngineProblem
from engine.timing.baseline_names import BASELINE_LABELS, BASELINES
from engine.timing.protocol_names import DEFAULT_PROTOCOL, PROTOCOLS


class Layout(models.TextChoices):
    NN = "nn", "NN (B is K×N, torch.matmul)"
    TN = "tn", "TN (B is N×K, nn.Linear weight)"


DEFAULT_ARCH = "sm_90"  # a new shape's arch (the launch form names no other)


def campaign_seed() -> int:
    """A new campaign's seed: its rounds' randomness (engine.campaign.round.round_rng)."""
    return secrets.randbelow(2**31)


class Campaign(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        PAUSED = "paused", "Paused"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    class SearchSpace(models.TextChoices):
        """engine.propose.space.SearchSpace.full and .library."""

        FULL = "full", "Full: every valid config of the GPU's families"
        LIBRARY = "library", "Library: the curated, prebuildable configs"

    name = models.CharField(max_length=200)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="campaigns"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    layout = models.CharField(max_length=2, choices=Layout.choices, default=Layout.NN)
    budget_per_shape = models.PositiveIntegerField(
        default=256, help_text="Most candidates evaluated for each shape."
    )
    proposer_mix = models.JSONField(
        default=dict,
        blank=True,
        help_text='Proposer name → share, e.g. {"policy": 0.7, "llm": 0.3}; empty: the default.',
    )
    reward_protocol = models.CharField(
        max_length=64,
        choices=[(p, p) for p in PROTOCOLS],
        default=DEFAULT_PROTOCOL,
        help_text="The timing protocol its GPU steps time candidates and baselines in, and the "
        "reward (speedup over the best baseline) uses (engine.timing.protocol_names).",
    )
    seed = models.PositiveIntegerField(
        default=campaign_seed,
        help_text="Seeds its rounds: the same seed, settings and history propose the same "
        "candidates as `engine optimize --seed`.",
    )
    gpu_pool = models.CharField(
        max_length=16,
        blank=True,
        default="",
        help_text="GPU architecture queue its GPU steps go to (e.g. sm90 → gpu.sm90); "
        "empty: each shape's own arch.",
    )
    search_space = models.CharField(
        max_length=16,
        choices=SearchSpace.choices,
        default=SearchSpace.LIBRARY,
        help_text="The configs its proposers choose from (the replay executor always uses the "
        "recorded table's).",
    )
    final_top = models.PositiveSmallIntegerField(
        default=2,
        validators=[MinValueValidator(1)],
        help_text="Kernels each shape's finals re-measure: its best verified ones that pass "
        "compute-sanitizer, in rank order (engine.execution.final; `engine optimize --final-top`).",
    )
    final_device_seconds = models.FloatField(
        default=20.0,
        validators=[MinValueValidator(0.1)],
        help_text="The finals' device-protocol run per shape, in seconds "
        "(`engine optimize --final-device-seconds`).",
    )
    engine_times = models.JSONField(
        default=dict,
        blank=True,
        help_text="For a campaign imported from an engine run: what its user felt, the --out "
        "report's throughput (engine.commands.optimize_command.felt_times); empty otherwise.",
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [
            models.Index(fields=["status"], name="campaign_status_idx"),
            models.Index(fields=["-created"], name="campaign_created_idx"),
        ]

    def __str__(self) -> str:
        return self.name


class Problem(models.Model):
    """One shape of a campaign; mirrors engine.problem.Problem."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        FINALS = "finals", "Finals running"  # the search stopped; its finals are queued or run
        DONE = "done", "Done"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="problems")
    m = models.PositiveIntegerField()
    n = models.PositiveIntegerField()
    k = models.PositiveIntegerField()
    layout = models.CharField(max_length=2, choices=Layout.choices, default=Layout.NN)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    arch = models.CharField(
        max_length=16,
        default=DEFAULT_ARCH,
        help_text="GPU arch its GPU steps run on (queue gpu.sm90).",
    )
    stopped = models.CharField(
        max_length=32, blank=True, help_text="The engine's stop reason (budget, exhausted, ...)."
    )
    best_speedups = models.JSONField(
        default=dict,
        blank=True,
        help_text='Baseline name → the chosen kernel\'s speedup, e.g. {"cublas": 1.07}.',
    )
    best = models.JSONField(
        default=dict,
        blank=True,
        help_text="The shape's chosen kernel (webapp.campaigns.ratios): candidate id, name, the "
        "session its times come from and its same-session ratios; empty until one is timed "
        "beside a baseline.",
    )
    final_error = models.TextField(
        blank=True,
        help_text="Why its finals chose no kernel (engine.execution.final.no_choice_reason); "
        "empty when they chose one or have not run.",
    )
    cublaslt_kernels = models.JSONField(
        default=dict,
        blank=True,
        help_text="The cuBLASLt kernels its final's baselines ran (engine.execution.final's "
        "cublaslt_kernels: runner → autotune's and the heuristic's picks); the bundle pins "
        "autotune's where our kernel did not beat it.",
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["campaign", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["campaign", "m", "n", "k", "layout"], name="problem_unique_shape"
            ),
        ]
        indexes = [models.Index(fields=["status"], name="problem_status_idx")]

    def __str__(self) -> str:
        return f"{self.shape}_{self.layout}"

    @property
    def shape(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    def as_engine(self) -> EngineProblem:
        return EngineProblem(self.m, self.n, self.k, EngineLayout(self.layout))


def gpu_queue(*, pool: str, arch: str) -> str:
    """The Celery queue a shape's GPU steps go to: its campaign's pool's when the campaign names
    one (sm80 → gpu.sm80), else the shape's arch's (sm_90 → gpu.sm90)."""
    return f"gpu.{pool}" if pool else "gpu." + arch.replace("_", "")


def gpu_pools() -> list[str]:
    """The GPU pools workers can serve: the ``gpu.<pool>`` queues of CELERY_TASK_QUEUES."""
    queues = [getattr(q, "name", q) for q in settings.CELERY_TASK_QUEUES]
    return [name.removeprefix("gpu.") for name in queues if name.startswith("gpu.")]


class Candidate(models.Model):
    """One proposed kernel for one problem, and what happened to it."""

    class Status(models.TextChoices):
        PROPOSED = "proposed", "Proposed"
        COMPILING = "compiling", "Compiling"
        COMPILED = "compiled", "Compiled"
        VERIFYING = "verifying", "Verifying"
        VERIFIED = "verified", "Verified"
        BENCHMARKING = "benchmarking", "Benchmarking"
        DONE = "done", "Done"
        REJECTED = "rejected", "Rejected"
        FAILED = "failed", "Failed"

    class CompileStatus(models.TextChoices):
        PENDING = "pending", "Pending"
        OK = "ok", "OK"
        ERROR = "error", "Error"
        TIMEOUT = "timeout", "Timeout"

    problem = models.ForeignKey(Problem, on_delete=models.CASCADE, related_name="candidates")
    name = models.CharField(max_length=200, help_text="Deterministic procedural kernel name.")
    family = models.CharField(max_length=64)
    config = models.JSONField(default=dict, blank=True)
    source = models.TextField()
    source_hash = models.CharField(max_length=64, help_text="sha256 of the source, hex.")
    proposer = models.CharField(max_length=64)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children"
    )
    compile_status = models.CharField(
        max_length=16, choices=CompileStatus.choices, default=CompileStatus.PENDING
    )
    compile_result = models.JSONField(null=True, blank=True)
    verification_result = models.JSONField(null=True, blank=True)
    timings = models.JSONField(default=dict, blank=True, help_text="Timing protocol → results.")
    reward = models.FloatField(null=True, blank=True)
    speedup = models.FloatField(
        null=True,
        blank=True,
        help_text="Speedup over cuBLASLt-autotune in the reward protocol, inside the session "
        "webapp.campaigns.ratios shows it from; null when failed or unpaired (a cache the "
        "problem's refresh writes, for the history and knob charts).",
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PROPOSED)
    failure_reason = models.TextField(blank=True)
    outcome = models.JSONField(
        null=True,
        blank=True,
        help_text="The engine's CandidateRecord once measured or failed; null while in flight.",
    )
    proposal = models.JSONField(
        default=dict,
        blank=True,
        help_text="What its proposer said of it (e.g. transfer: the problem it was carried from).",
    )
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["problem", "-created"]
        constraints = [
            models.UniqueConstraint(
                fields=["problem", "source_hash"], name="candidate_unique_source"
            ),
        ]
        indexes = [
            models.Index(fields=["problem", "-reward"], name="candidate_reward_idx"),
            models.Index(fields=["status"], name="candidate_status_idx"),
            models.Index(fields=["source_hash"], name="candidate_source_hash_idx"),
        ]

    def __str__(self) -> str:
        return self.name


class BaselineResult(models.Model):
    """A vendor library's timings for one shape on one GPU environment."""

    # the engine's names (engine.timing.baseline_names), so a baseline added there is one here
    Baseline = models.TextChoices(
        "Baseline", [(name.upper(), (name, BASELINE_LABELS[name])) for name in BASELINES]
    )

    m = models.PositiveIntegerField()
    n = models.PositiveIntegerField()
    k = models.PositiveIntegerField()
    layout = models.CharField(max_length=2, choices=Layout.choices)
    baseline = models.CharField(max_length=32, choices=Baseline.choices)
    variant = models.CharField(
        max_length=2,
        choices=Layout.choices,
        help_text="Operand layout the library was called with (it may differ from the problem's).",
    )
    timings = models.JSONField(default=dict, blank=True, help_text="Timing protocol → results.")
    gpu_environment = models.ForeignKey(
        "workers.GpuEnvironment", on_delete=models.PROTECT, related_name="baselines"
    )
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created"]
        indexes = [models.Index(fields=["m", "n", "k", "layout"], name="baseline_shape_idx")]

    def __str__(self) -> str:
        return f"{self.baseline} {self.m}x{self.n}x{self.k}_{self.layout} ({self.variant})"


class WorkItem(models.Model):
    """One unit of a running campaign: a round's compile step or its GPU step for one problem,
    or the problem's finals once its search stopped (a GPU step too: queue ``gpu.<arch>``).

    The database, not the broker, is the source of truth: a task claims its item with a
    conditional UPDATE (status queued → running, a fresh lease token), extends the lease while it
    works, and finishes only while it still holds the lease. A periodic job (work_requeue)
    re-queues items whose lease expired and fails those past ``max_attempts``.
    """

    class Kind(models.TextChoices):
        COMPILE = "compile", "Compile"
        GPU = "gpu", "GPU"
        FINAL = "final", "Finals"

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="work_items")
    problem = models.ForeignKey(Problem, on_delete=models.CASCADE, related_name="work_items")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    round = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.QUEUED)
    queue = models.CharField(max_length=32, help_text="Celery queue its task goes to.")
    payload = models.JSONField(default=dict, blank=True, help_text="e.g. candidate ids.")
    attempts = models.PositiveIntegerField(default=0, help_text="Claims so far.")
    max_attempts = models.PositiveIntegerField(default=3)
    lease_token = models.CharField(max_length=32, blank=True)
    lease_expires = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=255, blank=True, help_text="Celery node holding it.")
    enqueued = models.DateTimeField(null=True, blank=True, help_text="Last sent to the broker.")
    reason = models.TextField(blank=True, help_text="Why it failed, or the last retry's error.")
    result = models.JSONField(default=dict, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["problem", "round", "kind"], name="work_item_unique_step"
            ),
        ]
        indexes = [
            models.Index(fields=["status", "lease_expires"], name="work_item_lease_idx"),
            models.Index(fields=["campaign", "status"], name="work_item_campaign_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} round {self.round} of {self.problem_id} ({self.status})"
