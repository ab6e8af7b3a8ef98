"""engine.publish.bundle.build_bundle, the one bundle builder (`engine bundle` and the dashboard's
bundle.zip): a shape's kernel must pass compute-sanitizer and must not have been rejected in the
finals; what it passes over is named in the README."""

from __future__ import annotations

import zipfile
from pathlib import Path

from engine.cli import main
from engine.codegen import Sm90Config
from engine.execution.final import SavedFinals, final_settings
from engine.problem import Problem
from engine.publish.bundle import (
    NOT_SANITIZED,
    CampaignResults,
    build_bundle,
    bundle_folder,
    final_rejections,
    read_manifest,
)
from tests.engine.publish.test_bundle import PROBLEM as RECORDED
from tests.engine.publish.test_bundle import (
    ranked_names,
    recorded_campaign,
    sanitizer_verdicts,
)
from tests.engine.publish.test_bundle_kinds import record

PROBLEM = Problem.parse("256x4096x4096", "tn")
FAST, SLOWER = [c for c in Sm90Config.candidates(PROBLEM.layout) if c.is_valid(PROBLEM)][:2]

# the search records keep no quartiles: the GPU names the spread they are judged with
H200 = {"gpu_name": "NVIDIA H200"}


def final_section(rejected: str) -> dict:
    """A shape's final (engine.execution.final.final_summary) whose checks rejected one kernel."""
    rejection = {"reason": "unwritten", "message": "8 of 9 checked timed calls failed"}
    return {
        "protocols": {
            "device": {"rejected_while_timed": [rejected], "rejections": {rejected: rejection}},
            "offline": {"rejected_while_timed": [], "rejections": {}},
        },
        "sanitize": {rejected: {"ok": True}},
    }


def results(**extra) -> CampaignResults:
    records = [record(FAST, seconds=0.5), record(SLOWER, seconds=0.7)]
    return CampaignResults(
        title="t", problems=(PROBLEM,), records={PROBLEM.key: records}, environment=H200, **extra
    )


def names(out: Path) -> list[str]:
    return [k["name"] for k in read_manifest(out)["kernels"]]


def readme(out: Path) -> str:
    return zipfile.ZipFile(out).read(f"{bundle_folder('t')}/README.md").decode()


def test_a_final_section_names_the_kernels_its_checks_rejected_and_why():
    assert final_rejections(final_section(FAST.name)) == {
        FAST.name: "device: unwritten: 8 of 9 checked timed calls failed"
    }
    assert final_rejections({"error": "no top kernel passed"}) == {}


def test_a_kernel_rejected_in_the_finals_is_passed_over_and_the_readme_says_why(tmp_path):
    rejected = {PROBLEM.key: final_rejections(final_section(FAST.name))}
    out = tmp_path / "b.zip"
    contents = build_bundle(results(rejected_in_finals=rejected), out)
    assert names(out) == [SLOWER.name]
    [left] = contents.left_out
    assert left.kernel == FAST.name
    assert "rejected in the finals: device: unwritten" in readme(out)


def test_a_kernel_without_a_passing_sanitizer_verdict_is_left_out_and_the_readme_says_so(
    tmp_path,
):
    out = tmp_path / "b.zip"
    build_bundle(results(), out, admissible=lambda kernel: kernel.name == SLOWER.name)
    assert names(out) == [SLOWER.name]
    text = readme(out)
    assert f"`{FAST.name}` | {NOT_SANITIZED}" in text
    assert "Every kernel here passed compute-sanitizer" in text


def test_no_admissible_kernel_bundles_nothing_and_names_the_best_left_out(tmp_path):
    out = tmp_path / "b.zip"
    contents = build_bundle(results(), out, admissible=lambda _kernel: False)
    assert names(out) == []
    [left] = contents.left_out
    assert (left.kernel, left.more) == (FAST.name, 1)
    assert "(and 1 more ranked above the one chosen)" in readme(out)


def test_a_model_written_record_stored_without_its_source_is_left_out_not_an_error(tmp_path):
    lost = record(None, seconds=0.3, name="llm_0123456789abcdef", family="llm")
    found = CampaignResults(
        title="t",
        problems=(PROBLEM,),
        records={PROBLEM.key: [lost, record(FAST, seconds=0.5)]},
        environment=H200,
    )
    out = tmp_path / "b.zip"
    contents = build_bundle(found, out)
    assert names(out) == [FAST.name]
    assert "no source stored" in contents.left_out[0].why


def test_engine_bundle_leaves_out_a_kernel_its_saved_finals_rejected(tmp_path):
    db = recorded_campaign(tmp_path)
    best, second = ranked_names(db)[:2]
    sanitizer_verdicts(db, {best: True, second: True})
    saved = SavedFinals(db.with_suffix(".finals.json"))
    saved.add_final(
        RECORDED.key, [best, second], final_section(best), final_settings(("device",), 1.0, ())
    )
    out = tmp_path / "bundle.zip"
    args = ["bundle", "recorded", "--db", str(db), "--out", str(out), "--include-slower"]
    assert main(args) == 0
    assert names(out) == [second]
