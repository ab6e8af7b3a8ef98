from __future__ import annotations

from django import forms

from engine.problem import Layout as EngineLayout
from engine.problem import Problem as EngineProblem
from engine.problem import ProblemError
from webapp.campaigns.models import BaselineResult, Candidate, Layout

MAX_SHAPES = 64
MAX_SHOWN_CHARS = 40  # a pasted essay is quoted back shortened


class CampaignForm(forms.Form):
    name = forms.CharField(max_length=200)
    shapes = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 8, "placeholder": "4096x4096x4096\n8192x1024x4096"}),
        max_length=MAX_SHAPES * 64,
        error_messages={"required": "Enter at least one shape, e.g. 4096x4096x4096."},
        help_text=f"One MxNxK per line, at most {MAX_SHAPES}; duplicates are merged.",
    )
    layout = forms.ChoiceField(choices=Layout.choices, initial=Layout.NN)

    def clean_shapes(self) -> list[EngineProblem]:
        problems: dict[EngineProblem, None] = {}  # ordered set
        errors: list[str] = []
        for number, line in enumerate(self.cleaned_data["shapes"].splitlines(), start=1):
            text = line.strip()
            if not text:
                continue
            if len(text) > MAX_SHOWN_CHARS:
                errors.append(f"line {number}: {text[:MAX_SHOWN_CHARS]!r}… is not a shape MxNxK")
                continue
            try:
                problems[EngineProblem.parse(text, EngineLayout.NN)] = None
            except ProblemError as exc:
                errors.append(f"line {number}: {exc}")
        if errors:
            raise forms.ValidationError(errors)
        if len(problems) > MAX_SHAPES:
            raise forms.ValidationError(
                f"{len(problems)} shapes is over the limit of {MAX_SHAPES} per campaign."
            )
        return list(problems)

    def clean(self) -> dict:
        cleaned = super().clean()
        if "shapes" in cleaned and "layout" in cleaned:
            layout = EngineLayout(cleaned["layout"])
            cleaned["problems"] = [EngineProblem(p.m, p.n, p.k, layout) for p in cleaned["shapes"]]
        return cleaned


class CandidateFilterForm(forms.Form):
    """The shape page's sort and filters; unknown values are ignored, not errors."""

    sort = forms.ChoiceField(
        choices=[("reward", "Reward"), ("time", "Time"), ("name", "Name")], required=False
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

    def __init__(self, *args, ks=None, layouts=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["baseline"].choices = BaselineResult.Baseline.choices
        self.fields["baseline"].initial = BaselineResult.Baseline.CUBLASLT_AUTOTUNE
        if ks is None:  # the JSON endpoint: any positive K; the selector falls back
            self.fields["k"] = forms.IntegerField(min_value=1, required=False, label="K")
        else:
            self.fields["k"].choices = [(k, k) for k in ks]
        if layouts is not None:
            self.fields["layout"].choices = [(v, v.upper()) for v in layouts]
