import pytest

from engine.problem import Layout
from webapp.campaigns.forms import MAX_SHAPES, CampaignForm


def form_with(shapes: str, layout: str = "nn", name: str = "try") -> CampaignForm:
    return CampaignForm(data={"name": name, "shapes": shapes, "layout": layout})


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
        assert shape_errors(form_with(blank)) == ["Enter at least one shape, e.g. 4096x4096x4096."]


def test_it_shortens_a_huge_line_in_its_message():
    errors = shape_errors(form_with("8" * 500))
    assert len(errors[0]) < 100


def test_it_caps_the_number_of_shapes():
    lines = "\n".join(f"{8 * (i + 1)}x8x8" for i in range(MAX_SHAPES + 1))
    assert f"over the limit of {MAX_SHAPES}" in shape_errors(form_with(lines))[0]
    lines = "\n".join(f"{8 * (i + 1)}x8x8" for i in range(MAX_SHAPES))
    assert form_with(lines).is_valid()


def test_it_rejects_an_unknown_layout():
    form = form_with("64x64x64", layout="nt")
    assert not form.is_valid()
    assert "layout" in form.errors
    assert "problems" not in form.cleaned_data


def test_it_requires_a_name():
    form = form_with("64x64x64", name="")
    assert not form.is_valid()
    assert "name" in form.errors
