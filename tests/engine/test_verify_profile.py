"""bench/verify_profile.py and bench/deep_splitk.py without a GPU: what a profile reports from a
batch's verdicts, and which configs the deep split-K run takes (their GPU runs are in
bench/results/2026-12-04-h200-run12/)."""

from __future__ import annotations

from types import ModuleType

import pytest

from engine.families.sm80 import Sm80Config
from engine.families.sm90 import Sm90Config
from engine.problem import Problem
from engine.verify import VerifyResult
from tests import bench_scripts


@pytest.fixture(scope="module")
def vp() -> ModuleType:
    return bench_scripts.load("verify_profile")


def verdict(ok: bool, session: float, checks: list[float], **kw) -> VerifyResult:
    return VerifyResult(
        ok,
        "ok" if ok else "input_modified",
        "all checks passed" if ok else "changed A or B",
        checks=[{"name": f"trial {i}", "detail": {"seconds": s}} for i, s in enumerate(checks)],
        seconds=session + sum(checks),
        startup_s={"start": 0.01, "cuda_init": 0.2},
        phases_s={"session": session, "checks": sum(checks), "session_buffers": session / 2},
        busy_stream="gate",
        **kw,
    )


def test_a_profile_reports_medians_and_names_each_failed_kernel(vp):
    verdicts = [verdict(True, 0.1, [0.3, 0.01]), verdict(True, 0.3, [0.5, 0.03])]
    verdicts.append(verdict(False, 0.2, [0.4]))
    out = vp.verdict_profile(["a", "b", "c"], verdicts)
    assert out["ok"] == 2
    assert out["session_s"] == 0.2
    assert out["session_buffers_s"] == 0.1
    assert out["session_library_s"] is None  # not reported by these verdicts
    assert out["check_s"] == {"trial 0": 0.4, "trial 1": 0.02}
    assert out["busy_stream"] == ["gate"]
    assert out["failures"] == [
        {"kernel": "c", "reason": "input_modified", "message": "changed A or B"}
    ]


def test_the_deep_split_k_run_takes_the_deep_configs_of_both_families():
    deep = bench_scripts.load("deep_splitk").deep_configs()
    sm80 = [c for c in deep if isinstance(c, Sm80Config)]
    sm90 = [c for c in deep if isinstance(c, Sm90Config)]
    assert len(sm80) == 9
    assert {c.splits for c in sm80} == {8, 16, 32}
    assert len(sm90) == 6
    assert {(c.scheduler, c.decomposition) for c in sm90} == {("streamk", "splitk")}
    assert {c.splits for c in sm90} == {4, 8, 16}
    assert all(c.is_valid(Problem(128, 128, 12288), "sm_90") for c in sm80)
    assert all(c.is_valid(Problem(128, 128, 12288), "sm_90a") for c in sm90)
