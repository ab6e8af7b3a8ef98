"""``python -m engine prebuild``: the GPU's library in both layouts, resumable, with progress.

Builds run through the real compile cache with a stand-in nvcc (tests/engine/compile_fakes.py);
Triton is taken out of the families where builds run (its AOT step is a real Triton compile)."""

from __future__ import annotations

import io
import signal
import threading
import time
from pathlib import Path

import pytest

from engine import cli
from engine.codegen.library import library
from engine.commands import optimize_command
from engine.commands import prebuild_command as prebuild
from engine.compilation.compile import (
    BUILD_SECONDS,
    CompileResult,
    compile_configs,
    config_keys,
    try_load,
)
from engine.config import load as load_config
from engine.gpu import cuda_driver
from engine.outcomes import CandidateRecord, CandidateStatus
from engine.problem import Layout, Problem
from engine.propose import space
from engine.propose.space import SearchSpace, families_for_arch
from tests.campaign_dbs import write_campaign
from tests.engine.compile_fakes import NVCC_VERSION, fake_nvcc

HOPPER_WITHOUT_TRITON = ("sm90", "sm80", "longk")


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A machine without a GPU or Triton whose nvcc is the stand-in; returns its tmp folder."""
    use_nvcc(monkeypatch, fake_nvcc(tmp_path))
    monkeypatch.setenv("ENGINE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ENGINE_COMPILE_JOBS", "2")
    monkeypatch.setattr(space, "triton_installed", lambda: False)
    monkeypatch.setattr(cuda_driver, "device_arch", no_gpu)
    return tmp_path


def use_nvcc(monkeypatch, nvcc: Path) -> None:
    monkeypatch.setenv("ENGINE_NVCC", str(nvcc))


def no_gpu(index: int = 0) -> str:
    raise cuda_driver.DriverError("cannot load libcuda.so.1")


def counting_nvcc(folder: Path, *, slow_after_first: bool = False) -> Path:
    """A stand-in nvcc that appends a line to ``builds.log`` per build; with
    ``slow_after_first``, every build after the first sleeps a minute (touching ``slow``)."""
    script = folder / "counting-nvcc"
    slow = (
        f'if [ -e "{folder}/builds.log" ]; then touch "{folder}/slow"; exec sleep 60; fi\n'
        if slow_after_first
        else ""
    )
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --version ]; then '
        f'echo "Cuda compilation tools, release 13.0, V{NVCC_VERSION}"; exit 0; fi\n'
        f"{slow}"
        f'echo build >> "{folder}/builds.log"\n'
        'cat kernel.cu > lib.so; echo "ptxas info    : fake build"; exit 0\n'
    )
    script.chmod(0o755)
    return script


def builds_run(folder: Path) -> int:
    log = folder / "builds.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def result(ok: bool = True, *, cached: bool = False, seconds: float = 30.0) -> CompileResult:
    return CompileResult(
        ok=ok,
        library=Path("/tmp/lib.so") if ok else None,
        source_hash="x",
        archs=("sm_90a",),
        command="nvcc",
        log="" if ok else "kernel.cu(1): error: boom",
        seconds=seconds,
        cached=cached,
        error=None if ok else "kernel.cu(1): error: boom",
        entry=Path("/tmp/entry") if ok or cached else None,
    )


# -- which configs -----------------------------------------------------------------------------


def test_without_a_gpu_the_library_targets_sm_90a_and_on_one_its_arch(monkeypatch):
    monkeypatch.setattr(cuda_driver, "device_arch", no_gpu)
    assert prebuild.target_arch(None) == "sm_90a"
    assert prebuild.target_arch("sm_80") == "sm_80"
    monkeypatch.setattr(cuda_driver, "device_arch", lambda index=0: "sm_90")
    assert prebuild.target_arch(None) == "sm_90"


def test_the_library_families_are_those_a_campaign_on_the_arch_searches(monkeypatch):
    monkeypatch.setattr(space, "triton_installed", lambda: True)
    assert prebuild.library_families(None, "sm_90") == families_for_arch("sm_90")
    assert set(prebuild.library_families(None, "sm_90a")) == {"sm90", "sm80", "longk", "triton"}
    monkeypatch.setattr(space, "triton_installed", lambda: False)
    assert prebuild.library_families(None, "sm_90a") == HOPPER_WITHOUT_TRITON
    assert prebuild.library_families(None, "sm_80") == ("sm80",)
    assert prebuild.library_families("longk", "sm_90a") == ("longk",)


def test_the_library_holds_every_family_in_both_layouts():
    configs = prebuild.library_configs(HOPPER_WITHOUT_TRITON, list(Layout), arch="sm_90a")
    expected = [c for f in HOPPER_WITHOUT_TRITON for lay in Layout for c in library(f, lay)]
    assert [c.name for c in configs] == [c.name for c in expected]
    assert {c.layout for c in configs} == {Layout.NN, Layout.TN}


def test_a_shape_keeps_the_library_configs_valid_for_it_in_each_layout():
    configs = prebuild.library_configs(
        HOPPER_WITHOUT_TRITON, list(Layout), arch="sm_90a", shape="64x64x64"
    )
    everything = prebuild.library_configs(HOPPER_WITHOUT_TRITON, list(Layout), arch="sm_90a")
    assert 0 < len(configs) < len(everything)
    assert {c.layout for c in configs} == {Layout.NN, Layout.TN}
    assert all(c.is_valid(Problem(64, 64, 64, c.layout)) for c in configs)


def test_on_an_ampere_gpu_it_leaves_out_what_needs_hopper():
    configs = prebuild.library_configs(("sm80",), [Layout.TN], arch="sm_80")
    assert configs
    assert all(c.reduction == "kernel" for c in configs)
    assert len(configs) < len(library("sm80", Layout.TN))


# -- the cache keys a campaign looks up --------------------------------------------------------


def test_a_prebuild_without_a_gpu_keys_every_family_as_a_campaign_on_an_h100_does(machine):
    """No GPU: the prebuild targets sm_90a; on an H100 the campaign's arch is sm_90."""
    configs = [c for f in ("sm90", "sm80", "longk", "triton") for c in library(f, Layout.NN, 2)]
    built = prebuild.plan(configs, arch=prebuild.target_arch(None), config=load_config())
    assert [b.key for b in built] == config_keys(configs, config=load_config(), target_arch="sm_90")


def test_a_campaign_finds_every_config_of_a_prebuilt_library_in_the_cache(machine, capsys):
    assert cli.main(["prebuild", "--library", "--limit", "2"]) == 0
    config = load_config()
    prebuilt = [c for f in HOPPER_WITHOUT_TRITON for lay in Layout for c in library(f, lay, 2)]
    assert optimize_command.uncached(prebuilt, config=config, arch="sm_90") == 0
    results = compile_configs(prebuilt, config=config, target_arch="sm_90")
    assert all(r.ok and r.cached for r in results)
    # the configs of a library-space campaign that the prebuild covered are its own entries
    problem = Problem.parse("4096x4096x4096", Layout.TN)
    names = {c.name for c in prebuilt}
    campaign = SearchSpace.library(problem, families=families_for_arch("sm_90"))
    covered = [c for c in campaign.configs if c.name in names]
    assert covered
    assert optimize_command.uncached(covered, config=config, arch="sm_90") == 0


# -- building, resuming, interrupting ----------------------------------------------------------


def test_library_without_a_family_builds_each_family_in_both_layouts(machine, capsys):
    code = cli.main(["prebuild", "--library", "--limit", "1", "--jobs", "2"])
    assert code == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == (
        "prebuild for sm_90a: 6 configs (sm90 nn 1, sm90 tn 1, sm80 nn 1, sm80 tn 1, longk nn 1, "
        "longk tn 1); 0 in the cache, 6 to build on 2 jobs, about 0:01:34 (a build: sm90 45 s, "
        "sm80 45 s, longk 4 s)"
    )
    assert "6 built, 0 cached, 0 failed of 6; " in out
    config = load_config()
    for build in prebuild.plan(
        [c for f in HOPPER_WITHOUT_TRITON for lay in Layout for c in library(f, lay, 1)],
        arch="sm_90a",
        config=config,
    ):
        assert (hit := try_load(build.key, config)) is not None
        assert hit.ok


def test_a_second_prebuild_counts_the_cache_and_builds_nothing(machine, monkeypatch, capsys):
    use_nvcc(monkeypatch, counting_nvcc(machine))
    args = ["prebuild", "--library", "--family", "sm80", "--limit", "3"]
    assert cli.main([*args, "--layout", "nn"]) == 0
    assert builds_run(machine) == 3
    capsys.readouterr()
    assert cli.main(args) == 0  # both layouts: nn's are in the cache
    out = capsys.readouterr().out
    assert builds_run(machine) == 6
    assert "3 in the cache, 3 to build" in out.splitlines()[0]
    assert "3 built, 3 cached, 0 failed of 6; " in out


@pytest.fixture
def ctrl_c_raises():
    """Ctrl-C raises KeyboardInterrupt, as in a terminal, whatever the launching shell left: a
    background job of a non-interactive shell starts with SIGINT ignored, and Python keeps it so."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_stops_the_running_build_without_caching_it_and_the_next_run_resumes(
    machine, monkeypatch, capsys, ctrl_c_raises
):
    use_nvcc(monkeypatch, counting_nvcc(machine, slow_after_first=True))
    main_thread = threading.main_thread().ident

    def press_ctrl_c() -> None:
        deadline = time.monotonic() + 30
        while not (machine / "slow").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        signal.pthread_kill(main_thread, signal.SIGINT)

    threading.Thread(target=press_ctrl_c, daemon=True).start()
    started = time.monotonic()
    args = ["prebuild", "--library", "--family", "sm90", "--layout", "tn", "--limit", "3"]
    code = cli.main([*args, "--jobs", "1"])
    assert code == prebuild.INTERRUPTED_EXIT
    assert time.monotonic() - started < 20  # the sleeping build was killed, not waited for
    out = capsys.readouterr().out
    assert "interrupted: 1 built, 0 cached, 0 failed, 2 left to build of 3; " in out
    config = load_config()
    builds = prebuild.plan(library("sm90", Layout.TN, 3), arch="sm_90a", config=config)
    assert [try_load(b.key, config) is not None for b in builds] == [True, False, False]

    use_nvcc(monkeypatch, counting_nvcc(machine))
    (machine / "builds.log").unlink()
    assert cli.main(args) == 0
    assert builds_run(machine) == 2
    assert "2 built, 1 cached, 0 failed of 3; " in capsys.readouterr().out
    assert all(try_load(b.key, config).ok for b in builds)


def test_a_failed_build_is_named_with_its_reason_and_fails_the_command(
    machine, monkeypatch, capsys
):
    use_nvcc(monkeypatch, fake_nvcc(machine, fails=True))
    code = cli.main(["prebuild", "--family", "sm80", "--limit", "2", "--layout", "nn"])
    assert code == 1
    out = capsys.readouterr().out
    assert "0 built, 0 cached, 2 failed of 2" in out
    assert out.count("kernel.cu(1): error: fake failure") >= 4  # as each fails, and the summary
    assert "failed: hgemm_sm80_" in out
    # cached as failed: a rerun counts them without building and still fails
    assert cli.main(["prebuild", "--family", "sm80", "--limit", "2", "--layout", "nn"]) == 1
    out = capsys.readouterr().out
    assert "0 built, 2 cached, 0 failed of 2" in out
    assert "failed in an earlier build (cached): hgemm_sm80_" in out


def test_sampled_variants_are_built_for_the_family_and_each_printed(machine, capsys):
    assert cli.main(["prebuild", "--family", "sm90", "--limit", "3", "--jobs", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sum("hgemm_sm90_" in line and "tn" in line for line in lines[1:4]) == 3
    assert lines[3].startswith("[3/3 100%] 3 built, 0 cached, 0 failed | ")


def test_it_requires_a_family_without_library(machine):
    with pytest.raises(SystemExit, match="--family is required"):
        cli.main(["prebuild", "--limit", "1"])


# -- progress line and summary -----------------------------------------------------------------


def test_the_progress_line_counts_and_estimates_from_the_builds_so_far():
    progress = prebuild.Progress(left={"sm90": 8, "longk": 2}, jobs=2, started=100.0)
    assert progress.line(now=100.0) == (
        "[ 0/10   0%] 0 built, 0 cached, 0 failed | 0:00:00 elapsed, ETA 0:03:04"
    )  # (8 × BUILD_SECONDS + 2 × longk's 4 s) on 2 jobs before a build has finished
    progress.count("sm90", "a", result(cached=True))
    progress.count("sm90", "b", result(seconds=20.0))
    progress.count("sm90", "c", result(seconds=40.0))
    progress.count("sm90", "d", result(ok=False, seconds=60.0))
    progress.count("longk", "e", result(seconds=2.0))
    assert progress.line(now=175.0) == (
        "[ 5/10  50%] 3 built, 1 cached, 1 failed | 0:01:15 elapsed, ETA 0:01:21"
    )  # (4 × the sm90 mean of 40 s + 1 × 2 s) on 2 jobs
    progress = prebuild.Progress(left={"sm90": 1}, jobs=16)
    assert progress.eta_seconds() == BUILD_SECONDS  # one build takes a whole build


def test_in_a_pipe_each_build_gets_a_line_and_on_a_terminal_one_line_is_redrawn():
    progress = prebuild.Progress(left={"sm80": 2}, jobs=1, started=time.monotonic())
    pipe = io.StringIO()
    printer = prebuild.ProgressPrinter(progress, pipe, redraw=False)
    progress.count("sm80", "hgemm_a", result())
    printer.finished("hgemm_a", result())
    progress.count("sm80", "hgemm_b", result(ok=False))
    printer.finished("hgemm_b", result(ok=False))
    printer.end()
    lines = pipe.getvalue().splitlines()
    assert lines[0].startswith("[1/2  50%] 1 built, 0 cached, 0 failed | 0:00:00 elapsed")
    assert lines[0].endswith("| hgemm_a ok (30.0 s, regs=0)")
    assert lines[1:3] == ["FAILED (not cached) hgemm_b", "    kernel.cu(1): error: boom"]
    assert lines[3].endswith("| hgemm_b failed (30.0 s)")
    assert "\r" not in pipe.getvalue()

    terminal = io.StringIO()
    progress = prebuild.Progress(left={"sm80": 2}, jobs=1, started=time.monotonic())
    printer = prebuild.ProgressPrinter(progress, terminal, redraw=True)
    for name in ("hgemm_a", "hgemm_b"):
        progress.count("sm80", name, result())
        printer.finished(name, result())
    printer.end()
    text = terminal.getvalue()
    assert text.count("\r") == 2
    assert text.count("\n") == 1
    assert text.endswith("\n")
    assert "[2/2 100%] 2 built" in text.split("\r")[-1]


def test_the_summary_gives_counts_failures_wall_time_and_the_bytes_on_disk(machine, capsys):
    assert cli.main(["prebuild", "--library", "--family", "longk", "--limit", "2"]) == 0
    config = load_config()
    builds = prebuild.plan(
        [c for lay in Layout for c in library("longk", lay, 2)], arch="sm_90a", config=config
    )
    progress = prebuild.Progress(left={"longk": 4}, jobs=2, started=0.0)
    progress.count("longk", "x", result(seconds=10.0))
    progress.count("longk", "y", result(seconds=30.0))
    progress.count("longk", "z", result(cached=True))
    progress.count("longk", "w", result(ok=False))
    text = prebuild.summary(progress, builds=builds, config=config, interrupted=False, now=90.0)
    ours = prebuild.disk_bytes([config.kernel_cache / b.key[:2] / b.key for b in builds])
    assert ours > 0
    assert text.splitlines() == [
        "2 built, 1 cached, 1 failed of 4; 0:01:30 wall on 2 jobs; a build took longk 23.3 s",
        "  failed: w: kernel.cu(1): error: boom",
        f"on disk: {prebuild.size(ours)} for these, "
        f"{prebuild.size(prebuild.disk_bytes([config.kernel_cache]))} in {config.kernel_cache}",
    ]


# -- the kernels a campaign's finals re-measure ------------------------------------------------


def finals_db(path: Path) -> tuple[Path, list[str]]:
    """A campaign database of two shapes whose verified candidates rank sm80 library configs
    (their speedups over cublaslt_autotune fall with the index), with a failed and a
    model-written candidate that rank first; returns it and the configs' names."""
    configs = library("sm80", Layout.NN, 4)
    shapes = {}
    for shape in ("4096x4096x4096", "1024x1024x1024"):
        records = [
            CandidateRecord(
                c.name,
                "sm80",
                c.knobs(),
                "library",
                CandidateStatus.OK,
                1.0,
                seconds=1.0 + i,
                baselines={"cublaslt_autotune": 1.0},
            )
            for i, c in enumerate(configs)
        ]
        failed = CandidateRecord(
            "broken", "sm80", configs[0].knobs(), "library", CandidateStatus.REJECTED, 0.0
        )
        written = CandidateRecord(
            "llm_kernel",
            "llm",
            {"layout": "nn"},
            "llm",
            CandidateStatus.OK,
            1.0,
            seconds=0.5,
            baselines={"cublaslt_autotune": 1.0},
            source="__global__ void k() {}",
        )
        shapes[Problem.parse(shape, Layout.NN)] = [*records, failed, written]
    db = write_campaign(
        path / "campaign.sqlite", "c", shapes, settings={"baseline": "cublaslt_autotune"}
    )
    return db, [c.name for c in configs]


def test_finals_builds_each_shapes_best_verified_family_kernels_rank_by_rank(machine, capsys):
    db, names = finals_db(machine)
    configs = prebuild.finals_configs(db, 3)
    # the model-written kernel takes each shape's first place and is not built here; then the
    # shapes' ranks in turn: the best of every shape come first
    assert [c.name for c in configs] == [n for n in names[:2] for _ in range(2)]
    assert cli.main(["prebuild", "--finals", str(db), "--arch", "sm_90"]) == 0
    assert "prebuild for sm_90: 2 configs (sm80 nn 2)" in capsys.readouterr().out
    top = library("sm80", Layout.NN, 4)[:2]
    assert optimize_command.uncached(top, config=load_config(), arch="sm_90") == 0


def test_finals_names_a_missing_database(machine):
    with pytest.raises(SystemExit, match="no campaign database at"):
        cli.main(["prebuild", "--finals", str(machine / "none.sqlite")])
