"""The end of a campaign: each problem's top-k kernels re-measured in a fresh process, with
longer runs, in every protocol (device, CUDA-L2's offline and server modes).

The search ranks candidates by short device-protocol runs inside a long-lived process; the
numbers a campaign reports come from here instead: a new process (no state left over from the
search; a few problems in turn per process), the top-k and every baseline interleaved, device
runs up to ``device_seconds``. The top-k are the best verified kernels that pass compute-sanitizer,
tried in rank order (at most GIVE_UP_FACTOR × k); a problem left without one gets the reason.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.codegen import KernelConfig, get_family
from engine.compilation.compile import CompileResult, source_hash
from engine.compilation.source_kernel import SourceKernel, default_builder
from engine.config import load as load_config
from engine.isolation import processes, sandbox
from engine.outcomes import CandidateRecord, CandidateStatus
from engine.problem import Layout, Problem
from engine.timing import cublaslt_kernels
from engine.timing.baseline_names import TORCH_TUNED
from engine.timing.protocol_names import PROTOCOL_REVISION
from engine.timing.ratios import quartiles
from engine.verify import sanitize

FINAL_PROTOCOLS = ("device", "offline", "server")
FINAL_TIMEOUT = 600.0


def top_records(records: Sequence[CandidateRecord], baseline: str, k: int) -> list[CandidateRecord]:
    """The ``k`` best verified candidates by speedup over ``baseline``, model-written ones
    (engine.llm, with their source) included: they are sanitized and re-measured like any."""
    ok = [
        r
        for r in records
        if r.status == CandidateStatus.OK and baseline in r.baselines and r.seconds
    ]
    ok.sort(key=lambda r: r.seconds / r.baselines[baseline])
    return ok[:k]


def config_of(record: CandidateRecord) -> Any:
    """The record's kernel: a family config, or a model-written source (engine.llm)."""
    if record.source is not None:
        return SourceKernel(record.source, Layout.parse(str(record.knobs.get("layout", "nn"))))
    return get_family(record.family).from_knobs(dict(record.knobs))


def compile_sources(kernels: Sequence[Any]) -> list[CompileResult]:
    """Model-written kernels built as the campaign built them (engine.llm.evaluate: the
    candidate flags, each layout's define), through the compile cache."""

    build = default_builder()
    out: list[CompileResult] = []
    for kernel in kernels:
        [result] = build([kernel.render()], kernel.layout, tuple(kernel.archs))
        out.append(result)
    return out


RemeasureJob = tuple[Problem, dict[str, Path]]  # a problem and its candidates' libraries
FINAL_BATCH = 8  # problems per re-measurement child
RECORD_POLL_S = 0.5  # how often the parent looks for records the child has written


def remeasure(
    problem: Problem,
    libraries: dict[str, Path],
    *,
    protocols: Sequence[str] = FINAL_PROTOCOLS,
    device_seconds: float = 20.0,
    timeout: float = FINAL_TIMEOUT,
    python: str = sys.executable,
    extra_baselines: Sequence[str] = TORCH_TUNED,
) -> dict[str, Any]:
    """One problem's re-measurement (see :func:`remeasure_batch`): its record, or
    ``{"error": ...}``."""
    [record] = remeasure_batch(
        [(problem, libraries)],
        protocols=protocols,
        device_seconds=device_seconds,
        timeout=timeout,
        python=python,
        extra_baselines=extra_baselines,
    )
    return record


def remeasure_batch(
    jobs: Sequence[RemeasureJob],
    *,
    protocols: Sequence[str] = FINAL_PROTOCOLS,
    device_seconds: float = 20.0,
    timeout: float = FINAL_TIMEOUT,
    python: str = sys.executable,
    on_record: Callable[[int, dict[str, Any]], None] = lambda _i, _record: None,
    heat_seconds: float | None = None,
    probe_overhead: bool = True,
    extra_baselines: Sequence[str] = TORCH_TUNED,
) -> list[dict[str, Any]]:
    """measure() on each job in turn, in one child process; a record per job, in order.

    One child for several problems pays the interpreter, torch, CUDA and the cuBLAS shim once
    (about 8 s on the H200 host) instead of per problem; each problem is still measured in a
    process that did no searching. The child writes each record as it finishes, so ``on_record``
    (index, record) sees every finished problem even when the child, or this caller, is
    interrupted later. When the child dies or times out, the problem it was on gets the error
    and the ones after it are measured by a new child. ``timeout`` is per problem: a child gets
    ``timeout`` times its number of problems.

    The child loads the candidates, so it runs in the candidate sandbox (engine.isolation.sandbox)
    like the verifier: the allow-listed environment with a private HOME and TMPDIR, an empty working
    directory, the GPU children's limits and, where the OS allows, no network. Each record says
    what it ran under (``sandbox``). ``extra_baselines``: the torch-tuned baselines the child
    tunes and times beside NVIDIA's (engine.timing.baseline_names.TORCH_TUNED; all by default).

    ``heat_seconds`` (measure's default when None) and ``probe_overhead=False`` are for sweeps
    that only rank kernels in the device protocol: a shorter heat-up, no host-overhead probe."""
    options = {"heat_seconds": heat_seconds, "probe_overhead": None if probe_overhead else False}
    records: list[dict[str, Any]] = []
    while len(records) < len(jobs):
        done = len(records)

        def take(index: int, record: dict[str, Any], done: int = done) -> None:
            records.append(record)
            on_record(done + index, record)

        failure = _remeasure_child(
            jobs[done:],
            protocols,
            device_seconds,
            timeout,
            python,
            take,
            extra_baselines,
            options,
        )
        if failure is not None and len(records) < len(jobs):
            take(len(records) - done, {"error": failure})
    return records


def _remeasure_child(
    jobs: Sequence[RemeasureJob],
    protocols: Sequence[str],
    device_seconds: float,
    timeout: float,
    python: str,
    on_record: Callable[[int, dict[str, Any]], None],
    extra_baselines: Sequence[str] = TORCH_TUNED,
    options: dict[str, Any] | None = None,
) -> str | None:
    """One child over ``jobs``; hands each record it wrote to ``on_record``; returns why it
    stopped early (None when it did every job)."""
    with tempfile.TemporaryDirectory(prefix="gemmforge-final-") as workdir:
        spec = Path(workdir) / "spec.json"
        out = Path(workdir) / "records.jsonl"
        spec.write_text(
            json.dumps(
                {
                    "jobs": [
                        {
                            "problem": [p.m, p.n, p.k, p.layout.value],
                            "libraries": {n: str(path) for n, path in libraries.items()},
                        }
                        for p, libraries in jobs
                    ],
                    "protocols": list(protocols),
                    "device_seconds": device_seconds,
                    "extra_baselines": list(extra_baselines),
                    **{k: v for k, v in (options or {}).items() if v is not None},
                }
            )
        )
        taken = 0

        def take_written() -> None:
            nonlocal taken
            written = out.read_text().split("\n")[:-1] if out.exists() else []  # whole lines
            for line in written[taken : len(jobs)]:
                on_record(taken, {**json.loads(line), "sandbox": applied})
                taken += 1

        running = processes.start(
            [python, "-m", "engine.execution.final", spec, out],
            cwd=Path(workdir),
            env=sandbox.engine_child_env(Path(workdir)),
            policy=sandbox.gpu_policy(),
        )
        applied = running.sandbox.describe() if running.sandbox else "none"
        with ThreadPoolExecutor(1, thread_name_prefix="final-wait") as pool:
            waiting = pool.submit(running.finish, stdin=None, timeout=timeout * len(jobs))
            try:
                while not waiting.done():
                    take_written()  # each problem's record as soon as the child wrote it
                    futures_wait([waiting], timeout=RECORD_POLL_S)
            except BaseException:  # interrupted: the child must not go on using the GPU
                processes.kill_group(running.proc)
                raise
            finally:
                take_written()  # what it measured before an interrupt is kept
            result = waiting.result()
        if result.sandbox is not None:
            applied = result.sandbox.describe()
        if taken == len(jobs):
            return None
        if result.timed_out:
            return f"re-measurement did not finish in {timeout:.0f} s per problem"
        if result.killed_for is not None:  # over its memory, file-size or CPU limit
            return (
                f"re-measurement stopped by its sandbox ({result.killed_for}; "
                f"{applied}): {result.stderr[-2000:]}"
            )
        return f"re-measurement exited {result.returncode}: {result.stderr[-2000:]}"


def final_summary(record: dict[str, Any]) -> dict[str, Any]:
    """Per protocol: each candidate's time and speedups over the best-of-layout baselines."""
    if "error" in record:
        return record
    out: dict[str, Any] = {}
    for protocol, result in record["protocols"].items():
        out[protocol] = {
            "statistic": result["statistic"],
            "seconds": result["seconds"],
            "best_baselines": result["best_baselines"],
            "speedups": result["speedups"],
            "rejected_while_timed": result["rejected_while_timed"],
            "rejections": result.get("rejections", {}),  # why (engine.verify.timed_checks)
        }
        # each runner's interquartile range, where kept: what tells a tie from a win
        if kept := quartiles(result.get("stats") or {}):
            out[protocol]["quartiles"] = kept
        for key in ("power", "power_by_runner", "wall_s"):  # NVML, where the child could read it
            if key in result:
                out[protocol][key] = result[key]
    # what its times mean: a reader sets apart those taken under an older revision
    summary = {
        "protocols": out,
        "environment": record["environment"],
        "protocol_revision": PROTOCOL_REVISION,
    }
    if "sandbox" in record:
        summary["sandbox"] = record["sandbox"]
    if kernels := cublaslt_kernels.from_record(record):
        summary["cublaslt_kernels"] = kernels
    if tuning := torch_tuning(record):
        summary["torch_baselines"] = tuning
    return summary


def time_spent(summary: Mapping[str, Any]) -> str:
    """Where a final's time went, as its summary recorded it: each torch-tuned baseline's tuning
    and each protocol's run ("tuning inductor_max_autotune_nn 7.0 s, …; device 12.1 s, …")."""
    tuning = [
        f"{name} {report['tuning_seconds']:.1f} s"
        for name, report in (summary.get("torch_baselines") or {}).items()
        if isinstance(report.get("tuning_seconds"), int | float)
    ]
    protocols = [
        f"{name} {result['wall_s']:.1f} s"
        for name, result in (summary.get("protocols") or {}).items()
        if isinstance(result.get("wall_s"), int | float)
    ]
    parts = ["tuning " + ", ".join(tuning)] if tuning else []
    return "; ".join([*parts, *([", ".join(protocols)] if protocols else [])])


def torch_tuning(record: dict[str, Any]) -> dict[str, Any]:
    """Per torch-tuned runner (``inductor_max_autotune_nn``, …): its tuning time and its pick
    (Inductor: the fastest choice and what the code runs; TunableOp: the kernels it chose)."""
    out: dict[str, Any] = {}
    for name, report in record.get("autotune", {}).items():
        if name.startswith(TORCH_TUNED):
            out[name] = {k: v for k, v in report.items() if k != "choices"}
    return out


Sanitizer = Callable[[Path, Any, Problem], Any]  # library, its config, the problem it serves
# → a result with .ok and .to_dict() (engine.verify.sanitize.SanitizeResult)
GIVE_UP_FACTOR = 3  # a shape's finals try at most this many kernels per kernel they re-measure
SANITIZE_TIMEOUT = 60.0


def sanitize_library(library: Path, kernel: Any, problem: Problem) -> sanitize.SanitizeResult:
    """The finals' sanitizer: compute-sanitizer on ``library`` at the problems its config
    accepts and at the shape it serves (engine.verify.sanitize.sanitize_problems)."""

    return sanitize.sanitize(
        library, sanitize.sanitize_problems(kernel, problem), timeout=SANITIZE_TIMEOUT
    )


def kernel_id(name: str, source_hash: str) -> str:
    """How SavedFinals names a kernel: its name and its source, so that a kernel whose source
    changed since (a family's template, same knobs, same name) is sanitized and measured again."""
    return f"{name}@{source_hash[:16]}"


def final_settings(
    protocols: Sequence[str], device_seconds: float, extra_baselines: Sequence[str]
) -> dict[str, Any]:
    """What a final summary was measured with: a saved one is reused only under the same."""
    return {
        "protocols": list(protocols),
        "device_seconds": device_seconds,
        "extra_baselines": list(extra_baselines),
        "protocol_revision": PROTOCOL_REVISION,
    }


class SavedFinals:
    """The finals measured so far, in a JSON file (beside the campaign's database), so that a
    campaign cut during its finals resumes them: each sanitizer verdict (by kernel and by
    engine.verify.sanitize.verdict_key: the problems it ran, the harness) and each shape's final
    summary (for the top kernels and the settings it was measured with) is written as it comes.
    Kernels are named by :func:`kernel_id`. Without a path nothing is kept."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.data: dict[str, dict[str, Any]] = {"sanitize": {}, "finals": {}}
        if path is not None and path.exists():
            loaded = json.loads(path.read_text())
            self.data = {"sanitize": loaded.get("sanitize", {}), "finals": loaded.get("finals", {})}

    def sanitized(self, kernel: str, at: str) -> dict[str, Any] | None:
        """The verdict on ``kernel`` under the verdict key ``at``; a verdict kept under another
        key (other problems, an older harness) is not this one."""
        return self.data["sanitize"].get(f"{kernel} {at}")

    def passed(self, kernel: str, at: str) -> bool:
        verdict = self.sanitized(kernel, at)
        return verdict is not None and bool(verdict.get("ok"))

    def add_sanitized(self, kernel: str, at: str, verdict: dict[str, Any]) -> None:
        if verdict.get("reason") in sanitize.SETUP_REASONS:
            return  # the environment failed, not the kernel: sanitized again next time
        self.data["sanitize"][f"{kernel} {at}"] = verdict
        self._save()

    def final(
        self,
        key: str,
        kernels: Sequence[str],
        settings: dict[str, Any],
        gpu_name: str | None = None,
    ) -> dict[str, Any] | None:
        """The shape's saved summary, if it was measured with these very top kernels and
        ``settings`` (:func:`final_settings`), on a ``gpu_name`` GPU where one is given: a
        campaign's finals resumed on another GPU model measure every shape on that one."""
        entry = self.data["finals"].get(key)
        if entry is None or sorted(entry["kernels"]) != sorted(kernels):
            return None
        if entry.get("settings") != settings:
            return None
        measured_on = entry["summary"].get("environment", {}).get("gpu_name")
        if gpu_name is not None and measured_on != gpu_name:
            return None
        return entry["summary"]

    def add_final(
        self, key: str, kernels: Sequence[str], summary: dict[str, Any], settings: dict[str, Any]
    ) -> None:
        if "error" in summary:
            return  # measured again next time
        self.data["finals"][key] = {
            "kernels": sorted(kernels),
            "settings": settings,
            "summary": summary,
        }
        self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        partial = self.path.with_name(self.path.name + ".partial")
        partial.write_text(json.dumps(self.data))
        partial.replace(self.path)  # atomic: a crash leaves the previous file whole


def sanitizer_passed(saved: SavedFinals, name: str, config: Any, problem: Problem) -> bool:
    """Whether ``saved`` holds a passing verdict on kernel ``name`` as ``config`` renders it
    (a family config, or a model-written SourceKernel), sanitized for ``problem``."""
    kernel = kernel_id(name, source_hash(config.render()))
    return saved.passed(kernel, sanitize.verdict_key(config, problem))


@dataclass
class ShapePick:
    """One shape's way to its final kernels: its verified candidates in rank order (at most
    GIVE_UP_FACTOR times the kernels wanted), tried a few at a time until enough pass."""

    problem: Problem
    ranked: list[CandidateRecord]
    chosen: list[str] = field(default_factory=list)  # built and passed, in rank order
    tried: int = 0
    verdicts: dict[str, dict[str, Any]] = field(default_factory=dict)  # kernel → its verdict
    unbuilt: dict[str, str] = field(default_factory=dict)  # kernel → why it did not build

    def next_batch(self, wanted: int) -> list[CandidateRecord]:
        """The next untried kernels, as many as are still missing."""
        batch = self.ranked[self.tried : self.tried + max(0, wanted - len(self.chosen))]
        self.tried += len(batch)
        return batch

    def failure(self) -> str:
        """Why no kernel of this shape reaches its final."""
        if not self.ranked:
            return "no verified kernel to re-measure"
        failed: dict[str, int] = {}
        for verdict in self.verdicts.values():
            reason = str(verdict.get("reason", "failed"))
            failed[reason] = failed.get(reason, 0) + 1
        parts = [f"{reason}: {count}" for reason, count in sorted(failed.items())]
        if self.unbuilt:
            parts.append(f"did not build: {len(self.unbuilt)}")
        return (
            f"no kernel passed: the {self.tried} best verified kernels tried in rank order "
            f"({', '.join(parts)})"
        )


def pick_kernels(
    results: Sequence[Any],
    *,
    baseline: str,
    top: int,
    compile: Callable[[list[KernelConfig]], list[CompileResult]],
    sanitizer: Sanitizer | None,
    saved: SavedFinals,
    sanitize_jobs: int = 8,
    progress: Callable[[str], None] = lambda _msg: None,
) -> tuple[dict[str, ShapePick], dict[str, CompileResult]]:
    """Per problem key, the kernels its final re-measures: its verified candidates in rank
    order, built and (with ``sanitizer``) sanitized at the problems their configs accept
    (engine.verify.sanitize.sanitize_problems), a round at a time, until ``top`` passed or
    GIVE_UP_FACTOR × ``top`` were tried. Verdicts come from ``saved`` where it has them under
    the same key, and go to it. Also returns every build, by kernel name."""
    picks = {
        r.problem.key: ShapePick(r.problem, top_records(r.records, baseline, GIVE_UP_FACTOR * top))
        for r in results
    }
    built: dict[str, CompileResult] = {}
    configs: dict[str, Any] = {}
    while batches := {k: b for k, p in picks.items() if (b := p.next_batch(top))}:
        new = {r.name: r for batch in batches.values() for r in batch if r.name not in built}
        configs.update({name: config_of(record) for name, record in new.items()})
        built.update(build_kernels({n: configs[n] for n in new}, compile))
        verdicts: dict[tuple[str, str], dict[str, Any]] = {}
        if sanitizer is not None:
            jobs = [
                (key, r.name) for key, batch in batches.items() for r in batch if built[r.name].ok
            ]
            verdicts = sanitize_kernels(
                jobs, picks, built, configs, sanitizer, saved, sanitize_jobs, progress
            )
        for key, batch in batches.items():
            pick = picks[key]
            for record in batch:
                if not built[record.name].ok:
                    pick.unbuilt[record.name] = built[record.name].error or "build failed"
                    continue
                verdict = verdicts.get((key, record.name))
                if verdict is not None:
                    pick.verdicts[record.name] = verdict
                if verdict is None or verdict.get("ok"):
                    pick.chosen.append(record.name)
    return picks, built


def build_kernels(
    kernels: dict[str, Any], compile: Callable[[list[KernelConfig]], list[CompileResult]]
) -> dict[str, CompileResult]:
    """Kernel name → its build: family configs through ``compile``, model-written sources as
    the campaign built them (:func:`compile_sources`)."""
    family = [n for n, k in kernels.items() if k.FAMILY != "llm"]
    written = [n for n, k in kernels.items() if k.FAMILY == "llm"]
    out: dict[str, CompileResult] = {}
    if family:
        out.update(zip(family, compile([kernels[n] for n in family]), strict=True))
    if written:
        out.update(zip(written, compile_sources([kernels[n] for n in written]), strict=True))
    return out


def sanitize_kernels(
    jobs: Sequence[tuple[str, str]],
    picks: dict[str, ShapePick],
    built: dict[str, CompileResult],
    configs: dict[str, Any],
    sanitizer: Sanitizer,
    saved: SavedFinals,
    sanitize_jobs: int,
    progress: Callable[[str], None],
) -> dict[tuple[str, str], dict[str, Any]]:
    """(problem key, kernel) → the kernel's verdict at that problem: saved, or run now."""
    keys: dict[tuple[str, str], tuple[str, str]] = {}  # job → (kernel id, verdict key)
    for key, name in jobs:
        at = sanitize.verdict_key(configs[name], picks[key].problem)
        keys[(key, name)] = (kernel_id(name, built[name].source_hash), at)
    verdicts = {job: v for job, ids in keys.items() if (v := saved.sanitized(*ids)) is not None}
    todo: dict[tuple[str, str], tuple[str, str]] = {}  # one run per kernel and verdict key
    for job, ids in keys.items():
        if job not in verdicts:
            todo.setdefault(ids, job)
    progress(f"sanitizing {len(todo)} kernels ({len(verdicts)} sanitized before)")

    def run(job: tuple[str, str]) -> dict[str, Any]:
        key, name = job
        library = built[name].library
        assert library is not None
        return sanitizer(library, configs[name], picks[key].problem).to_dict()

    with ThreadPoolExecutor(max(1, sanitize_jobs)) as pool:
        for ids, verdict in zip(todo, pool.map(run, todo.values()), strict=True):
            saved.add_sanitized(*ids, verdict)
            for job, job_ids in keys.items():
                if job_ids == ids:
                    verdicts[job] = verdict
    return verdicts


def final_choice(final: dict[str, Any]) -> tuple[str, str] | None:
    """(kernel, protocol): the kernel a final chose, the fastest in its device protocol (else
    in its first protocol that timed one) of those neither rejected while timed nor under the
    physical floor; None when it has none (an error, every kernel rejected)."""
    protocols = final.get("protocols") or {}
    for protocol in sorted(protocols, key=lambda p: p != "device"):
        summary = protocols[protocol]
        rejected = set(summary.get("rejected_while_timed", ()))
        timed = {
            n: summary["seconds"][n]
            for n in summary.get("speedups", {})
            if n not in rejected and summary["seconds"].get(n)
        }
        if timed:
            # exact ties go to the first name, as engine.timing.ratios.rank breaks them
            return min(timed, key=lambda n: (timed[n], n)), protocol
    return None


def no_choice_reason(final: dict[str, Any]) -> str:
    """Why a final chose no kernel (:func:`final_choice` is None)."""
    return str(final.get("error") or "every kernel re-measured was rejected while timed")


def final_measurements(
    results: Sequence[Any],
    *,
    baseline: str,
    top: int,
    compile: Callable[[list[KernelConfig]], list[CompileResult]],
    protocols: Sequence[str] = FINAL_PROTOCOLS,
    device_seconds: float = 20.0,
    sanitizer: Sanitizer | None = None,
    sanitize_jobs: int = 8,
    progress: Callable[[str], None] = lambda _msg: None,
    saved: SavedFinals | None = None,
    batch: int = FINAL_BATCH,
    extra_baselines: Sequence[str] = TORCH_TUNED,
    gpu_name: str | None = None,
) -> dict[str, Any]:
    """{problem key: final summary} for every problem: its top ``top`` kernels re-measured, or
    ``{"error": why}`` when none could be (no verified kernel, none that built and passed).

    With ``sanitizer``, the kernels are sanitized in rank order until ``top`` pass
    (:func:`pick_kernels`): one that fails cannot become the shape's best, and every verdict is
    kept under ``sanitize``. ``saved``: what an earlier, interrupted run measured (reused, not
    measured again, where its kernels and settings are these and, given ``gpu_name``, its GPU
    model is this one) and where each new result goes.
    Problems are re-measured ``batch`` at a time per child process (:func:`remeasure_batch`)."""
    saved = saved or SavedFinals(None)
    picks, built = pick_kernels(
        results,
        baseline=baseline,
        top=top,
        compile=compile,
        sanitizer=sanitizer,
        saved=saved,
        sanitize_jobs=sanitize_jobs,
        progress=progress,
    )
    settings = final_settings(protocols, device_seconds, extra_baselines)
    ids = {n: kernel_id(n, b.source_hash) for n, b in built.items()}
    finals: dict[str, Any] = {}
    pending: list[tuple[Problem, dict[str, Path], dict[str, Any]]] = []
    for result in results:
        key = result.problem.key
        pick = picks[key]
        libraries = {n: built[n].library for n in pick.chosen if built[n].library is not None}
        if not libraries:
            finals[key] = {"error": pick.failure(), "sanitize": pick.verdicts}
            if pick.unbuilt:
                finals[key]["unbuilt"] = pick.unbuilt
            continue
        earlier = saved.final(key, [ids[n] for n in libraries], settings, gpu_name)
        if earlier is not None:
            finals[key] = earlier
            continue
        pending.append((result.problem, libraries, pick.verdicts))
    for start in range(0, len(pending), batch):
        chunk = pending[start : start + batch]
        progress(
            f"re-measuring the top kernels of {len(chunk)} problems in {list(protocols)} "
            f"({start + len(chunk)}/{len(pending)}): {', '.join(str(p) for p, _, _ in chunk)}"
        )

        last = [time.monotonic()]

        def keep(index: int, record: dict[str, Any], chunk=chunk, last=last) -> None:
            problem, libraries, sanitized = chunk[index]
            finals[problem.key] = {**final_summary(record), "sanitize": sanitized}
            saved.add_final(problem.key, [ids[n] for n in libraries], finals[problem.key], settings)
            now = time.monotonic()
            outcome = "failed" if "error" in record else "re-measured"
            spent = time_spent(finals[problem.key])
            progress(f"{problem}: {outcome} ({now - last[0]:.1f} s{': ' + spent if spent else ''})")
            last[0] = now

        remeasure_batch(
            [(problem, libraries) for problem, libraries, _ in chunk],
            protocols=protocols,
            device_seconds=device_seconds,
            on_record=keep,
            extra_baselines=extra_baselines,
        )
    return finals


@dataclass(frozen=True)
class ShapeSearch:
    """One shape's searched candidates, as :func:`final_measurements` reads a campaign's results
    (engine.campaign.loop.ProblemResult): for a caller that runs one shape's final at a time."""

    problem: Problem
    records: Sequence[CandidateRecord]


def shape_final(
    problem: Problem, records: Sequence[CandidateRecord], **options: Any
) -> dict[str, Any]:
    """One shape's final summary, or ``{"error": why}`` (with ``sanitize``): what
    :func:`final_measurements` (given ``options``) makes of this shape alone."""
    return final_measurements([ShapeSearch(problem, records)], **options)[problem.key]


def main(argv: list[str]) -> int:
    """The child: measures each job of the spec (argv[0]) in turn, appending its record to
    argv[1] as one JSON line as soon as it is done."""
    import gc

    import torch

    from engine.timing.measure import load_shim, measure

    spec = json.loads(Path(argv[0]).read_text())
    config = load_config()
    shim = load_shim(config)
    with Path(argv[1]).open("a") as out:
        for job in spec["jobs"]:
            m, n, k, layout = job["problem"]
            record = measure(
                Problem(m, n, k, Layout.parse(layout)),
                candidates={name: Path(p) for name, p in job["libraries"].items()},
                protocols=tuple(spec["protocols"]),
                device_seconds=float(spec["device_seconds"]),
                extra_baselines=tuple(spec.get("extra_baselines", ())),
                **({"heat_seconds": float(spec["heat_seconds"])} if "heat_seconds" in spec else {}),
                probe_overhead=bool(spec.get("probe_overhead", True)),
                config=config,
                shim=shim,
                progress=lambda msg: print(msg, file=sys.stderr, flush=True),
            )
            out.write(json.dumps(record, default=str) + "\n")
            out.flush()
            del record
            gc.collect()
            torch.cuda.empty_cache()  # the next problem's operands start from a clean pool
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
