"""``python -m engine prebuild``: samples a family, compiles in parallel, reports per variant."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

from engine import cli
from engine.commands import prebuild_command as prebuild
from engine.compilation.compile import CompileResult


def fake_result(ok: bool = True) -> CompileResult:
    return CompileResult(
        ok=ok,
        library=Path("/tmp/lib.so") if ok else None,
        source_hash="x",
        archs=("sm_90a",),
        command="nvcc",
        log="" if ok else "kernel.cu(1): error: boom",
        seconds=61.5,
        cached=False,
        error=None if ok else "kernel.cu(1): error: boom",
    )


def test_prebuild_compiles_the_sampled_variants_and_prints_each(capsys):
    def fake_compile_many(sources, *, jobs, archs, config, progress):
        results = [fake_result() for _ in sources]
        for index, result in enumerate(results):
            progress(index, result)
        return results

    with mock.patch.object(prebuild, "compile_many", side_effect=fake_compile_many) as compile_many:
        code = cli.main(["prebuild", "--family", "sm90", "--limit", "3", "--jobs", "2"])
    assert code == 0
    assert compile_many.call_args.kwargs["archs"] == ("sm_90a",)
    assert len(compile_many.call_args.args[0]) == 3
    out = capsys.readouterr().out
    assert out.count("hgemm_sm90_") == 3
    assert "61.5 s" in out
    assert "3/3 built" in out


def test_prebuild_fails_when_a_variant_does_not_compile(capsys):
    with mock.patch.object(prebuild, "compile_many", return_value=[fake_result(False)]):
        code = cli.main(["prebuild", "--family", "sm80", "--limit", "1", "--layout", "nn"])
    assert code == 1
    assert "0/1 built" in capsys.readouterr().out
