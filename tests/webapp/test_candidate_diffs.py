import hashlib

import pytest
from django.urls import reverse

from webapp.campaigns import diffs
from webapp.campaigns.models import Candidate
from webapp.campaigns.ratios import problem_refresh_best

pytestmark = pytest.mark.django_db

PARENT = """__global__ void hgemm(half* c) {
  constexpr int kStages = 3;
  constexpr int kTileM = 128;
  mainloop<kStages>(c);
}
"""
CHILD = PARENT.replace("kStages = 3", "kStages = 4").replace("(c);", "(c); // <b>&")


def make(problem, name, *, source="", reward=None, parent=None, config=None):
    return Candidate.objects.create(
        problem=problem,
        name=name,
        family="sm90",
        config=config or {"stages": 3, "tile_m": 128},
        source=source,
        source_hash=hashlib.sha256(name.encode()).hexdigest(),
        proposer="evolve",
        parent=parent,
        reward=reward,
    )


@pytest.fixture
def family(queued_campaign):
    problem = queued_campaign.problems.first()
    best = make(problem, "best<x>", source=PARENT.replace("128", "256"), reward=0.1)
    # the shape's best: verified and timed beside a baseline in one session
    best.status = Candidate.Status.DONE
    best.timings = {"device": {"median_s": 1.0e-4, "baselines": {"cublaslt_autotune": 1.1e-4}}}
    best.save()
    parent = make(problem, "parent", source=PARENT, reward=-0.2)
    child = make(problem, "child", source=CHILD, reward=-0.1, parent=parent)
    problem_refresh_best(problem=problem)
    return best, parent, child


def test_it_diffs_a_source_against_its_parent_and_the_best(family):
    best, parent, child = family
    against_parent, against_best = diffs.candidate_diffs(candidate=child, best=best)
    assert (against_parent.against, against_parent.other, against_parent.compared) == (
        "parent",
        parent,
        "source",
    )
    lines = {line: cls for cls, line in against_parent.unified}
    assert lines["--- parent"] == "diff-file"
    assert lines["-  constexpr int kStages = 3;"] == "diff-del"
    assert lines["+  constexpr int kStages = 4;"] == "diff-add"
    assert against_best.against == "best"
    best_lines = [line for _, line in against_best.unified]
    assert "-  constexpr int kTileM = 256;" in best_lines


def test_the_side_by_side_table_escapes_the_source_and_names(family):
    best, _, child = family
    table = diffs.candidate_diffs(candidate=child, best=best)[1].side_by_side
    assert table.startswith("\n    <table")
    assert "&lt;b&gt;&amp;" in table
    assert "<b>" not in table
    assert "best&lt;x&gt;" in table


def test_the_best_and_a_parentless_candidate_get_no_diff(family):
    best, parent, _ = family
    assert diffs.candidate_diffs(candidate=best, best=best) == []
    assert [d.against for d in diffs.candidate_diffs(candidate=parent, best=best)] == ["best"]


def test_identical_sources_say_so(queued_campaign):
    problem = queued_campaign.problems.first()
    a = make(problem, "a", source=PARENT, config={"x": 1})
    b = make(problem, "b", source=PARENT, config={"x": 2}, parent=a)
    (diff,) = diffs.candidate_diffs(candidate=b, best=None)
    assert diff.identical
    assert diff.side_by_side == ""


def test_without_a_source_it_diffs_the_config(queued_campaign):
    problem = queued_campaign.problems.first()
    a = make(problem, "a", source=PARENT, config={"stages": 3, "tile_m": 128})
    b = make(problem, "b", config={"stages": 4, "tile_m": 128}, parent=a)  # no source
    (diff,) = diffs.candidate_diffs(candidate=b, best=None)
    assert diff.compared == "config"
    changed = [line for cls, line in diff.unified if cls in ("diff-add", "diff-del")]
    assert changed == ['-  "stages": 3,', '+  "stages": 4,']


def test_a_huge_source_is_not_diffed(queued_campaign, monkeypatch):
    monkeypatch.setattr(diffs, "MAX_LINES", 3)
    problem = queued_campaign.problems.first()
    a = make(problem, "a", source=PARENT)
    b = make(problem, "b", source=CHILD, parent=a)
    (diff,) = diffs.candidate_diffs(candidate=b, best=None)
    assert diff.too_long
    assert not diff.identical


def test_the_candidate_page_shows_both_diffs(client, family):
    _, _, child = family
    page = client.get(reverse("candidate-detail", args=[child.id])).content.decode()
    assert 'id="diff-parent"' in page
    assert 'id="diff-best"' in page
    assert '<span class="diff-add">+  constexpr int kStages = 4;</span>' in page
    assert "// &lt;b&gt;&amp;" in page
    assert 'class="diff"' in page  # HtmlDiff's side-by-side table


def test_an_imported_candidate_diffs_its_config_against_the_best(client, recorded_campaign):
    problem = recorded_campaign.problems.get(m=4096, n=4096, k=4096, layout="nn")
    best, second = problem.candidates.order_by("-reward")[:2]
    page = client.get(reverse("candidate-detail", args=[second.id])).content.decode()
    assert 'id="diff-best"' in page
    assert "config JSON: no source was recorded" in page
    assert best.name in page
    best_page = client.get(reverse("candidate-detail", args=[best.id])).content.decode()
    assert "This is the shape's best candidate." in best_page


def test_an_llm_candidate_page_shows_the_prompt_and_the_raw_answer(client, queued_campaign):
    problem = queued_campaign.problems.first()
    candidate = make(problem, "llm_ab12", source="// <kernel>")
    candidate.proposer = "llm"
    candidate.outcome = {
        "status": "rejected",
        "reason": "nvcc",
        "meta": {
            "messages": [
                {"role": "system", "content": "You write CUDA <HGEMM> kernels."},
                {"role": "user", "content": "Shape 4096x4096x4096, layout NN."},
            ],
            "answer": "```cuda\n#include <cuda.h>\n```",
        },
    }
    candidate.save()
    page = client.get(reverse("candidate-detail", args=[candidate.id])).content.decode()
    assert 'id="conversation"' in page
    assert "You write CUDA &lt;HGEMM&gt; kernels." in page  # escaped
    assert "Shape 4096x4096x4096, layout NN." in page
    assert "#include &lt;cuda.h&gt;" in page
    other = make(problem, "family_one")
    page = client.get(reverse("candidate-detail", args=[other.id])).content.decode()
    assert 'id="conversation"' not in page


@pytest.mark.parametrize(
    ("outcome", "said"),
    [
        ({"meta": {"carried_from": "128x128x16384_tn"}}, "<code>128x128x16384_tn</code>"),
        (None, "a nearby problem"),  # a dashboard campaign's proposal, its origin not kept
    ],
)
def test_a_transferred_candidate_says_where_it_was_carried_from(
    client, queued_campaign, outcome, said
):
    problem = queued_campaign.problems.first()
    carried = make(problem, "carried", source=PARENT)
    carried.proposer, carried.outcome = "transfer", outcome
    carried.save()
    page = client.get(reverse("candidate-detail", args=[carried.id])).content.decode()
    assert "the transfer proposer carried this config over from" in page
    assert said in page
    assert "proposed from scratch" not in page
