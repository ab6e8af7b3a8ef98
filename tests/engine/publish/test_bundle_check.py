"""bench/bundle_check.py without a GPU: arguments, the campaign and bundle choice, the verdict,
and a whole run whose build, verification and measurements fail as data (the GPU part itself
runs only on the GPU machine)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import ModuleType

import pytest

from tests import bench_scripts
from tests.campaign_dbs import write_campaign
from tests.engine.publish.test_bundle import (  # noqa: F401
    PROBLEM,
    campaign_db,
    ranked_names,
    recorded_records,
    sanitizer_verdicts,
)


@pytest.fixture
def sanitized_db(campaign_db: Path) -> Path:  # noqa: F811
    """The recorded campaign with every kernel's compute-sanitizer pass in its finals file, as
    the bundle stage's campaign has them (bundles take only sanitized kernels)."""
    sanitizer_verdicts(campaign_db, dict.fromkeys(ranked_names(campaign_db), True))
    return campaign_db


@pytest.fixture(scope="module")
def bc() -> ModuleType:
    return bench_scripts.load("bundle_check")


def add_fast_campaign(db: Path) -> None:
    """A second campaign whose best kernel beats torch.matmul by 2x."""
    records, environment = recorded_records(PROBLEM)
    best = max(records, key=lambda r: r.reward)
    assert best.seconds
    fast = dataclasses.replace(best, baselines={"torch": 2 * best.seconds}, reward=1.0)
    write_campaign(db, "fast", {PROBLEM: [fast]}, settings={"environment": environment})


def test_db_and_out_are_required_and_the_defaults_are_the_documented_ones(bc, tmp_path):
    with pytest.raises(SystemExit):
        bc.parse_args(["--db", "x.sqlite"])
    with pytest.raises(SystemExit):
        bc.parse_args(["--db", "x.sqlite", "--out", str(tmp_path), "--replays", "0"])
    args = bc.parse_args(["--db", "x.sqlite", "--out", str(tmp_path)])
    assert (args.campaign, args.calls, args.replays, args.measure_into) == (None, 20, 50, None)


def test_the_campaign_is_the_named_the_only_or_the_latest_one(bc, campaign_db, tmp_path):  # noqa: F811
    assert bc.choose_campaign(campaign_db, None)["chosen_by"] == "only"
    unknown = bc.choose_campaign(campaign_db, "nope")
    assert unknown["name"] is None
    assert "no campaign named 'nope'" in unknown["error"]
    assert unknown["known"] == ["recorded"]
    add_fast_campaign(campaign_db)
    assert bc.choose_campaign(campaign_db, None) | {"known": None} == {
        "name": "fast",
        "chosen_by": "latest",
        "known": None,
    }
    assert bc.choose_campaign(campaign_db, "recorded")["name"] == "recorded"
    assert "no such campaign database" in bc.choose_campaign(tmp_path / "x.sqlite", None)["error"]


def test_with_no_kernel_faster_than_torch_it_bundles_all_and_says_so(bc, sanitized_db, tmp_path):
    info = bc.make_bundle(sanitized_db, "recorded", tmp_path)
    # measured on the H200: no sampled config beat torch.matmul at 4096^3 TN
    assert info["default_kernels"] == 0
    assert info["mode"] == "all"
    assert "no kernel of this campaign beats torch.matmul" in info["note"]
    assert info["zip"] == str(tmp_path / "bundle-all.zip")
    assert [(k["m"], k["n"], k["k"], k["layout"]) for k in info["kernels"]] == [
        (4096, 4096, 4096, "tn")
    ]
    assert bc.bundle_kernels(tmp_path / "bundle.zip") == []


def test_a_campaign_with_a_faster_kernel_gets_the_default_bundle(bc, sanitized_db, tmp_path):
    add_fast_campaign(sanitized_db)
    info = bc.make_bundle(sanitized_db, "fast", tmp_path)
    assert (info["mode"], info["default_kernels"], info["note"]) == ("default", 1, "")
    assert info["kernels"][0]["speedups"] == {"torch": 2.0}
    assert not (tmp_path / "bundle-all.zip").exists()


def shape(speedup: float, **checks: bool) -> dict:
    ok = dict.fromkeys(("correct", "graph", "compile", "linear"), True) | checks
    ok["faster"] = speedup > 1
    return {"m": 64, "n": 64, "k": 64, "layout": "nn", "sets": 512, "our_us": 4.0,
            "torch_us": 4.0 * speedup, "speedup": speedup, "errors": {"ours": 1e-4,
            "tolerance": 2e-4}, "checks": ok, "failures": {}}  # fmt: skip


def report(mode: str, *shapes: dict) -> dict:
    stage = {"ok": True, "returncode": 0}
    kernels = [{"m": 64, "n": 64, "k": 64, "layout": "nn", "speedups": {"torch": 1.1}}]
    return {"bundle": {"mode": mode, "kernels": kernels}, "build": stage, "verify": stage,
            "measure": stage, "shapes": list(shapes)}  # fmt: skip


def test_slower_kernels_fail_the_default_bundle_only(bc):
    slow_default = bc.verdict(report("default", shape(0.9)))
    assert (slow_default["passed"], slow_default["failed"]) == (False, ["faster"])
    slow_all = bc.verdict(report("all", shape(0.9)))
    assert (slow_all["passed"], slow_all["acceptance_met"]) == (True, False)
    assert "faster" not in slow_all["checks"]
    fast = bc.verdict(report("default", shape(1.2)))
    assert (fast["passed"], fast["acceptance_met"]) == (True, True)
    wrong = bc.verdict(report("default", shape(1.2, linear=False)))
    assert wrong["failed"] == ["linear"]
    missing = bc.verdict(report("default"))
    assert "measured_every_shape" in missing["failed"]
    assert bc.verdict({"bundle": {"error": "no campaign"}})["failed"] == ["bundle"]


def test_the_table_has_a_line_per_shape_and_the_verdict(bc):
    data = report("default", shape(0.9))
    data["verdict"] = bc.verdict(data)
    text = bc.table(data)
    assert "64x64x64" in text
    assert "FAILED faster" in text
    assert "1.100x" in text  # the campaign's own speedup next to the one measured here
    assert text.splitlines()[-1] == "bundle: default; FAILED faster; acceptance not met"


@pytest.mark.slow
def test_on_a_cpu_machine_every_stage_fails_as_data(bc, sanitized_db, tmp_path, monkeypatch):
    monkeypatch.setenv("NVCC", "false")  # the bundle's build script: every nvcc call fails
    monkeypatch.setenv("CUTLASS_INCLUDE", str(tmp_path))
    monkeypatch.delenv("DJANGO_SETTINGS_MODULE", raising=False)
    out = tmp_path / "out"
    assert bc.main(["--db", str(sanitized_db), "--out", str(out), "--jobs", "1"]) == 1
    data = json.loads((out / "bundle_check.json").read_text())
    assert data["campaign"]["name"] == "recorded"
    assert data["bundle"]["mode"] == "all"
    assert data["build"]["returncode"] == 1
    assert "FAILED" in data["build"]["output_tail"]
    assert data["verify"]["returncode"] == 1
    assert "need an NVIDIA GPU" in data["verify"]["output_tail"]
    assert data["measure"]["returncode"] == 1
    assert "CUDA is not available" in data["measure"]["error"]
    assert data["shapes"] == []
    assert data["verdict"]["passed"] is False
    assert {"build", "verify", "measure"} <= set(data["verdict"]["failed"])
    assert (out / "bundle_check-build.log").is_file()
    assert "date" in data
    assert "settings" in data
