"""What the launch form offers: shape presets, proposers, reward protocols, the GPU-time estimate.

Proposer names, the default mix and the reward protocols are the engine's own: none of the
modules they come from imports torch, so the web process stays free of it (a test checks).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db.models import Count

from engine.campaign.round import DEFAULT_MIX  # noqa: F401
from engine.propose.mix import PROPOSER_NAMES as PROPOSERS  # noqa: F401
from engine.timing.protocol_names import DEFAULT_PROTOCOL as DEFAULT_REWARD_PROTOCOL  # noqa: F401
from engine.timing.protocol_names import PROTOCOLS as REWARD_PROTOCOLS  # noqa: F401
from webapp import ratelimit

# GPU seconds per candidate, from the recorded H200 run (bench/results/2026-12-02-h200-families,
# families-run1.log): 221 s of GPU wall time (17:48:54 → 17:52:35: verifying 48 configs in 37 s,
# then timing 334 candidate×shape pairs beside the 4 baselines, cuBLASLt autotuning included, in
# 184 s) over 334 candidates = 0.66 s. Shapes there ran from 64³ to 8192³; compiling is CPU time.
GPU_SECONDS_PER_CANDIDATE = 221 / 334

CUDA_L2_VALUES = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288, 16384)


@dataclass(frozen=True, slots=True)
class ModelDims:
    label: str
    hidden: int
    ffn: int
    kv: int  # key/value heads × head size

    def nk(self) -> list[tuple[int, int]]:
        """(N, K) of each projection (nn.Linear, so the TN layout fits): q and o, k and v, gate
        and up, down."""
        h, f, kv = self.hidden, self.ffn, self.kv
        return [(h, h), (kv, h), (f, h), (h, f)]


MODELS = {
    "llama-3-8b": ModelDims("Llama-3-8B", 4096, 14336, 1024),
    "llama-3-70b": ModelDims("Llama-3-70B", 8192, 28672, 1024),
    "qwen2.5-7b": ModelDims("Qwen2.5-7B", 3584, 18944, 512),
    "mixtral-8x7b": ModelDims("Mixtral-8x7B (per expert)", 4096, 14336, 1024),
}
PRESET_CHOICES = [
    ("", "none"),
    ("cuda-l2", "CUDA-L2 grid: {64 … 16384}³, 1000 shapes"),
    *[(key, f"{m.label}: projections and FFN at the token counts") for key, m in MODELS.items()],
]


def preset_shapes(preset: str, tokens: list[int]) -> list[tuple[int, int, int]]:
    """(M, N, K) of a preset; model presets take M from ``tokens``."""
    if preset == "cuda-l2":
        v = CUDA_L2_VALUES
        return [(m, n, k) for m in v for n in v for k in v]
    if preset in MODELS:
        return [(m, n, k) for m in tokens for n, k in MODELS[preset].nk()]
    return []


def presets_for_js() -> dict:
    """The presets as the launch page's counter needs them (static/js/launch.js)."""
    return {
        "cuda-l2": {"grid": list(CUDA_L2_VALUES)},
        **{key: {"nk": model.nk()} for key, model in MODELS.items()},
    }


def estimated_gpu_seconds(*, shapes: int, budget_per_shape: int) -> float:
    return shapes * budget_per_shape * GPU_SECONDS_PER_CANDIDATE


def duration_text(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


# -- what a launch may ask for --------------------------------------------------------------------
# A campaign still owes GPU time while it is queued, running or paused.
OWING = ("queued", "running", "paused")  # Campaign.Status values


def launch_window(*, user_id: int) -> ratelimit.Window:
    """The launch rate limit: settings.LAUNCH_RATE_LIMIT accepted launches per user per window."""
    return ratelimit.Window(
        scope="launch",
        key=str(user_id),
        limit=settings.LAUNCH_RATE_LIMIT,
        seconds=settings.LAUNCH_RATE_WINDOW_SECONDS,
    )


def queued_gpu_seconds(*, owner_id: int) -> float:
    """The estimated GPU time ``owner``'s unfinished campaigns still owe: the candidates their
    budgets leave (shapes × budget − candidates so far), at GPU_SECONDS_PER_CANDIDATE each."""
    from webapp.campaigns.models import Campaign, Candidate

    owing = Campaign.objects.filter(owner_id=owner_id, status__in=OWING)
    planned = {
        c["id"]: c["shapes"] * c["budget_per_shape"]
        for c in owing.annotate(shapes=Count("problems")).values("id", "shapes", "budget_per_shape")
    }
    made = dict(
        Candidate.objects.filter(problem__campaign__in=list(planned))
        .values("problem__campaign")
        .annotate(n=Count("id"))
        .values_list("problem__campaign", "n")
    )
    left = sum(max(0, want - made.get(cid, 0)) for cid, want in planned.items())
    return left * GPU_SECONDS_PER_CANDIDATE


def rate_limited_text(wait: int) -> str:
    limit, window = settings.LAUNCH_RATE_LIMIT, settings.LAUNCH_RATE_WINDOW_SECONDS
    return (
        f"Too many launches: at most {limit} per {window} s. Nothing was launched; your "
        f"form is kept: submit it again in {wait} s."
    )


def confirm_threshold_seconds() -> float:
    """A launch estimated above this much GPU time needs its confirmation box ticked."""
    return settings.LAUNCH_CONFIRM_GPU_HOURS * 3600.0


def quota_seconds() -> float:
    """The most estimated GPU time one user may have queued (running and paused included)."""
    return settings.LAUNCH_GPU_QUOTA_HOURS * 3600.0
