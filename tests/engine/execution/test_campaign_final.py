"""The GPU executor's parallel verification, the end-of-campaign top-k selection and the sandbox
of the fresh-process re-measurement (the GPU path itself runs in bench/device/gpu_run.sh's campaign
stage and in the gpu-marked test here)."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.execution.executor import CompiledCandidate, LocalGpuExecutor
from engine.execution.final import config_of, final_summary, top_records
from engine.isolation import processes, sandbox
from engine.outcomes import CandidateRecord, CandidateStatus
from engine.problem import Layout, Problem
from engine.propose.space import SearchSpace
from engine.verify import verifier as verify_module
from engine.verify.verifier import VerifyResult
from tests.engine.process_fakes import killed_for_memory

PROBLEM = Problem(1024, 1024, 1024, Layout.NN)


def record(
    name: str, seconds: float | None, status: str = CandidateStatus.OK, **kw
) -> CandidateRecord:
    space = SearchSpace.library(PROBLEM, families=("sm90",))
    config = space.configs[hash(name) % len(space.configs)]
    return CandidateRecord(
        name=name,
        family=config.FAMILY,
        knobs=config.knobs(),
        proposer="rl",
        status=status,
        reward=0.0,
        seconds=seconds,
        baselines={"cublaslt_autotune": 10.0},
        **kw,
    )


def test_top_records_ranks_verified_candidates_by_speed():
    records = [
        record("slow", 20.0),
        record("fast", 8.0),
        record("failed", None, CandidateStatus.REJECTED),
        record("middle", 12.0),
    ]
    assert [r.name for r in top_records(records, "cublaslt_autotune", 2)] == ["fast", "middle"]
    assert config_of(records[1]).knobs() == dict(records[1].knobs)


def test_a_model_written_top_kernel_goes_to_the_finals_with_its_source():
    """It becomes a shape's best like any: sanitized and re-measured in the finals too."""
    records = [record("fast", 8.0), record("llm", 1.0, source="// model-written")]
    top = top_records(records, "cublaslt_autotune", 2)
    assert [r.name for r in top] == ["llm", "fast"]
    kernel = config_of(top[0])
    assert (kernel.FAMILY, kernel.render()) == ("llm", "// model-written")


def test_final_summary_keeps_the_error_of_a_failed_remeasurement():
    assert final_summary({"error": "exited 1"}) == {"error": "exited 1"}


def test_the_gpu_executor_verifies_a_batch_in_parallel_and_records_each_rejection(monkeypatch):
    running, peak, lock = [0], [0], threading.Lock()

    def fake_verify(library, problem, **_kwargs):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        if "bad" in str(library):
            return VerifyResult(False, "wrong_values", "mismatch at (0, 0)")
        return VerifyResult(False, "unwritten", "C left NaN")

    monkeypatch.setattr(verify_module, "verify", fake_verify)
    batch = [
        CompiledCandidate(name=f"c{i}", config=None, library=Path(f"/x/{'bad' if i % 2 else 'ok'}"))
        for i in range(6)
    ]
    outcomes = LocalGpuExecutor(arch="sm_90", verify_jobs=3).execute(PROBLEM, batch)
    assert peak[0] == 3
    assert [o.reason for o in outcomes] == ["unwritten", "wrong_values"] * 3
    assert all(o.status == CandidateStatus.REJECTED for o in outcomes)


def test_a_top_kernel_that_fails_the_sanitizer_cannot_be_the_final_best(monkeypatch, tmp_path):
    from engine.campaign.loop import ProblemResult
    from engine.compilation.compile import CompileResult
    from engine.execution import final

    records = [record("fast", 8.0), record("middle", 9.0), record("slow", 30.0)]
    result = ProblemResult(PROBLEM, records, stopped="budget")

    def compile_(configs):
        return [
            CompileResult(True, tmp_path / f"{i}.so", "h", ("sm_90a",), "", "", 1.0, True)
            for i, _ in enumerate(configs)
        ]

    class Verdict:
        def __init__(self, ok):
            self.ok = ok

        def to_dict(self):
            return {"ok": self.ok}

    measured = {}

    def fake_remeasure(jobs, *, on_record, **_kwargs):
        for index, (problem, libraries) in enumerate(jobs):
            measured[problem.key] = sorted(libraries)
            on_record(index, {"error": "not on a GPU"})
        return [{"error": "not on a GPU"} for _ in jobs]

    monkeypatch.setattr(final, "remeasure_batch", fake_remeasure)
    finals = final.final_measurements(
        [result],
        baseline="cublaslt_autotune",
        top=2,
        compile=compile_,
        sanitizer=lambda library: Verdict(library.name != "0.so"),  # "fast" fails
    )
    assert measured[PROBLEM.key] == ["middle"]
    assert finals[PROBLEM.key]["sanitize"] == {"fast": {"ok": False}, "middle": {"ok": True}}


def test_finals_cut_short_resume_without_measuring_a_shape_or_sanitizing_a_kernel_twice(
    monkeypatch, tmp_path
):
    from engine.campaign.loop import ProblemResult
    from engine.compilation.compile import CompileResult
    from engine.execution import final

    other = Problem(2048, 2048, 2048, Layout.NN)
    results = [
        ProblemResult(PROBLEM, [record("a", 8.0), record("b", 9.0)], stopped="budget"),
        ProblemResult(other, [record("c", 8.0)], stopped="budget"),
    ]

    def compile_(configs):
        return [
            CompileResult(True, tmp_path / f"{c.name}.so", "h", ("sm_90a",), "", "", 1.0, True)
            for c in configs
        ]

    class Verdict:
        ok = True

        def to_dict(self):
            return {"ok": True}

    sanitized, measured, cut = [], [], [True]

    def sanitizer(library):
        sanitized.append(library.stem)
        return Verdict()

    def remeasure_batch(jobs, *, on_record, **_kwargs):
        records = []
        for index, (problem, _libraries) in enumerate(jobs):
            if problem == other and cut.pop():
                cut.append(False)
                raise KeyboardInterrupt  # the session's time ran out here
            measured.append(problem.key)
            records.append({"protocols": {}, "environment": {"gpu": "H200"}})
            on_record(index, records[-1])
        return records

    monkeypatch.setattr(final, "remeasure_batch", remeasure_batch)
    path = tmp_path / "campaign.finals.json"
    run = {"baseline": "cublaslt_autotune", "top": 2, "compile": compile_, "sanitizer": sanitizer}
    with pytest.raises(KeyboardInterrupt):
        final.final_measurements(results, **run, saved=final.SavedFinals(path))
    first_sanitized = sorted(sanitized)
    finals = final.final_measurements(results, **run, saved=final.SavedFinals(path))
    assert sorted(sanitized) == first_sanitized  # every kernel sanitized once, in the first run
    assert measured.count(PROBLEM.key) == 1  # the shape done before the cut is not measured again
    assert measured.count(other.key) == 1
    assert set(finals) == {PROBLEM.key, other.key}
    assert finals[PROBLEM.key]["environment"] == {"gpu": "H200"}


def test_a_saved_final_is_not_reused_for_other_top_kernels(tmp_path):
    from engine.execution.final import SavedFinals

    saved = SavedFinals(tmp_path / "f.json")
    saved.add_final("k", ["a", "b"], {"protocols": {}})
    again = SavedFinals(tmp_path / "f.json")
    assert again.final("k", ["b", "a"]) == {"protocols": {}}
    assert again.final("k", ["a", "c"]) is None
    saved.add_final("e", ["a"], {"error": "GPU fault"})
    assert SavedFinals(tmp_path / "f.json").final("e", ["a"]) is None  # failures are retried


# ---- the re-measurement child runs in the candidate sandbox ------------------------

PARENT_SECRETS = {
    "GEMMFORGE_SECRET": "s3cret",
    "AWS_SECRET_ACCESS_KEY": "aws-s3cret",
    "DATABASE_URL": "postgres://user:password@db/gemmforge",
    "SECRET_KEY": "django-secret",
    "ENGINE_LLM_API_KEY": "sk-1",  # under an allowed prefix, but named like a secret
}


def reporting_python(tmp_path: Path) -> Path:
    """A stand-in for python that writes what it ran under (environment, working directory,
    limits, namespaces) where the real child writes its record (argv: -m module spec out)."""
    fake = tmp_path / "python"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import importlib.util, json, os, resource, sys\n"
        "report = {\n"
        "    'argv': sys.argv[1:],\n"
        "    'env': dict(os.environ),\n"
        "    'cwd': os.getcwd(),\n"
        "    'engine': importlib.util.find_spec('engine').origin,\n"
        "    'core': resource.getrlimit(resource.RLIMIT_CORE)[0],\n"
        "    'fsize': resource.getrlimit(resource.RLIMIT_FSIZE)[0],\n"
        "    'user_ns': os.readlink('/proc/self/ns/user'),\n"
        "    'net_ns': os.readlink('/proc/self/ns/net'),\n"
        "    'spec': json.load(open(sys.argv[3])),\n"
        "}\n"
        "open(sys.argv[4], 'w').write(json.dumps(report) + '\\n')\n"
    )
    fake.chmod(0o755)
    return fake


def test_the_remeasurement_child_gets_the_candidate_environment_and_the_gpu_sandbox(
    tmp_path, monkeypatch
):
    from engine.execution import final

    for name, value in PARENT_SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("GF_UNLISTED", "x")
    monkeypatch.setenv("ENGINE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ENGINE_CHILD_FILE_SIZE_MB", "64")
    calls = []
    real_start = processes.start

    def spy(argv, **kwargs):
        calls.append(kwargs)
        return real_start(argv, **kwargs)

    monkeypatch.setattr(final.processes, "start", spy)
    library = tmp_path / "k.so"
    record = final.remeasure(
        PROBLEM,
        {"k": library},
        protocols=("device",),
        device_seconds=1.0,
        timeout=60,
        python=str(reporting_python(tmp_path)),
    )
    assert "error" not in record, record
    [kwargs] = calls
    assert kwargs["policy"] == sandbox.gpu_policy()
    env = record["env"]
    for name in [*PARENT_SECRETS, "GF_UNLISTED"]:
        assert name not in env
    assert not [name for name in env if sandbox.is_secret(name)]
    assert set(env) - {"HOME", "TMPDIR", "ENGINE_CACHE_DIR"} <= {
        name for name in env if sandbox.is_passed(name)
    }
    # an empty private working directory of its own, HOME and TMPDIR inside it
    workdir = Path(record["cwd"])
    assert workdir.name.startswith("gemmforge-final-")
    assert not workdir.exists()  # removed after the run
    assert env["HOME"] == env["TMPDIR"] == str(workdir / "home")
    assert env["ENGINE_CACHE_DIR"] == str(tmp_path / "cache")
    # engine comes from PYTHONPATH, not from the working directory
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(sandbox.REPO_ROOT)
    assert record["engine"] == str(sandbox.REPO_ROOT / "engine" / "__init__.py")
    assert record["argv"][:2] == ["-m", "engine.execution.final"]
    assert record["spec"]["jobs"] == [
        {
            "problem": [PROBLEM.m, PROBLEM.n, PROBLEM.k, PROBLEM.layout.value],
            "libraries": {"k": str(library)},
        }
    ]
    # the GPU children's limits, and the caller's user namespace (CUDA needs /dev/nvidia*)
    assert record["core"] == 0
    assert record["fsize"] == 64 << 20
    assert record["user_ns"] == os.readlink("/proc/self/ns/user")
    assert "no core dumps" in record["sandbox"]
    assert "resident memory" in record["sandbox"]
    if record["sandbox"].startswith(f"network {sandbox.ISOLATED}"):
        assert record["net_ns"] != os.readlink("/proc/self/ns/net")


def test_a_remeasurement_stopped_by_its_sandbox_is_an_error_that_says_why(monkeypatch):
    from engine.execution import final

    def killed(argv, **kwargs):
        result = killed_for_memory("python -m engine.execution.final", kwargs["policy"].limits)
        return SimpleNamespace(sandbox=None, proc=None, finish=lambda **_: result)

    monkeypatch.setenv("ENGINE_CHILD_MEMORY_GB", "8")
    monkeypatch.setattr(final.processes, "start", killed)
    record = final.remeasure(PROBLEM, {"k": Path("/x/k.so")})
    assert "memory" in record["error"]
    assert "resident memory 8 GiB" in record["error"]
    assert final_summary(record) == record


def batch_python(tmp_path: Path, body: str) -> Path:
    """A stand-in for python -m engine.execution.final: for each job of the spec it runs
    ``body`` (m, n, k: the job's problem; out: the records file)."""
    fake = tmp_path / "python"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, sys, time\n"
        "spec = json.load(open(sys.argv[3]))\n"
        "out = open(sys.argv[4], 'a')\n"
        "for job in spec['jobs']:\n"
        "    m, n, k, _ = job['problem']\n"
        + "".join(f"    {line}\n" for line in body.splitlines())
        + "    out.write(json.dumps({'protocols': {}, 'm': m}) + '\\n'); out.flush()\n"
    )
    fake.chmod(0o755)
    return fake


def test_a_batch_child_that_dies_costs_only_the_problem_it_was_on(tmp_path):
    from engine.execution import final

    jobs = [(Problem(m, 64, 64, Layout.NN), {"k": tmp_path / "k.so"}) for m in (64, 13, 128)]
    python = batch_python(tmp_path, "if m == 13: sys.exit(3)")
    seen = []
    records = final.remeasure_batch(
        jobs, timeout=30, python=str(python), on_record=lambda i, r: seen.append(i)
    )
    assert [r.get("m") for r in records] == [64, None, 128]  # the third by a new child
    assert "exited 3" in records[1]["error"]
    assert seen == [0, 1, 2]


@pytest.mark.slow
def test_a_batch_child_that_hangs_keeps_what_it_measured_before(tmp_path):
    from engine.execution import final

    jobs = [(Problem(m, 64, 64, Layout.NN), {"k": tmp_path / "k.so"}) for m in (64, 13)]
    python = batch_python(tmp_path, "if m == 13: time.sleep(60)")
    started = time.monotonic()
    records = final.remeasure_batch(jobs, timeout=2, python=str(python))
    assert time.monotonic() - started < 30
    assert records[0]["m"] == 64
    assert "sandbox" in records[0]
    assert "did not finish in 2 s per problem" in records[1]["error"]


def test_each_record_reaches_the_caller_while_the_child_still_measures_the_next(tmp_path):
    """The finals print each shape as it is measured (a log once printed "0.0 s" for all but
    the first of a batch, all read at the child's exit)."""
    from engine.execution import final

    jobs = [(Problem(m, 64, 64, Layout.NN), {"k": tmp_path / "k.so"}) for m in (64, 128)]
    python = batch_python(tmp_path, "if m == 128: time.sleep(2)")
    arrived = {}
    final.remeasure_batch(
        jobs,
        timeout=30,
        python=str(python),
        on_record=lambda i, r: arrived.setdefault(i, time.monotonic()),
    )
    assert arrived[1] - arrived[0] > 1.0


def test_final_summary_keeps_what_the_child_ran_under():
    record = {"protocols": {}, "environment": {"gpu_name": "H200"}, "sandbox": "network off"}
    assert final_summary(record)["sandbox"] == "network off"


@pytest.mark.gpu
@pytest.mark.nvcc
def test_the_final_remeasurement_runs_on_the_gpu_inside_its_sandbox():
    """The real child (measure() in a fresh process) works in the sandbox: CUDA, cuBLAS, the
    compile cache and the candidate library all reachable from the allow-listed environment."""
    from engine.execution.final import remeasure
    from engine.verify import harness_kernels

    built = harness_kernels.build_one(harness_kernels.REFERENCE, PROBLEM.layout)
    assert built.ok, built.log[-4000:]
    record = remeasure(
        PROBLEM, {"reference": built.library}, protocols=("device",), device_seconds=2.0
    )
    assert "error" not in record, record.get("error")
    device = record["protocols"]["device"]
    assert "reference" in device["seconds"]
    assert device["rejected_while_timed"] == []
    assert "resident memory" in record["sandbox"]


@pytest.mark.gpu
@pytest.mark.nvcc
def test_one_child_re_measures_several_problems_on_the_gpu():
    from engine.execution.final import remeasure_batch
    from engine.verify import harness_kernels

    built = harness_kernels.build_one(harness_kernels.REFERENCE, Layout.NN)
    assert built.ok, built.log[-4000:]
    problems = [PROBLEM, Problem(512, 256, 2048, Layout.NN)]
    records = remeasure_batch(
        [(p, {"reference": built.library}) for p in problems],
        protocols=("device", "offline"),
        device_seconds=1.0,
    )
    for problem, record in zip(problems, records, strict=True):
        assert "error" not in record, record.get("error")
        assert record["problem"]["m"] == problem.m
        assert "reference" in record["protocols"]["offline"]["seconds"]


def test_the_finals_report_each_shape_as_it_is_measured(monkeypatch, tmp_path):
    from engine.campaign.loop import ProblemResult
    from engine.compilation.compile import CompileResult
    from engine.execution import final

    other = Problem(2048, 2048, 2048, Layout.NN)
    results = [
        ProblemResult(PROBLEM, [record("a", 8.0)], stopped="budget"),
        ProblemResult(other, [record("c", 8.0)], stopped="budget"),
    ]

    def compile_(configs):
        return [
            CompileResult(True, tmp_path / f"{c.name}.so", "h", ("sm_90a",), "", "", 1.0, True)
            for c in configs
        ]

    def remeasure_batch(jobs, *, on_record, **_kwargs):
        records = [{"protocols": {}, "environment": {}}, {"error": "GPU fault"}]
        for index, rec in enumerate(records[: len(jobs)]):
            on_record(index, rec)
        return records[: len(jobs)]

    monkeypatch.setattr(final, "remeasure_batch", remeasure_batch)
    lines: list[str] = []
    final.final_measurements(
        results, baseline="cublaslt_autotune", top=1, compile=compile_, progress=lines.append
    )
    assert lines[0].startswith("re-measuring the top kernels of 2 problems")
    assert lines[1].startswith(f"{PROBLEM}: re-measured (")
    assert lines[2].startswith(f"{other}: failed (")


def test_a_top_kernel_whose_source_changed_is_sanitized_and_measured_again(monkeypatch, tmp_path):
    """Same name, same knobs, another source (its family's template changed): the saved
    verdict and final are not its own."""
    from engine.campaign.loop import ProblemResult
    from engine.compilation.compile import CompileResult
    from engine.execution import final

    results = [ProblemResult(PROBLEM, [record("a", 8.0)], stopped="budget")]
    source = ["old"]

    def compile_(configs):
        return [
            CompileResult(
                True, tmp_path / f"{c.name}.so", source[0], ("sm_90a",), "", "", 1.0, True
            )
            for c in configs
        ]

    class Verdict:
        def to_dict(self):
            return {"ok": True}

    sanitized, measured = [], []

    def remeasure_batch(jobs, *, on_record, **_kwargs):
        for index, (problem, _libraries) in enumerate(jobs):
            measured.append(problem.key)
            on_record(index, {"protocols": {}, "environment": {"gpu": "H200"}})

    monkeypatch.setattr(final, "remeasure_batch", remeasure_batch)
    run = {
        "baseline": "cublaslt_autotune",
        "top": 1,
        "compile": compile_,
        "sanitizer": lambda library: sanitized.append(library.stem) or Verdict(),
    }
    path = tmp_path / "campaign.finals.json"
    final.final_measurements(results, **run, saved=final.SavedFinals(path))
    final.final_measurements(results, **run, saved=final.SavedFinals(path))
    assert (len(sanitized), len(measured)) == (1, 1)  # the same source: done once
    source[0] = "new"
    final.final_measurements(results, **run, saved=final.SavedFinals(path))
    assert (len(sanitized), len(measured)) == (2, 2)


def test_final_summary_keeps_what_cublaslt_ran_beside_the_times():
    kernel = {"algo_id": 66, "label": "algo66 256x128x64 c1x2 s4"}
    record = {
        "protocols": {},
        "environment": {},
        "autotune": {
            "cublaslt_autotune_nn": {"algo": 3, "kernel": kernel, "heuristic_kernel": None},
            "cublaslt_autotune_tn": {"algo": 0},  # a shim that could not say
        },
    }
    assert final_summary(record)["cublaslt_kernels"] == {
        "cublaslt_autotune_nn": {"autotune": kernel, "heuristic": None}
    }
    assert "cublaslt_kernels" not in final_summary({"protocols": {}, "environment": {}})
