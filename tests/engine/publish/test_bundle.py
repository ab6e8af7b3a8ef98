"""Kernel bundles from a fixture campaign built from recorded H200 measurements."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from engine.campaign.storage import SqliteStorage
from engine.cli import main
from engine.commands.bundle_command import campaign_results
from engine.outcomes import CandidateRecord
from engine.problem import Problem
from engine.publish.bundle import (
    best_kernels,
    kernel_from_record,
    read_manifest,
    unpack,
    write_bundle,
)
from tests.campaign_dbs import write_campaign

RECORDED = (
    Path(__file__).resolve().parents[3]
    / "bench/results/2026-12-02-h200-families/families-run1.json"
)
PROBLEM = Problem.parse("4096x4096x4096", "tn")


def recorded_records(problem: Problem) -> tuple[list[CandidateRecord], dict]:
    """The problem's candidates as measured on the H200 (device protocol medians)."""
    report = json.loads(RECORDED.read_text())
    row = next(r for r in report["sweep"] if r["problem"] == problem.key)
    seconds = row["seconds"]
    baselines = {
        b: min(seconds[f"{b}_nn"], seconds[f"{b}_tn"])
        for b in ("torch", "cublas", "cublaslt_heuristic", "cublaslt_autotune")
    }
    records = [
        CandidateRecord(
            name=name,
            family=report["configs"][name]["family"],
            knobs=report["configs"][name]["knobs"],
            proposer="random",
            status="ok",
            reward=math.log(baselines["cublaslt_autotune"] / t),
            seconds=t,
            baselines=baselines,
        )
        for name, t in seconds.items()
        if name in report["configs"]
    ]
    return records, row["environment"]


def results_of(db: Path, campaign: str = "recorded"):
    """The campaign as `engine bundle` reads it (engine.publish.bundle.CampaignResults)."""
    storage = SqliteStorage(db)
    try:
        return campaign_results(storage, campaign, db)
    finally:
        storage.close()


@pytest.fixture
def campaign_db(tmp_path: Path) -> Path:
    return recorded_campaign(tmp_path)


def recorded_campaign(tmp_path: Path) -> Path:
    """An engine campaign database: the recorded 4096^3 TN candidates and an unmeasured shape."""
    records, environment = recorded_records(PROBLEM)
    return write_campaign(
        tmp_path / "campaign.sqlite",
        "recorded",
        # 64x64x64: nothing measured, falls back
        {PROBLEM: records, Problem.parse("64x64x64"): []},
        settings={"environment": environment},
    )


def test_it_bundles_nothing_that_does_not_beat_torch(campaign_db, tmp_path):
    kernels = best_kernels(results_of(campaign_db))
    # measured on the H200: no sampled config beat torch.matmul at 4096^3 TN
    assert kernels == []


def test_it_picks_the_highest_reward_kernel_per_shape_when_asked(campaign_db):
    kernels = best_kernels(results_of(campaign_db), include_slower=True)
    storage = SqliteStorage(campaign_db)
    best = max(storage.candidates("recorded", PROBLEM.key), key=lambda r: r.reward)
    storage.close()
    assert [k.problem for k in kernels] == [PROBLEM]
    assert kernels[0].name == best.name
    assert "gemmforge_hgemm" in kernels[0].source


def sanitizer_verdicts(db: Path, verdicts: dict[str, bool]) -> None:
    """compute-sanitizer verdicts in the campaign's finals file, as engine optimize saves them."""
    from engine.commands.bundle_command import kernel_config
    from engine.compilation.compile import source_hash
    from engine.execution.final import SavedFinals, kernel_id
    from engine.verify.sanitize import verdict_key

    storage = SqliteStorage(db)
    records = {r.name: r for r in storage.candidates("recorded", PROBLEM.key)}
    storage.close()
    saved = SavedFinals(db.with_suffix(".finals.json"))
    for name, ok in verdicts.items():
        config = kernel_config(kernel_from_record(PROBLEM, records[name]))
        at = verdict_key(config, PROBLEM)
        saved.add_sanitized(kernel_id(name, source_hash(config.render())), at, {"ok": ok})


def ranked_names(db: Path) -> list[str]:
    storage = SqliteStorage(db)
    ranked = sorted(storage.candidates("recorded", PROBLEM.key), key=lambda r: -r.reward)
    storage.close()
    return [r.name for r in ranked]


def bundled_kernels(out: Path) -> list[str]:
    return [k["name"] for k in read_manifest(out)["kernels"]]


def test_the_cli_bundles_only_kernels_that_passed_compute_sanitizer(campaign_db, tmp_path):
    best, second = ranked_names(campaign_db)[:2]
    out = tmp_path / "bundle.zip"
    args = ["bundle", "recorded", "--db", str(campaign_db), "--out", str(out), "--include-slower"]
    assert main(args) == 0
    assert bundled_kernels(out) == []  # no verdicts: nothing sanitized, nothing bundled
    sanitizer_verdicts(campaign_db, {best: False, second: True})
    assert main(args) == 0
    assert bundled_kernels(out) == [second]  # the best failed: the best that passed
    assert main([*args, "--allow-unsanitized"]) == 0
    assert bundled_kernels(out) == [best]


def test_the_cli_writes_a_zip_with_sources_manifest_results_and_readme(campaign_db, tmp_path):
    sanitizer_verdicts(campaign_db, {ranked_names(campaign_db)[0]: True})
    out = tmp_path / "bundle.zip"
    assert (
        main(
            ["bundle", "recorded", "--db", str(campaign_db), "--out", str(out), "--include-slower"]
        )
        == 0
    )
    names = zipfile.ZipFile(out).namelist()
    top = "gemmforge-recorded"
    assert {f"{top}/README.md", f"{top}/results.csv", f"{top}/results.json"} <= set(names)
    assert f"{top}/gemmforge_bundle/kernels.json" in names
    assert f"{top}/gemmforge_bundle/include/gemmforge_abi.h" in names
    assert any(n.startswith(f"{top}/gemmforge_bundle/kernels/hgemm_sm") for n in names)


def test_the_zip_has_one_top_folder_the_readme_says_to_cd_into(campaign_db, tmp_path):
    out = tmp_path / "bundle.zip"
    assert main(["bundle", "recorded", "--db", str(campaign_db), "--out", str(out)]) == 0
    names = zipfile.ZipFile(out).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"gemmforge-recorded"}
    assert all("/" in n for n in names)
    readme = zipfile.ZipFile(out).read("gemmforge-recorded/README.md").decode()
    assert "unzip this.zip && cd gemmforge-recorded\n" in readme
    assert (unpack(out, tmp_path / "x") / "gemmforge_bundle" / "kernels.json").is_file()


def test_the_cli_makes_no_bundle_of_a_campaign_with_nothing_timed(tmp_path):
    db = tmp_path / "empty.sqlite"
    storage = SqliteStorage(db)
    storage.open_campaign("empty", {})
    storage.add_problem("empty", PROBLEM)
    storage.close()
    out = tmp_path / "x.zip"
    with pytest.raises(SystemExit, match="no bundle: no shape of 'empty' has a verified kernel"):
        main(["bundle", "empty", "--db", str(db), "--out", str(out)])
    assert not out.exists()


def test_the_cli_rejects_an_unknown_campaign(campaign_db, tmp_path):
    with pytest.raises(SystemExit, match="no campaign named"):
        main(["bundle", "nope", "--db", str(campaign_db), "--out", str(tmp_path / "x.zip")])


def run_python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def unpacked(campaign_db: Path, tmp_path: Path) -> Path:
    out = tmp_path / "bundle.zip"
    kernels = best_kernels(results_of(campaign_db), include_slower=True)
    write_bundle(kernels, out, environment={"gpu_name": "NVIDIA H200"}, title="test")
    return unpack(out, tmp_path / "unpacked")


@pytest.mark.slow
def test_the_package_imports_on_a_cpu_machine_and_falls_back_to_torch_matmul(campaign_db, tmp_path):
    root = unpacked(campaign_db, tmp_path)
    done = run_python(
        "import torch, gemmforge_bundle\n"
        "print(sorted(gemmforge_bundle.dispatch_table()))\n"
        "a = torch.randn(8, 8).half()\n"
        "print('EQUAL', torch.equal(torch.ops.gemmforge.hgemm(a, a), a @ a))\n",
        root,
    )
    assert done.returncode == 0, done.stderr
    assert "(4096, 4096, 4096, 'tn')" in done.stdout
    assert "EQUAL True" in done.stdout


def test_the_ops_gradients_match_torch_matmuls(campaign_db, tmp_path):
    # the backward formulas run on the CPU (torch.matmul); the forward needs CUDA, so it is
    # replaced by the reference product inside the autograd function
    root = unpacked(campaign_db, tmp_path)
    done = run_python(
        "import types, torch\n"
        "from gemmforge_bundle import _ops\n"
        "torch.manual_seed(0)\n"
        "a, b = torch.randn(5, 3, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)\n"
        "g = torch.randn(5, 4, dtype=torch.float64)\n"
        "ctx = types.SimpleNamespace(saved_tensors=(a, b), needs_input_grad=(True, True))\n"
        "ga, gb = _ops.hgemm_backward(ctx, g)\n"
        "a_, b_ = a.clone().requires_grad_(), b.clone().requires_grad_()\n"
        "(a_ @ b_).backward(g)\n"
        "assert torch.allclose(ga, a_.grad) and torch.allclose(gb, b_.grad)\n"
        "w = torch.randn(4, 3, dtype=torch.float64)\n"
        "ctx = types.SimpleNamespace(saved_tensors=(a, w), needs_input_grad=(False, True))\n"
        "gx, gw = _ops.hgemm_linear_backward(ctx, g)\n"
        "a_, w_ = a.clone().requires_grad_(), w.clone().requires_grad_()\n"
        "(a_ @ w_.t()).backward(g)\n"
        "assert gx is None and torch.allclose(gw, w_.grad)\n"
        "print('ok')\n",
        root,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


@pytest.mark.nvcc
@pytest.mark.slow
def test_the_bundle_builds_its_kernels_with_nvcc(campaign_db, tmp_path):
    root = unpacked(campaign_db, tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "gemmforge_bundle.build", "--jobs", "2"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert list((root / "gemmforge_bundle" / "lib").glob("hgemm_sm*.so"))
