"""Every kind of best kernel bundles (sm90, sm80, Triton, model-written source), and a campaign
over several Ms of one (N, K) bundles kernels with the M ranges they serve."""

from __future__ import annotations

import math
import types
from pathlib import Path

import pytest

from engine.campaign.storage import SqliteStorage
from engine.codegen import Sm80Config, Sm90Config, triton_blocks
from engine.codegen.triton import TritonConfig
from engine.compilation import triton_aot
from engine.outcomes import CandidateRecord
from engine.problem import Problem
from engine.publish.bundle import (
    BundleError,
    CampaignResults,
    best_kernels,
    kernel_from_record,
    serves,
    unpack,
    write_bundle,
)

PROBLEM = Problem.parse("256x4096x4096", "tn")


def first_valid(family, problem: Problem):
    return next(c for c in family.candidates(problem.layout) if c.is_valid(problem))


def record(config, seconds: float = 0.8, torch: float = 1.0, **extra) -> CandidateRecord:
    return CandidateRecord(
        name=config.name if config is not None else extra.pop("name"),
        family=config.FAMILY if config is not None else extra.pop("family"),
        knobs=dict(config.knobs()) if config is not None else {},
        proposer="random",
        status="ok",
        reward=math.log(torch / seconds),
        seconds=seconds,
        baselines={"torch": torch, "cublaslt_autotune": torch},
        **extra,
    )


@pytest.mark.parametrize("family", [Sm90Config, Sm80Config])
def test_a_cuda_family_kernel_bundles_with_its_archs_and_serves_any_m(family):
    config = first_valid(family, PROBLEM)
    kernel = kernel_from_record(PROBLEM, record(config))
    assert kernel.name == config.name
    assert kernel.archs == tuple(config.archs)
    assert "gemmforge_hgemm" in kernel.source
    assert serves(kernel, 1)
    assert serves(kernel, 8191)  # the families handle M residues


def fake_triton_build(monkeypatch, tmp_path: Path, ok: bool = True) -> None:
    """The Triton compile replaced: an entry holding a cubin header, or a failed build."""
    (tmp_path / triton_aot.HEADER_NAME).write_text("// the compiled cubin, as bytes\n")
    built = types.SimpleNamespace(ok=ok, entry=tmp_path if ok else None, error="ptxas died")
    import engine.compilation.compile

    monkeypatch.setattr(engine.compilation.compile, "compile_source", lambda source, **_: built)


def test_a_triton_kernel_keeps_its_measured_source_and_ships_with_its_cubin_inlined(
    monkeypatch, tmp_path: Path
):
    config = first_valid(TritonConfig, PROBLEM)
    fake_triton_build(monkeypatch, tmp_path)
    kernel = kernel_from_record(PROBLEM, record(config))
    # the source it was measured and sanitized with (its hash names its finals verdict)
    assert kernel.source == config.render()
    out = write_bundle([kernel], tmp_path / "b.zip", environment={}, title="t")
    shipped = unpack(out, tmp_path / "u") / "gemmforge_bundle/kernels" / f"{config.name}.cu"
    text = shipped.read_text()
    assert "// the compiled cubin, as bytes" in text
    assert f'#include "{triton_aot.HEADER_NAME}"' not in text
    assert not triton_blocks.is_triton_source(text)  # builds with nvcc alone


def test_a_triton_kernel_that_does_not_build_is_a_bundle_error(monkeypatch, tmp_path: Path):
    config = first_valid(TritonConfig, PROBLEM)
    fake_triton_build(monkeypatch, tmp_path, ok=False)
    kernel = kernel_from_record(PROBLEM, record(config))
    with pytest.raises(BundleError, match="ptxas died"):
        write_bundle([kernel], tmp_path / "b.zip", environment={}, title="t")


def test_a_model_written_kernel_bundles_its_source_and_serves_only_its_m():
    source = '#include "gemmforge_abi.h"\n// a model wrote this\n'
    rec = record(None, name="llm_0123456789abcdef", family="llm", source=source)
    kernel = kernel_from_record(PROBLEM, rec)
    assert kernel.source == source
    assert kernel.archs == ("sm_90a",)
    assert serves(kernel, PROBLEM.m)
    assert not serves(kernel, PROBLEM.m + 1)


def test_a_model_written_record_without_source_is_a_bundle_error_not_a_key_error():
    rec = record(None, name="llm_0123456789abcdef", family="llm")
    with pytest.raises(BundleError, match="no source"):
        kernel_from_record(PROBLEM, rec)


def test_a_campaign_over_ms_bundles_kernels_with_their_m_ranges(tmp_path: Path):
    a = first_valid(Sm90Config, PROBLEM)
    b = next(c for c in Sm90Config.candidates(PROBLEM.layout) if c.is_valid(PROBLEM) and c != a)
    ms = {16: [(a, 0.8)], 256: [(a, 1.1), (b, 0.9)], 4096: [(a, 1.2), (b, 1.05)]}
    db = SqliteStorage(tmp_path / "c.sqlite")
    db.open_campaign("m", {})
    problems = [Problem(m, 4096, 4096, PROBLEM.layout) for m in ms]
    for p in problems:
        db.add_problem("m", p)
        db.record("m", p.key, [record(c, seconds=t) for c, t in ms[p.m]])
    results = CampaignResults(
        title="m",
        problems=tuple(db.problems("m")),
        records={p.key: db.candidates("m", p.key) for p in problems},
        environment={"gpu_name": "NVIDIA H200"},
    )
    db.close()
    kernels = best_kernels(results)
    exact = best_kernels(results, dynamic_m=False)
    # at 4096 nothing beats torch.matmul: that point is torch's
    assert [(k.problem.m, k.name) for k in kernels] == [(16, a.name), (256, b.name)]
    assert [(k.m_lo, k.m_hi) for k in exact] == [(None, None), (None, None)]
    # a vs b: b was not timed at 16, so the boundary is the log midpoint sqrt(16·256) = 64;
    # b vs torch.matmul: both timed at 256 and 4096, so the boundary is where 0.9 → 1.05
    # (log-linear in log M) crosses 1
    cross = math.exp(
        math.log(256) + math.log(16) * -math.log(0.9) / (math.log(1.05) - math.log(0.9))
    )
    assert [(k.m_lo, k.m_hi) for k in kernels] == [(16, 64), (65, math.ceil(cross) - 1)]
