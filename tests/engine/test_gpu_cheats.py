"""Every cheat in tests/fixtures/cheats/ is rejected with its expected reason by the pipeline a
candidate goes through: the static gate on the source, the build (shared CUDA runtime), the gate
on the library, then the GPU verifier. Runs on the H200; skipped without a GPU."""

from __future__ import annotations

import pytest

from engine import fixtures
from engine import static_checks as sc
from engine.problem import Problem
from engine.verify import verify

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

SHAPE = Problem(1024, 1024, 1024)  # multiples of 16: fp16_mma_accum needs them


def first_rejection(path) -> tuple[str, str]:
    source = path.read_text()
    gate = sc.check_candidate(source)
    if not gate.ok:
        return gate.reason, gate.message
    built = fixtures.build_one(path, SHAPE.layout, extra_flags=sc.candidate_flags())
    assert built.ok, built.log[-4000:]
    gate = sc.check_candidate(source, built.library)
    if not gate.ok:
        return gate.reason, gate.message
    result = verify(built.library, SHAPE, timeout=120)
    return result.reason, f"{result.message} {result.stderr_tail[-1000:]}"


@pytest.mark.parametrize("path", fixtures.cheat_paths(), ids=lambda p: p.stem)
def test_it_rejects_each_cheat_with_its_reason(path):
    reason, message = first_rejection(path)
    assert reason == fixtures.expected_reason(path), message


def test_the_reference_built_as_a_candidate_passes_gate_and_verifier():
    reason, message = first_rejection(fixtures.REFERENCE)
    assert reason == "ok", message
