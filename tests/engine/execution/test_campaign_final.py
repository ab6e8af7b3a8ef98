"""The GPU executor's parallel verification, the end-of-campaign top-k selection and the sandbox
of the fresh-process re-measurement (the GPU path itself runs in bench/device/gpu_run.sh's campaign
stage and in the gpu-marked test here)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.execution.executor import CompiledCandidate, LocalGpuExecutor
from engine.execution.final import config_of, final_summary, time_spent, top_records
from engine.isolation import processes, sandbox
from engine.outcomes import CandidateRecord, CandidateStatus
from engine.problem import Layout, Problem
from engine.propose.space import SearchSpace
from engine.verify import verifier as verify_module
from engine.verify.verifier import VerifyResult
from tests.engine.process_fakes import killed_for_memory

PROBLEM = Problem(1024, 1024, 1024, Layout.NN)


CONFIG_INDEX: dict[str, int] = {}  # record name → its library config: distinct per name


def record(
    name: str, seconds: float | None, status: str = CandidateStatus.OK, **kw
) -> CandidateRecord:
    space = SearchSpace.library(PROBLEM, families=("sm90",))
    config = space.configs[CONFIG_INDEX.setdefault(name, len(CONFIG_INDEX)) % len(space.configs)]
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


def fake_compile(tmp_path: Path):
    """compile for the finals: every config "builds" to a library named after it."""
    from engine.compilation.compile import CompileResult

    def compile_(configs):
        return [
            CompileResult(True, tmp_path / f"{c.name}.so", c.name, ("sm_90a",), "", "", 1.0, True)
            for c in configs
        ]

    return compile_


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = "ok"

    def to_dict(self):
        return {"ok": self.ok, "reason": self.reason}


def judged_by_name(records, passing: set[str], seen: list[str] | None = None):
    """A sanitizer that passes the kernels of the records named in ``passing``."""
    names = {config_of(r).name: r.name for r in records}

    def sanitizer(library, config, problem):
        name = names[config.name]
        if seen is not None:
            seen.append(name)
        return Verdict(True) if name in passing else Verdict(False, "memcheck")

    return sanitizer


def measuring(measured: dict):
    def fake_remeasure(jobs, *, on_record, **_kwargs):
        for index, (problem, libraries) in enumerate(jobs):
            measured[problem.key] = sorted(libraries)
            on_record(index, {"error": "not on a GPU"})
        return [{"error": "not on a GPU"} for _ in jobs]

    return fake_remeasure


def test_a_top_kernel_that_fails_the_sanitizer_cannot_be_the_final_best(monkeypatch, tmp_path):
    from engine.campaign.loop import ProblemResult
    from engine.execution import final

    records = [record("fast", 8.0), record("middle", 9.0), record("slow", 30.0)]
    result = ProblemResult(PROBLEM, records, stopped="budget")
    measured: dict = {}
    monkeypatch.setattr(final, "remeasure_batch", measuring(measured))
    finals = final.final_measurements(
        [result],
        baseline="cublaslt_autotune",
        top=2,
        compile=fake_compile(tmp_path),
        sanitizer=judged_by_name(records, {"middle", "slow"}),
    )
    assert measured[PROBLEM.key] == ["middle", "slow"]  # the next in rank order took its place
    assert finals[PROBLEM.key]["sanitize"] == {
        "fast": {"ok": False, "reason": "memcheck"},
        "middle": {"ok": True, "reason": "ok"},
        "slow": {"ok": True, "reason": "ok"},
    }


def test_finals_sanitize_in_rank_order_until_enough_pass_and_give_up_at_three_times(
    monkeypatch, tmp_path
):
    from engine.campaign.loop import ProblemResult
    from engine.execution import final

    records = [record(f"k{i}", 8.0 + i) for i in range(9)]
    result = ProblemResult(PROBLEM, records, stopped="budget")
    measured: dict = {}
    monkeypatch.setattr(final, "remeasure_batch", measuring(measured))
    seen: list[str] = []
    run = {"baseline": "cublaslt_autotune", "top": 2, "compile": fake_compile(tmp_path)}
    passing = judged_by_name(records, {"k1", "k4", "k5"}, seen)
    final.final_measurements([result], **run, sanitizer=passing)
    assert seen == ["k0", "k1", "k2", "k3", "k4"]  # rank order, a round a time, until 2 passed
    assert measured[PROBLEM.key] == ["k1", "k4"]

    seen.clear()
    failing = judged_by_name(records, set(), seen)
    finals = final.final_measurements([result], **run, sanitizer=failing)
    assert seen == ["k0", "k1", "k2", "k3", "k4", "k5"]  # 3 x 2 tried, then it gives up
    error = finals[PROBLEM.key]["error"]
    assert error.startswith("no kernel passed: the 6 best verified kernels tried in rank order")
    assert "memcheck: 6" in error
    assert len(finals[PROBLEM.key]["sanitize"]) == 6


def test_a_shape_without_a_verified_kernel_ends_with_a_reason(monkeypatch, tmp_path):
    from engine.campaign.loop import ProblemResult
    from engine.execution import final

    other = Problem(2048, 2048, 2048, Layout.NN)
    results = [
        ProblemResult(PROBLEM, [record("a", 8.0)], stopped="budget"),
        ProblemResult(other, [record("bad", None, CandidateStatus.REJECTED)], stopped="budget"),
    ]
    measured: dict = {}
    monkeypatch.setattr(final, "remeasure_batch", measuring(measured))
    finals = final.final_measurements(
        results, baseline="cublaslt_autotune", top=1, compile=fake_compile(tmp_path)
    )
    assert list(measured) == [PROBLEM.key]
    assert finals[other.key] == {"error": "no verified kernel to re-measure", "sanitize": {}}


def test_a_missing_compute_sanitizer_is_each_kernels_verdict_and_is_not_kept(monkeypatch, tmp_path):
    from engine.campaign.loop import ProblemResult
    from engine.commands import optimize_command as optimize
    from engine.execution import final
    from engine.verify import sanitize

    monkeypatch.setattr(sanitize, "compute_sanitizer_path", lambda config=None: None)
    records = [record("a", 8.0), record("b", 9.0)]
    measured: dict = {}
    monkeypatch.setattr(final, "remeasure_batch", measuring(measured))
    path = tmp_path / "campaign.finals.json"
    finals = final.final_measurements(
        [ProblemResult(PROBLEM, records, stopped="budget")],
        baseline="cublaslt_autotune",
        top=1,
        compile=fake_compile(tmp_path),
        sanitizer=optimize.sanitize_library,
        saved=final.SavedFinals(path),
    )
    reasons = {name: v["reason"] for name, v in finals[PROBLEM.key]["sanitize"].items()}
    assert reasons == {"a": "sanitizer_missing", "b": "sanitizer_missing"}
    assert "sanitizer_missing: 2" in finals[PROBLEM.key]["error"]
    assert measured == {}
    assert final.SavedFinals(path).data["sanitize"] == {}  # tried again once the tool is there


def test_a_verdict_kept_under_another_key_is_not_reused(monkeypatch, tmp_path):
    """The false call_failed verdicts of the fixed-problem sanitizer were kept by kernel alone:
    a verdict is reused only for the same problems and the same harness."""
    from engine.campaign.loop import ProblemResult
    from engine.execution import final
    from engine.verify import sanitize

    records = [record("evenk", 8.0)]
    config = config_of(records[0])
    kernel = final.kernel_id("evenk", config.name)  # fake_compile's source hash: the name
    path = tmp_path / "campaign.finals.json"
    path.write_text(json.dumps({"sanitize": {kernel: {"ok": False, "reason": "call_failed"}}}))
    monkeypatch.setattr(final, "remeasure_batch", measuring({}))
    seen: list[str] = []
    run = {
        "baseline": "cublaslt_autotune",
        "top": 1,
        "compile": fake_compile(tmp_path),
        "sanitizer": judged_by_name(records, {"evenk"}, seen),
    }
    results = [ProblemResult(PROBLEM, records, stopped="budget")]
    final.final_measurements(results, **run, saved=final.SavedFinals(path))
    assert seen == ["evenk"]
    at = sanitize.verdict_key(config, PROBLEM)
    assert final.SavedFinals(path).passed(kernel, at)
    final.final_measurements(results, **run, saved=final.SavedFinals(path))
    assert seen == ["evenk"]  # the same key: kept
    harness = tmp_path / "sanitize_main.cu"
    harness.write_text("// a new harness")
    monkeypatch.setattr(sanitize, "HARNESS_FILES", (harness,))
    final.final_measurements(results, **run, saved=final.SavedFinals(path))
    assert seen == ["evenk", "evenk"]  # a new harness: sanitized again


def test_the_finals_choice_is_the_fastest_kernel_not_rejected_in_the_device_protocol():
    def protocol(seconds, rejected=()):
        return {
            "seconds": seconds,
            "speedups": {n: {"cublaslt_autotune": 1e-5 / t} for n, t in seconds.items()},
            "rejected_while_timed": list(rejected),
        }

    final = {
        "protocols": {
            "offline": protocol({"a": 1e-6, "b": 2e-6}),
            "device": protocol({"a": 1e-6, "b": 2e-6, "c": 3e-6}, rejected=["a"]),
        }
    }
    from engine.execution.final import final_choice

    assert final_choice(final) == ("b", "device")
    assert final_choice({"error": "GPU fault"}) is None
    everything_rejected = {"protocols": {"device": protocol({"a": 1e-6}, rejected=["a"])}}
    assert final_choice(everything_rejected) is None


def test_finals_cut_short_resume_without_measuring_a_shape_or_sanitizing_a_kernel_twice(
    monkeypatch, tmp_path
):
    from engine.campaign.loop import ProblemResult
    from engine.execution import final

    other = Problem(2048, 2048, 2048, Layout.NN)
    results = [
        ProblemResult(PROBLEM, [record("a", 8.0), record("b", 9.0)], stopped="budget"),
        ProblemResult(other, [record("c", 8.0)], stopped="budget"),
    ]

    compile_ = fake_compile(tmp_path)
    sanitized, measured, cut = [], [], [True]

    def sanitizer(library, config, problem):
        sanitized.append(library.stem)
        return Verdict(True)

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
    from engine.execution.final import SavedFinals, final_settings

    settings = final_settings(("device",), 20.0, ())
    saved = SavedFinals(tmp_path / "f.json")
    saved.add_final("k", ["a", "b"], {"protocols": {}}, settings)
    again = SavedFinals(tmp_path / "f.json")
    assert again.final("k", ["b", "a"], settings) == {"protocols": {}}
    assert again.final("k", ["a", "c"], settings) is None
    saved.add_final("e", ["a"], {"error": "GPU fault"}, settings)
    assert SavedFinals(tmp_path / "f.json").final("e", ["a"], settings) is None  # retried


def test_a_saved_final_is_reused_only_under_the_same_settings(tmp_path):
    from engine.execution.final import SavedFinals, final_settings

    saved = SavedFinals(tmp_path / "f.json")
    saved.add_final("k", ["a"], {"protocols": {}}, final_settings(("device",), 20.0, ()))
    again = SavedFinals(tmp_path / "f.json")
    assert again.final("k", ["a"], final_settings(("device",), 20.0, ())) is not None
    assert again.final("k", ["a"], final_settings(("device",), 3.0, ())) is None
    assert again.final("k", ["a"], final_settings(("device",), 20.0, ("tunableop",))) is None
    assert again.final("k", ["a"], final_settings(("device", "offline"), 20.0, ())) is None
    older = {**final_settings(("device",), 20.0, ()), "protocol_revision": 1}
    saved.add_final("old", ["a"], {"protocols": {}}, older)
    reloaded = SavedFinals(tmp_path / "f.json")
    assert reloaded.final("old", ["a"], older) is not None  # kept, under its own revision
    assert reloaded.final("old", ["a"], final_settings(("device",), 20.0, ())) is None
    unrevised = final_settings(("device",), 20.0, ())
    del unrevised["protocol_revision"]  # kept before protocols had revisions
    saved.add_final("older", ["a"], {"protocols": {}}, unrevised)
    assert (
        SavedFinals(tmp_path / "f.json").final(
            "older", ["a"], final_settings(("device",), 20.0, ())
        )
        is None
    )


def test_a_saved_final_is_measured_again_on_another_gpu_model(tmp_path):
    from engine.execution.final import SavedFinals, final_settings

    settings = final_settings(("device",), 20.0, ())
    summary = {"protocols": {}, "environment": {"gpu_name": "NVIDIA H100 80GB HBM3"}}
    SavedFinals(tmp_path / "f.json").add_final("k", ["a"], summary, settings)
    again = SavedFinals(tmp_path / "f.json")
    assert again.final("k", ["a"], settings, "NVIDIA H100 80GB HBM3") == summary
    assert again.final("k", ["a"], settings, "NVIDIA H200") is None
    assert again.final("k", ["a"], settings) == summary  # no GPU named: not checked


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
    from engine.execution import final

    other = Problem(2048, 2048, 2048, Layout.NN)
    results = [
        ProblemResult(PROBLEM, [record("a", 8.0)], stopped="budget"),
        ProblemResult(other, [record("c", 8.0)], stopped="budget"),
    ]

    compile_ = fake_compile(tmp_path)

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
        "sanitizer": lambda library, config, problem: (
            sanitized.append(library.stem) or Verdict(True)
        ),
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


def test_a_bundle_finds_the_finals_verdict_by_the_configs_own_source_and_problems(tmp_path):
    """engine bundle asks by config: a Triton kernel's bundled source (its cubin embedded) is
    not the source the finals built, and the verdict key comes from the config and the shape."""
    from engine.codegen import TritonConfig
    from engine.compilation.compile import source_hash
    from engine.execution.final import SavedFinals, kernel_id, sanitizer_passed
    from engine.verify import sanitize

    config = TritonConfig(layout=Layout.NN, tile_k=64, even_k=True)
    saved = SavedFinals(tmp_path / "f.json")
    kernel = kernel_id(config.name, source_hash(config.render()))
    saved.add_sanitized(kernel, sanitize.verdict_key(config, PROBLEM), {"ok": True})
    again = SavedFinals(tmp_path / "f.json")
    assert sanitizer_passed(again, config.name, config, PROBLEM)
    assert not sanitizer_passed(again, config.name, config, Problem(256, 256, 256, Layout.NN))


def test_a_finals_progress_line_says_where_the_shapes_time_went():
    summary = {
        "torch_baselines": {
            "inductor_max_autotune_nn": {"tuning_seconds": 7.04, "pick": {}},
            "tunableop_nn": {"tuning_seconds": 0.01},
        },
        "protocols": {"device": {"wall_s": 12.06}, "offline": {"wall_s": 4.0}},
    }
    assert time_spent(summary) == (
        "tuning inductor_max_autotune_nn 7.0 s, tunableop_nn 0.0 s; device 12.1 s, offline 4.0 s"
    )
    assert time_spent({"protocols": {"device": {"seconds": {}}}}) == ""
    assert time_spent({"error": "nvcc failed"}) == ""


def test_final_summary_keeps_each_protocols_wall_time():
    result = {
        "statistic": "median",
        "seconds": {"k": 1e-5},
        "best_baselines": {},
        "speedups": {},
        "rejected_while_timed": [],
        "wall_s": 12.5,
    }
    record = {"protocols": {"device": result}, "environment": {}}
    assert final_summary(record)["protocols"]["device"]["wall_s"] == 12.5
