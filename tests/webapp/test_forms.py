import os
import subprocess
import sys

import pytest

from engine.problem import Layout
from webapp.campaigns import launch
from webapp.campaigns.forms import (
    MAX_BUDGET_PER_SHAPE,
    MAX_SHAPES,
    MAX_VALUES_PER_AXIS,
    CampaignForm,
)

VALID = {
    "name": "try",
    "budget_per_shape": "256",
    "proposer_mix": "rl=0.5, evolve=0.3, random=0.2",
    "reward_protocol": "device",
}


def form_with(shapes: str = "", layout: str = "nn", name: str = "try", **fields) -> CampaignForm:
    return CampaignForm(data={**VALID, "name": name, "shapes": shapes, "layout": layout, **fields})


def errors_of(form: CampaignForm, field: str) -> list[str]:
    assert not form.is_valid()
    return form.errors[field]


def shape_errors(form: CampaignForm) -> list[str]:
    assert not form.is_valid()
    return form.errors["shapes"]


def test_it_accepts_shapes_one_per_line():
    form = form_with("4096x4096x4096\n  16x4096X1024  \n\n", layout="tn")
    assert form.is_valid(), form.errors
    problems = form.cleaned_data["problems"]
    assert [p.key for p in problems] == ["4096x4096x4096_tn", "16x4096x1024_tn"]
    assert all(p.layout is Layout.TN for p in problems)


def test_it_merges_duplicate_shapes():
    form = form_with("64x64x64\n64x64x64\n 64X64X64\n128x64x64")
    assert form.is_valid(), form.errors
    assert [p.shape for p in form.cleaned_data["problems"]] == ["64x64x64", "128x64x64"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("4096.0", "cannot read shape '4096.0'"),
        ("4096x4096x4096.0", "cannot read shape"),
        ("0x8x8", "M must be positive"),
        ("-8x8x8", "cannot read shape '-8x8x8'"),
        ("8x9x8", "N=9 must be a multiple of 8"),
        ("8x8x12", "K=12 must be a multiple of 8"),
        ("big matrices please", "cannot read shape"),
        ("4096×4096×4096", "cannot read shape"),
        ("4096x4096", "cannot read shape"),
        ("2000000x8x8", "over the limit"),
        ("1048576x1048576x1048576", "over the"),
    ],
)
def test_it_rejects_a_bad_shape_with_the_engine_message(line, message):
    errors = shape_errors(form_with(line))
    assert len(errors) == 1
    assert errors[0].startswith("line 1: ")
    assert message in errors[0]


def test_it_rejects_a_non_integer_shape():
    assert "cannot read shape '4096.0'" in shape_errors(form_with("4096.0"))[0]


def test_it_reports_each_bad_line_by_number():
    errors = shape_errors(form_with("64x64x64\n0x8x8\n\n8x9x8\n128x128x128"))
    assert [e.split(":")[0] for e in errors] == ["line 2", "line 4"]


def test_it_rejects_an_empty_shape_list():
    for blank in ["", "\n   \n"]:
        assert shape_errors(form_with(blank)) == [
            "Enter at least one shape: MxNxK lines, a grid or a preset."
        ]


def test_it_shortens_a_huge_line_in_its_message():
    errors = shape_errors(form_with("8" * 500))
    assert len(errors[0]) < 100


def test_it_caps_the_number_of_shapes():
    lines = "\n".join(f"{8 * (i + 1)}x8x8" for i in range(MAX_SHAPES + 1))
    assert f"over the limit of {MAX_SHAPES}" in shape_errors(form_with(lines))[0]
    lines = "\n".join(f"{8 * (i + 1)}x8x8" for i in range(MAX_SHAPES))
    assert form_with(lines, confirm_large="on").is_valid()  # 1024 × 256: two GPU days


def test_it_rejects_an_unknown_layout():
    form = form_with("64x64x64", layout="nt")
    assert not form.is_valid()
    assert "layout" in form.errors
    assert "problems" not in form.cleaned_data


def test_it_requires_a_name():
    form = form_with("64x64x64", name="")
    assert not form.is_valid()
    assert "name" in form.errors


def test_a_grid_gives_every_combination():
    form = form_with(grid_m="64, 128 128", grid_n="256;512", grid_k="1024")
    assert form.is_valid(), form.errors
    shapes = [p.shape for p in form.cleaned_data["problems"]]
    assert shapes == ["64x256x1024", "64x512x1024", "128x256x1024", "128x512x1024"]


def test_lines_grid_and_preset_are_merged_without_duplicates():
    form = form_with(
        "16x4096x4096\n64x64x64",
        grid_m="64",
        grid_n="64",
        grid_k="64",
        preset="llama-3-8b",
        tokens="16",
    )
    assert form.is_valid(), form.errors
    assert [p.shape for p in form.cleaned_data["problems"]] == [
        "16x4096x4096",
        "64x64x64",
        "16x1024x4096",
        "16x14336x4096",
        "16x4096x14336",
    ]
    assert form.cleaned_data["duplicates"] == 2


@pytest.mark.parametrize(
    ("preset", "tokens", "count", "example"),
    [
        ("cuda-l2", "", 1000, "12288x64x16384"),
        ("llama-3-8b", "1, 4096", 8, "4096x14336x4096"),
        ("llama-3-70b", "128", 4, "128x28672x8192"),
        ("qwen2.5-7b", "128", 4, "128x512x3584"),
        ("mixtral-8x7b", "2048", 4, "2048x4096x14336"),
    ],
)
def test_the_presets(preset, tokens, count, example):
    form = form_with(preset=preset, tokens=tokens, layout="tn", confirm_large="on")
    assert form.is_valid(), form.errors
    shapes = [p.shape for p in form.cleaned_data["problems"]]
    assert len(shapes) == count
    assert example in shapes


def test_a_model_preset_needs_token_counts():
    assert errors_of(form_with(preset="llama-3-8b", tokens=""), "tokens") == [
        "A model preset needs at least one token count (M)."
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "M: 0 must be positive"),
        ("-64", "M: '-64' is not a whole number"),
        ("64.5", "M: '64.5' is not a whole number"),
        ("lots", "M: 'lots' is not a whole number"),
        ("2000000", "M: 2000000 is over the limit of 1048576"),
        (" ".join(str(8 * i) for i in range(1, 40)), f"over the limit of {MAX_VALUES_PER_AXIS}"),
    ],
)
def test_a_grid_value_list_rejects_bad_values(value, message):
    errors = errors_of(form_with(grid_m=value, grid_n="64", grid_k="64"), "grid_m")
    assert message in errors[0]


def test_a_grid_needs_all_three_lists():
    form = form_with(grid_m="64", grid_k="64")
    assert errors_of(form, "grid_n") == ["A grid needs values for M, N and K."]


def test_a_grid_reports_misaligned_combinations_briefly():
    form = form_with(grid_m="64", grid_n=" ".join(str(8 * i + 1) for i in range(10)), grid_k="64")
    errors = errors_of(form, "__all__")
    assert len(errors) == 6
    assert errors[0].startswith("64x1x64: N=1 must be a multiple of 8")
    assert errors[-1] == "… and 5 more"


def test_a_grid_over_the_shape_limit_is_rejected():
    values = " ".join(str(8 * i) for i in range(1, 12))
    errors = errors_of(form_with(grid_m=values, grid_n=values, grid_k=values), "shapes")
    assert errors == [f"1331 shapes is over the limit of {MAX_SHAPES} per campaign."]


@pytest.mark.parametrize(
    ("budget", "message"),
    [
        ("0", "The budget must be at least 1 candidate per shape."),
        ("-5", "The budget must be at least 1 candidate per shape."),
        ("many", "Enter the budget as a whole number of candidates, e.g. 256."),
        ("2.5", "Enter the budget as a whole number of candidates, e.g. 256."),
        ("", "Enter a budget: how many candidates to evaluate per shape."),
        (str(MAX_BUDGET_PER_SHAPE + 1), f"over the limit of {MAX_BUDGET_PER_SHAPE}"),
    ],
)
def test_the_budget_rejects_bad_input(budget, message):
    assert (
        message in errors_of(form_with("64x64x64", budget_per_shape=budget), "budget_per_shape")[0]
    )


@pytest.mark.parametrize(
    ("mix", "expected"),
    [
        ("rl=1, evolve=1", {"rl": 0.5, "evolve": 0.5}),
        ("random: 2", {"random": 1.0}),
        ("rl=0, evolve=1", {"evolve": 1.0}),
        ("", {}),
    ],
)
def test_the_proposer_mix_is_normalised(mix, expected):
    form = form_with("64x64x64", proposer_mix=mix)
    assert form.is_valid(), form.errors
    assert form.cleaned_data["proposer_mix"] == pytest.approx(expected)


@pytest.mark.parametrize(
    ("mix", "message"),
    [
        ("llm=1", "unknown proposer 'llm'"),
        ("rl", "write name=share"),
        ("rl=-1", "'-1' is not a share"),
        ("rl=lots", "'lots' is not a share"),
        ("rl=nan", "'nan' is not a share"),
        ("rl=0, evolve=0", "add up to 0"),
        ("rl=1, rl=2", "rl is given twice"),
    ],
)
def test_the_proposer_mix_rejects_bad_input(mix, message):
    assert message in errors_of(form_with("64x64x64", proposer_mix=mix), "proposer_mix")[0]


def test_it_rejects_an_unknown_reward_protocol_and_preset():
    assert errors_of(form_with("64x64x64", reward_protocol="fastest"), "reward_protocol")
    assert errors_of(form_with("64x64x64", preset="gpt-5"), "preset")


def test_it_estimates_the_gpu_time_from_the_recorded_run():
    form = form_with("64x64x64\n128x128x128", budget_per_shape="100")
    assert form.is_valid(), form.errors
    assert form.cleaned_data["estimated_gpu_s"] == pytest.approx(2 * 100 * 221 / 334)
    assert launch.duration_text(132.3) == "2 min"
    assert launch.duration_text(7200) == "2.0 h"


def test_the_web_process_takes_the_engines_names_without_importing_torch():
    script = (
        "import sys, django; django.setup()\n"
        "from webapp.campaigns import forms, launch, runner, views\n"
        "print(sorted(launch.PROPOSERS), 'torch' in sys.modules)\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "webapp.settings_test"}
    ran = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert ran.stdout.split("\n")[-2] == "['evolve', 'random', 'rl', 'seed', 'transfer'] False"
