from __future__ import annotations

import math
import re
from collections.abc import Collection

from django import forms

from engine.problem import MAX_DIM, ProblemError
from engine.problem import Layout as EngineLayout
from engine.problem import Problem as EngineProblem
from webapp.campaigns.launch import (
    DEFAULT_MIX,
    DEFAULT_REWARD_PROTOCOL,
    MODELS,
    PRESET_CHOICES,
    PROPOSERS,
    REWARD_PROTOCOLS,
    confirm_threshold_seconds,
    duration_text,
    estimated_gpu_seconds,
    preset_shapes,
    queued_gpu_seconds,
    quota_seconds,
)
from webapp.campaigns.models import (
    DEFAULT_ARCH,
    BaselineResult,
    Campaign,
    Candidate,
    Layout,
    gpu_pools,
    gpu_queue,
)

MAX_SHAPES = 1024  # the CUDA-L2 grid (1000) fits
MAX_SHOWN_CHARS = 40  # a pasted essay is quoted back shortened
MAX_VALUES_PER_AXIS = 32
MAX_TOKEN_COUNTS = 16
MAX_BUDGET_PER_SHAPE = 4096
MAX_SHOWN_ERRORS = 5
_SPLIT = re.compile(r"[\s,;]+")
# Bidirectional controls (embeddings, overrides, isolates, marks): a name with U+202E would show
# reversed on every page that lists it.
BIDI_CONTROLS = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def capped(errors: list[str], *, limit: int = MAX_SHOWN_ERRORS) -> list[str]:
    """The first ``limit`` errors and how many more there are: 30 000 junk lines give a short
    page, not one line per junk line."""
    more = len(errors) - limit
    return errors[:limit] + ([f"… and {more} more"] if more > 0 else [])


def parse_values(text: str, *, what: str, limit: int) -> list[int]:
    """ "64, 128 256" → [64, 128, 256]: positive whole numbers, duplicates merged, order kept."""
    values: dict[int, None] = {}
    errors = []
    for item in _SPLIT.split(text.strip()):
        if not item:
            continue
        shown = item if len(item) <= MAX_SHOWN_CHARS else item[:MAX_SHOWN_CHARS] + "…"
        if not (item.isascii() and item.isdigit()):
            errors.append(f"{what}: {shown!r} is not a whole number")
        elif int(item) < 1:
            errors.append(f"{what}: {item} must be positive")
        elif int(item) > MAX_DIM:
            errors.append(f"{what}: {item} is over the limit of {MAX_DIM}")
        else:
            values[int(item)] = None
    if errors:
        raise forms.ValidationError(capped(errors))
    if len(values) > limit:
        raise forms.ValidationError(f"{what}: {len(values)} values is over the limit of {limit}")
    return list(values)


def parse_mix(text: str) -> dict[str, float]:
    """ "rl=0.5, evolve=0.3" → shares normalised to sum 1; empty → {} (the engine's default)."""
    shares: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = (part.strip() for part in item.replace(":", "=").partition("="))
        if not sep:
            shown = item[:MAX_SHOWN_CHARS]
            raise forms.ValidationError(f"{shown!r}: write name=share, e.g. rl=0.5")
        if name not in PROPOSERS:
            raise forms.ValidationError(
                f"unknown proposer {name[:MAX_SHOWN_CHARS]!r}: expected {', '.join(PROPOSERS)}"
            )
        if name in shares:
            raise forms.ValidationError(f"{name} is given twice")
        try:
            share = float(value)
        except ValueError:
            share = math.nan
        if not math.isfinite(share) or share < 0:
            raise forms.ValidationError(
                f"{name}: {value[:MAX_SHOWN_CHARS]!r} is not a share (a number ≥ 0)"
            )
        shares[name] = share
    total = sum(shares.values())
    if not math.isfinite(total):  # rl=1e308, evolve=1e308: each finite, their sum is not
        raise forms.ValidationError(
            "the shares add up to more than a number can hold: give smaller shares, e.g. rl=0.5"
        )
    if shares and total <= 0:
        raise forms.ValidationError("the shares add up to 0: give at least one a positive share")
    return {name: share / total for name, share in shares.items() if share > 0}


def grid_shapes(ms, ns, ks):
    return [(m, n, k) for m in ms for n in ns for k in ks]


class CampaignForm(forms.Form):
    """Shapes from lines, a grid and a preset (their union, duplicates merged), and run settings."""

    name = forms.CharField(max_length=200)
    shapes = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 6, "placeholder": "4096x4096x4096\n8192x1024x4096"}),
        max_length=MAX_SHAPES * 64,
        required=False,
        label="Shapes, one per line",
        help_text="MxNxK per line.",
    )
    grid_m = forms.CharField(max_length=400, required=False, label="Grid: M values")
    grid_n = forms.CharField(max_length=400, required=False, label="N values")
    grid_k = forms.CharField(
        max_length=400,
        required=False,
        label="K values",
        help_text=f"Every combination of the three lists, e.g. 64, 128, 256 (at most "
        f"{MAX_VALUES_PER_AXIS} values each).",
    )
    preset = forms.ChoiceField(choices=PRESET_CHOICES, required=False)
    tokens = forms.CharField(
        max_length=400,
        required=False,
        initial="16, 128, 1024, 4096",
        label="Token counts (M) for a model preset",
        help_text="Projection (q/o, k/v), gate/up and down shapes of every layer, at each M.",
    )
    layout = forms.ChoiceField(choices=Layout.choices, initial=Layout.TN)
    budget_per_shape = forms.IntegerField(
        initial=256,
        min_value=1,
        max_value=MAX_BUDGET_PER_SHAPE,
        label="Budget per shape (candidates)",
        error_messages={
            "required": "Enter a budget: how many candidates to evaluate per shape.",
            "invalid": "Enter the budget as a whole number of candidates, e.g. 256.",
            "min_value": "The budget must be at least 1 candidate per shape.",
            "max_value": f"The budget is over the limit of {MAX_BUDGET_PER_SHAPE} per shape.",
        },
    )
    proposer_mix = forms.CharField(
        max_length=200,
        required=False,
        initial=", ".join(f"{k}={v}" for k, v in DEFAULT_MIX.items()),
        help_text=f"name=share, comma separated; proposers: {', '.join(PROPOSERS)}. "
        "Shares are normalised; empty: the engine's default.",
    )
    reward_protocol = forms.ChoiceField(
        choices=[(p, p) for p in REWARD_PROTOCOLS],
        initial=DEFAULT_REWARD_PROTOCOL,
        help_text="The timing protocol whose median the reward compares with the baselines.",
    )
    gpu_pool = forms.ChoiceField(
        required=False,
        label="GPU pool",
        help_text="The GPU architecture queue (gpu.<pool>) whose workers run this campaign's GPU "
        "steps; empty: each shape's own arch (sm90).",
    )

    search_space = forms.ChoiceField(
        choices=Campaign.SearchSpace.choices,
        required=False,
        initial=Campaign.SearchSpace.LIBRARY,
        help_text="Library (the default): a few hundred configs chosen from what CUTLASS, cuBLAS "
        "and Inductor ship, built once by `engine prebuild --library`; full: every valid config, "
        "most of them compiled while the campaign runs.",
    )

    confirm_large = forms.BooleanField(
        required=False,
        label="Launch it although it is large",
        help_text="Needed when the estimated GPU time is over the confirmation threshold.",
    )

    launch_without_worker = forms.BooleanField(
        required=False,
        label="Launch it although no GPU worker is online",
        help_text="It waits, compiled, until a worker of its GPU queue joins.",
    )

    def __init__(
        self,
        *args,
        owner_id: int | None = None,
        served_queues: Collection[str] | None = None,
        **kwargs,
    ):
        """``owner_id``: whose per-user quota of queued GPU time the launch counts against
        (None: no quota check, e.g. a form only rendered); ``served_queues``: the queues online
        workers consume (None: no check that a GPU worker is online)."""
        super().__init__(*args, **kwargs)
        self.owner_id = owner_id
        self.served_queues = served_queues
        pools = gpu_pools()
        field = self.fields["gpu_pool"]
        field.choices = [("", "per shape (its arch)"), *[(p, p) for p in pools]]
        field.error_messages["invalid_choice"] = (
            f"Unknown GPU pool %(value)s: choose one of {', '.join(pools)}, or leave it empty."
        )

    def clean_name(self) -> str:
        name = BIDI_CONTROLS.sub("", self.cleaned_data["name"]).strip()
        if not name:
            raise forms.ValidationError("Enter a name with visible characters.")
        return name

    def clean_gpu_pool(self) -> str:
        return self.cleaned_data.get("gpu_pool") or ""

    def clean_search_space(self) -> str:
        return self.cleaned_data.get("search_space") or Campaign.SearchSpace.LIBRARY

    def clean_shapes(self) -> list[tuple[int, int, int]]:
        found: list[tuple[int, int, int]] = []
        errors: list[str] = []
        for number, line in enumerate(self.cleaned_data["shapes"].splitlines(), start=1):
            text = line.strip()
            if not text:
                continue
            if len(text) > MAX_SHOWN_CHARS:
                errors.append(f"line {number}: {text[:MAX_SHOWN_CHARS]!r}… is not a shape MxNxK")
                continue
            try:
                p = EngineProblem.parse(text, EngineLayout.NN)
            except ProblemError as exc:
                errors.append(f"line {number}: {exc}")
            else:
                found.append((p.m, p.n, p.k))
        if errors:
            raise forms.ValidationError(capped(errors))
        return found

    def clean_grid_m(self) -> list[int]:
        return parse_values(self.cleaned_data["grid_m"], what="M", limit=MAX_VALUES_PER_AXIS)

    def clean_grid_n(self) -> list[int]:
        return parse_values(self.cleaned_data["grid_n"], what="N", limit=MAX_VALUES_PER_AXIS)

    def clean_grid_k(self) -> list[int]:
        return parse_values(self.cleaned_data["grid_k"], what="K", limit=MAX_VALUES_PER_AXIS)

    def clean_tokens(self) -> list[int]:
        return parse_values(self.cleaned_data["tokens"], what="M", limit=MAX_TOKEN_COUNTS)

    def clean_proposer_mix(self) -> dict[str, float]:
        return parse_mix(self.cleaned_data["proposer_mix"])

    def clean(self) -> dict:
        cleaned = super().clean()
        if any(f in self.errors for f in ("shapes", "grid_m", "grid_n", "grid_k", "tokens")):
            return cleaned
        wanted = list(cleaned.get("shapes") or [])
        axes = [cleaned.get(f) or [] for f in ("grid_m", "grid_n", "grid_k")]
        if any(axes) and not all(axes):
            for field, values in zip(("grid_m", "grid_n", "grid_k"), axes, strict=True):
                if not values:
                    self.add_error(field, "A grid needs values for M, N and K.")
            return cleaned
        wanted += grid_shapes(*axes)
        preset = cleaned.get("preset") or ""
        if preset in MODELS and not cleaned.get("tokens"):
            self.add_error("tokens", "A model preset needs at least one token count (M).")
            return cleaned
        wanted += preset_shapes(preset, cleaned.get("tokens") or [])
        distinct = list(dict.fromkeys(wanted))
        cleaned["duplicates"] = len(wanted) - len(distinct)
        if not distinct:
            self.add_error("shapes", "Enter at least one shape: MxNxK lines, a grid or a preset.")
            return cleaned
        if len(distinct) > MAX_SHAPES:
            self.add_error(
                "shapes",
                f"{len(distinct)} shapes is over the limit of {MAX_SHAPES} per campaign.",
            )
            return cleaned
        if "layout" not in cleaned:
            return cleaned
        layout = EngineLayout(cleaned["layout"])
        problems, errors = [], []
        for m, n, k in distinct:
            try:
                problems.append(EngineProblem(m, n, k, layout))
            except ProblemError as exc:
                errors.append(f"{m}x{n}x{k}: {exc}")
        if errors:
            self.add_error(None, forms.ValidationError(capped(errors)))
            return cleaned
        cleaned["problems"] = problems
        if "budget_per_shape" in cleaned:
            cleaned["estimated_gpu_s"] = estimated_gpu_seconds(
                shapes=len(problems), budget_per_shape=cleaned["budget_per_shape"]
            )
            self._check_size(cleaned["estimated_gpu_s"], confirmed=cleaned.get("confirm_large"))
        self._check_worker(cleaned.get("gpu_pool") or "", cleaned.get("launch_without_worker"))
        return cleaned

    def _check_worker(self, pool: str, confirmed: bool | None) -> None:
        """A launch no online worker can run needs its box ticked."""
        if self.served_queues is None or confirmed:
            return
        queue = launch_queue(pool)
        if queue not in self.served_queues:
            self.add_error(
                "launch_without_worker",
                f"No GPU worker of {queue} is online: the campaign would wait (compiled, "
                f"nothing timed) until one joins. Tick the box to launch it anyway, or start a "
                f'worker first (README, "Adding a GPU worker").',
            )

    def _check_size(self, estimate: float, *, confirmed: bool | None) -> None:
        """A large launch needs its box ticked; none may take the owner past their quota."""
        threshold = confirm_threshold_seconds()
        if estimate > threshold and not confirmed:
            self.add_error(
                "confirm_large",
                f"This campaign is estimated at {duration_text(estimate)} of GPU time, over "
                f"{duration_text(threshold)}: tick the box to launch it anyway.",
            )
        if self.owner_id is None:
            return
        queued = queued_gpu_seconds(owner_id=self.owner_id)
        quota = quota_seconds()
        if queued + estimate > quota:
            self.add_error(
                None,
                f"Over your quota of queued GPU time: this campaign is estimated at "
                f"{duration_text(estimate)} and your unfinished campaigns still owe "
                f"{duration_text(queued)}, more than {duration_text(quota)} together. Cancel "
                f"or wait for one, or launch fewer shapes or a smaller budget.",
            )


def launch_queue(pool: str) -> str:
    """The GPU queue a new campaign's steps go to: its pool's, else a new shape's arch's."""
    return gpu_queue(pool=pool, arch=DEFAULT_ARCH)


class CandidateFilterForm(forms.Form):
    """The shape page's sort and filters; unknown values are ignored, not errors."""

    sort = forms.ChoiceField(
        choices=[("speedup", "Speedup"), ("reward", "Reward"), ("time", "Time"), ("name", "Name")],
        required=False,
    )
    status = forms.ChoiceField(required=False)
    proposer = forms.ChoiceField(required=False)
    family = forms.ChoiceField(required=False)

    def __init__(self, *args, proposers=(), families=(), **kwargs):
        super().__init__(*args, **kwargs)
        anything = [("", "any")]
        self.fields["status"].choices = anything + list(Candidate.Status.choices)
        self.fields["proposer"].choices = anything + [(p, p) for p in proposers]
        self.fields["family"].choices = anything + [(f, f) for f in families]


class HeatmapForm(forms.Form):
    """Which slice of the (M, N) heatmap to show."""

    k = forms.TypedChoiceField(coerce=int, required=False, label="K")
    layout = forms.ChoiceField(choices=[("", "first"), *Layout.choices], required=False)
    baseline = forms.ChoiceField(required=False)

    def __init__(self, *args, ks=None, layouts=None, baselines=None, **kwargs):
        """``baselines``: the keys the page offers (those timed for some shape); None: all."""
        super().__init__(*args, **kwargs)
        labels = dict(BaselineResult.Baseline.choices)
        self.fields["baseline"].choices = [
            (b, labels[b]) for b in (baselines if baselines is not None else labels)
        ]
        self.fields["baseline"].initial = BaselineResult.Baseline.CUBLASLT_AUTOTUNE
        if ks is None:  # the JSON endpoint: any positive K; the selector falls back
            self.fields["k"] = forms.IntegerField(min_value=1, required=False, label="K")
        else:
            self.fields["k"].choices = [(k, k) for k in ks]
        if layouts is not None:
            self.fields["layout"].choices = [(v, v.upper()) for v in layouts]
