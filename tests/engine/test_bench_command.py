"""``engine bench --kernel``: a kernel rejected while timed (or faster than physics allows) is
marked in the table, never shown unmarked as the fastest, and makes the command fail; the JSON
keeps every shape measured before a later one fails. The GPU is replaced by recorded-shape
measurement records (engine.timing.measure.summarize_protocol over made-up statistics)."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from engine import cli
from engine.problem import Problem
from engine.timing.measure import summarize_protocol
from engine.timing.physics import PEAKS, floor_seconds
from engine.timing.tables import format_table
from tests.engine.timing.test_measure import BASELINE_STATS, environment, protocol_result, stat

KERNEL = "mine"


def check(rep: int, reason: str) -> dict:
    return {"rep": rep, "reason": reason, "error": 0.0, "tolerance": 1e-3}


def device_result(problem: Problem, kernel_s: float, *, failed_checks: int = 0) -> dict:
    """A device-protocol summary as engine.timing.measure writes it; with ``failed_checks``
    the kernel's checked timed calls after the first came back unwritten (all NaN)."""
    summary = summarize_protocol(
        problem,
        protocol_result("device", {**BASELINE_STATS, KERNEL: stat(kernel_s)}),
        environment(),
    )
    checks = [check(0, "ok")] + [check(rep, "unwritten") for rep in range(1, failed_checks + 1)]
    summary["timed_checks"] = {"records": {"checks": {KERNEL: checks}}}
    summary["rejections"] = {}
    if failed_checks:
        summary["rejections"][KERNEL] = {
            "reason": "unwritten",
            "message": f"{failed_checks} of {len(checks)} checked timed calls failed",
        }
        summary["speedups"].pop(KERNEL, None)
    summary["rejected_while_timed"] = sorted(summary["rejections"])
    return summary


def record(problem: Problem, summary: dict) -> dict:
    return {
        "problem": {"m": problem.m, "n": problem.n, "k": problem.k, "layout": "nn"},
        "environment": environment().to_dict(),
        "protocols": {"device": summary},
    }


PROBLEM = Problem(4096, 4096, 4096)


def table_rows(table: str) -> list[list[str]]:
    return [line.split() for line in table.splitlines() if " µs " in line]


def test_the_table_marks_a_kernel_rejected_while_timed_and_lists_it_after_the_baselines():
    table = format_table(record(PROBLEM, device_result(PROBLEM, 1.6e-6, failed_checks=8)))
    rows = table_rows(table)
    assert rows[0][0] != KERNEL  # the fastest listed is a baseline that stands
    [mine] = [r for r in rows if r[0] == KERNEL]
    assert mine == rows[-1]
    assert "REJECTED (unwritten: 8 of 9 checked calls)" in " ".join(mine)
    assert "speedup of mine" not in table


def test_the_table_marks_a_kernel_below_the_physical_floor_impossible():
    floor = floor_seconds(PROBLEM, PEAKS["H200"])
    table = format_table(record(PROBLEM, device_result(PROBLEM, floor / 2)))
    [mine] = [r for r in table_rows(table) if r[0] == KERNEL]
    assert mine == table_rows(table)[-1]
    assert f"IMPOSSIBLE (below the physical floor of {floor * 1e6:.2f} µs)" in " ".join(mine)


def test_the_table_lists_a_kernel_that_stands_unmarked_in_time_order():
    table = format_table(record(PROBLEM, device_result(PROBLEM, 150e-6)))
    rows = table_rows(table)
    assert rows[0][0] == KERNEL
    assert "REJECTED" not in table
    assert "IMPOSSIBLE" not in table


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path: Path):
    """compile, verify and measure replaced: ``results`` maps a shape's M to the kernel time
    and failed checks its measurement reports, or to an exception it raises."""
    import engine.commands.bench_command as bench_command
    import engine.timing.measure

    results: dict[int, object] = {}

    def measure(problem: Problem, **_kwargs) -> dict:
        outcome = results[problem.m]
        if isinstance(outcome, BaseException):
            raise outcome
        seconds, failed = outcome
        return record(problem, device_result(problem, seconds, failed_checks=failed))

    compiled = types.SimpleNamespace(library=tmp_path / "libmine.so")
    monkeypatch.setattr(engine.timing.measure, "measure", measure)
    monkeypatch.setattr(bench_command, "compile_kernel_file", lambda *_a, **_k: compiled)
    monkeypatch.setattr(bench_command, "verify", lambda *_a: types.SimpleNamespace(ok=True))
    (tmp_path / f"{KERNEL}.cu").write_text("// a kernel\n")
    return results


def bench(tmp_path: Path, *shapes: str) -> list[str]:
    argv = ["bench", "--kernel", str(tmp_path / f"{KERNEL}.cu"), "--no-predict"]
    argv += ["--json", str(tmp_path / "out.json"), "--protocol", "device"]
    for shape in shapes:
        argv += ["--shape", shape]
    return argv


def test_bench_exits_nonzero_when_the_kernel_was_rejected_while_timed(fake_gpu, tmp_path, capsys):
    fake_gpu.update({4096: (150e-6, 0), 1024: (1.6e-6, 8)})
    assert cli.main(bench(tmp_path, "4096x4096x4096", "1024x4096x4096")) == 1
    err = capsys.readouterr().err
    assert "REJECTED (unwritten: 8 of 9 checked calls)" in err
    assert len(json.loads((tmp_path / "out.json").read_text())) == 2


def test_bench_exits_zero_when_the_kernel_stands(fake_gpu, tmp_path):
    fake_gpu.update({4096: (150e-6, 0)})
    assert cli.main(bench(tmp_path, "4096x4096x4096")) == 0


def test_bench_writes_the_shapes_measured_before_a_later_shape_fails(fake_gpu, tmp_path):
    fake_gpu.update({4096: (150e-6, 0), 1024: RuntimeError("the GPU fell off the bus")})
    with pytest.raises(RuntimeError, match="fell off"):
        cli.main(bench(tmp_path, "4096x4096x4096", "1024x4096x4096"))
    [measured] = json.loads((tmp_path / "out.json").read_text())
    assert measured["problem"]["m"] == 4096


def test_a_bad_argument_leaves_an_earlier_results_file_as_it_was(fake_gpu, tmp_path):
    earlier = tmp_path / "out.json"
    earlier.write_text('[{"problem": "earlier"}]')
    with pytest.raises(SystemExit):
        cli.main([*bench(tmp_path, "4096x4096x4096"), "--torch-baselines", "inductr"])
    assert earlier.read_text() == '[{"problem": "earlier"}]'


def test_bench_times_after_the_l2_flush_asked_for(fake_gpu, monkeypatch, tmp_path):
    import engine.timing.measure

    fake_gpu.update({4096: (150e-6, 0)})
    seen: list[str] = []
    fake = engine.timing.measure.measure

    def measure(problem: Problem, **kwargs) -> dict:
        seen.append(kwargs["l2_flush"])
        return fake(problem, **kwargs)

    monkeypatch.setattr(engine.timing.measure, "measure", measure)
    assert cli.main(bench(tmp_path, "4096x4096x4096")) == 0
    assert cli.main([*bench(tmp_path, "4096x4096x4096"), "--l2-flush", "read"]) == 0
    assert seen == ["write", "read"]


def test_bench_refuses_an_unknown_l2_flush(fake_gpu, tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.main([*bench(tmp_path, "4096x4096x4096"), "--l2-flush", "clean"])
    assert "invalid choice: 'clean'" in capsys.readouterr().err
