"""Executors: verify and time a batch of compiled candidates for one problem.

``LocalGpuExecutor`` does the real work on this machine's GPU (engine.verify.verifier in an isolated
child per candidate, all started at once, while this process sets up one engine.timing.measure
session; then that session times the verified ones, baselines beside them). ``ReplayExecutor``
answers from a table of recorded GPU measurements (bench/results/...) and never touches a GPU: it is
for CPU tests and for the replay benchmark (engine.campaign.replay_benchmark).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from engine.codegen import KernelConfig, get_family
from engine.config import VerifyWarm
from engine.config import load as load_engine_config
from engine.execution import audit as audit_module
from engine.execution.audit import audit_trigger
from engine.gpu import cuda_driver, mps
from engine.outcomes import CandidateStatus, Reason
from engine.problem import Problem
from engine.timing import cublaslt_kernels
from engine.timing.phases import Phases
from engine.timing.ratios import baseline_runner, quartiles
from engine.verify import verifier as verify_module

if TYPE_CHECKING:
    from engine.gpu.runtime import BaselineLibrary
    from engine.verify.verifier import Verifications, WarmPool

REPLAY_PROTOCOL = "device"  # the protocol a replay table's times were recorded in
FAILURES = (
    CandidateStatus.COMPILE_ERROR,
    CandidateStatus.REJECTED,
    CandidateStatus.TIMEOUT,
    CandidateStatus.MISSING,
)


@dataclass(frozen=True)
class CompiledCandidate:
    """A candidate ready to run; ``library`` is None when the executor needs no library."""

    name: str
    config: KernelConfig
    library: Path | None = None


@dataclass(frozen=True)
class Outcome:
    """What running one candidate gave.

    ``seconds`` is the candidate's time in the executor's primary protocol (None on failure);
    ``baselines`` maps each baseline (best of both layouts) to its time in the same session;
    ``timings`` holds every protocol's numbers for storage; ``gpu_seconds`` is this candidate's
    share of the GPU wall time (verification and timing); ``cublaslt_kernels``, what cuBLASLt
    ran beside it (engine.timing.cublaslt_kernels.from_record: the same for the whole batch, not
    stored with the candidate; proposers that copy cuBLASLt learn it).
    """

    name: str
    status: str
    reason: str = ""
    message: str = ""
    seconds: float | None = None
    baselines: Mapping[str, float] = field(default_factory=dict)
    timings: Mapping[str, Any] = field(default_factory=dict)
    gpu_seconds: float = 0.0
    cublaslt_kernels: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == CandidateStatus.OK


class GpuExecutor(Protocol):
    """Runs batches for one problem at a time. ``needs_libraries`` False: skip compiling."""

    needs_libraries: bool
    arch: str

    def execute(self, problem: Problem, batch: Sequence[CompiledCandidate]) -> list[Outcome]:
        """One outcome per candidate, in the batch's order."""
        ...


# -- the real GPU ----------------------------------------------------------------------------


class LocalGpuExecutor:
    """Verification then timing on this machine's GPU (device protocol by default).

    ``after_verification`` runs once a batch's verdicts are in, before its timing. By default,
    with ENGINE_VERIFY_WARM set (on, kernels), it forks the next batch's warm verifiers
    (engine.verify.verifier.WarmPool) so that they create their contexts while this batch is timed;
    a caller that verifies the next batch in another process (engine.execution.gpu_step) signals
    that process instead. ``shim``: the cuBLAS shim loaded already, else loaded on first use."""

    needs_libraries = True

    def __init__(
        self,
        *,
        protocols: Sequence[str] = ("device",),
        arch: str | None = None,
        config: Any = None,
        verify_timeout: float | None = None,
        heat_seconds: float = 1.0,
        verify_jobs: int = 1,
        device_seconds: float = 20.0,
        after_verification: Callable[[], None] | None = None,
        shim: BaselineLibrary | None = None,
        auditor: Callable[..., Any] | None = None,
    ) -> None:
        # suspiciously fast candidates are audited before their time counts (engine.execution.audit)
        self.auditor = auditor or audit_module.audit
        self.device_seconds = device_seconds
        self.protocols = tuple(protocols)
        self.verify_jobs = max(1, verify_jobs)
        self.arch = arch or _local_arch()
        self.config = config
        self.verify_timeout = verify_timeout
        self.heat_seconds = heat_seconds
        self._shim = shim
        self._fork_server: Any = None  # engine.isolation.forkserver.ForkServer, and its folder
        self._fork_server_folder: Any = None
        self._warm: WarmPool | None = None  # for the next batch
        self._after_verification = after_verification or self._warm_next_batch

        engine_config = load_engine_config()
        # verification children as clients of an MPS server (ENGINE_VERIFY_MPS, engine.gpu.mps)
        self.mps = mps.ensure_for_verification(engine_config.verify_mps)
        self.heat_while_verifying = engine_config.heat_while_verifying

    def execute(
        self,
        problem: Problem,
        batch: Sequence[CompiledCandidate],
        *,
        verifications: Verifications | None = None,
        phases: Phases | None = None,
    ) -> list[Outcome]:
        """Verifies the batch (one child process per candidate, all started at once up to
        ``verify_jobs``) while this process sets up the measurement (shim, environment,
        operands, cached cuBLASLt choices); then times the verified ones. Nothing is timed while
        a verification child runs: an autotuning that is not cached waits for the verdicts.
        With ENGINE_HEAT_WHILE_VERIFYING=on the baselines run back to back until the last
        verdict, as the heat-up the timing needs (so the timing starts without one).

        ``verifications``: an engine.verify.verifier.Verifications for this batch already started by
        the caller (engine.execution.gpu_step starts them before it imports torch). ``phases`` gets
        the time breakdown (engine.timing.phases)."""
        # measure imports torch: loaded here, by a step that times, after its verifiers started
        from engine.timing import measure as measure_module

        phases = phases if phases is not None else Phases()
        started = time.monotonic()
        for candidate in batch:
            if candidate.library is None:
                raise ValueError(f"{candidate.name}: LocalGpuExecutor needs a compiled library")
        libraries = [Path(c.library) for c in batch if c.library is not None]
        if verifications is None:
            verifications = verify_module.Verifications(
                libraries,
                problem,
                jobs=self.verify_jobs,
                timeout=self.verify_timeout,
                fork_server=self._verification_fork_server(),
                warm=self._take_warm(),
            )
        elif list(verifications.libraries) != libraries:
            raise ValueError("the verifications started are not this batch's")
        started = min(started, verifications.started)  # the GPU's share counts from there
        session, setup_error = None, None
        if batch:
            with phases("setup"):
                try:
                    session = self._session(problem, phases)
                except Exception as exc:  # raised below if a candidate needs it
                    setup_error = exc
        if session is not None and self.heat_while_verifying:
            with phases("heat_while_verifying"):
                try:
                    ran = session.heat_while(verifications.running)
                    phases.info["heat_while_verifying_ran_s"] = round(ran, 3)
                except Exception as exc:  # the verdicts still count; the timing heats as before
                    phases.info["heat_while_verifying_error"] = f"{type(exc).__name__}: {exc}"
        with phases("verification"):
            verdicts = verifications.results()
        self._after_verification()
        if session is not None and self.heat_while_verifying:
            session.keep_load()  # forking the next batch's warm verifiers took a moment
        phases.info["verification_children"] = len(verdicts)
        phases.info["verification_jobs"] = verifications.jobs
        phases.info["verification_mps"] = verifications.mps_pipe is not None
        if verifications.retried_alone:
            phases.info["verification_retried_alone"] = verifications.retried_alone
        if verifications.retried_outside_mps:
            phases.info["verification_retried_outside_mps"] = verifications.retried_outside_mps
        if verifications.warm is not None:
            phases.info["verification_warm"] = verifications.warm_used
        if verifications.seconds is not None:
            phases.info["verification_wall_s"] = round(verifications.seconds, 3)
        phases.info.update(child_startup(verdicts))
        failures: dict[str, Outcome] = {}
        passed: dict[str, Path] = {}
        for candidate, verdict in zip(batch, verdicts, strict=True):
            if verdict.ok:
                passed[candidate.name] = Path(candidate.library)
            else:
                status = (
                    CandidateStatus.TIMEOUT
                    if verdict.reason == Reason.TIMEOUT
                    else CandidateStatus.REJECTED
                )
                failures[candidate.name] = Outcome(
                    candidate.name, status, verdict.reason, verdict.message
                )
        record: dict[str, Any] = {"protocols": {}}
        if passed:
            if session is None:
                raise setup_error or measure_module.MeasureSetupError("no measurement session")
            record = session.run(
                passed,
                protocols=self.protocols,
                heat_seconds=self.heat_seconds,
                device_seconds=self.device_seconds,
                probe_overhead=False,  # a ranking run: the final re-measurement probes it
            )
        share = (time.monotonic() - started) / max(1, len(batch))
        outcomes = []
        for candidate in batch:
            if candidate.name in failures:
                outcome = failures[candidate.name]
            else:
                outcome = outcome_from_record(candidate.name, record, self.protocols)
                if outcome.ok:
                    outcome = self._audited(problem, candidate, outcome, record, phases)
            outcomes.append(_with_gpu_seconds(outcome, share))
        return outcomes

    def _audited(
        self,
        problem: Problem,
        candidate: CompiledCandidate,
        outcome: Outcome,
        record: Mapping[str, Any],
        phases: Phases,
    ) -> Outcome:
        """``outcome``, or, for a candidate the audit rule picks (engine.execution.audit), what its
        audit says: rejected with the failing step's reason, or its time in the audit's fresh
        process."""

        floor = float(record["protocols"][self.protocols[0]].get("floor_seconds", 0.0))
        trigger = audit_trigger(outcome.seconds or 0.0, outcome.baselines, floor)
        if not trigger or candidate.library is None:
            return outcome
        with phases("audit"):
            result = self.auditor(
                candidate.name,
                Path(candidate.library),
                problem,
                trigger,
                config=candidate.config,
            )
        phases.info["audited"] = phases.info.get("audited", 0) + 1
        timings = {**outcome.timings, "audit": result.to_dict()}
        if not result.ok:
            return Outcome(
                candidate.name,
                CandidateStatus.REJECTED,
                result.reason,
                result.message,
                timings=timings,
            )
        return Outcome(
            candidate.name,
            CandidateStatus.OK,
            seconds=result.seconds,
            baselines=result.baselines,
            timings=timings,
            cublaslt_kernels=outcome.cublaslt_kernels,
        )

    def _verification_fork_server(self) -> Any:
        """One fork server for every batch this executor verifies itself (it imports torch
        once); a new one if it died; False (fresh children) when ENGINE_VERIFY_FORK_SERVER=off."""

        if not verify_module.fork_server_on():
            return False
        if self._fork_server is None or not self._fork_server.alive:
            self._fork_server, self._fork_server_folder = verify_module.new_fork_server(start=False)
        return self._fork_server

    def _warm_next_batch(self) -> None:
        """With ENGINE_VERIFY_WARM set and a fork server: the next batch's warm verifiers, one
        per verification job, forked now."""

        if load_engine_config().verify_warm == VerifyWarm.OFF:
            return
        server = self._verification_fork_server()
        if not server:
            return
        if self._warm is not None:
            self._warm.close()
        self._warm = verify_module.WarmPool.for_this_process(server, self.verify_jobs)

    def _take_warm(self) -> WarmPool | None:
        warm, self._warm = self._warm, None
        return warm

    def _session(self, problem: Problem, phases: Phases) -> Any:
        from engine.timing import measure as measure_module

        if self._shim is None:
            config = self.config or measure_module.load_config()
            self._shim = measure_module.load_shim(config)
        return measure_module.Session(problem, config=self.config, shim=self._shim, phases=phases)


def child_startup(verdicts: Sequence[Any]) -> dict[str, list[float]]:
    """Min, median and max over the batch's verification children of each part of their time
    (``verification_start_s``: launch to work, i.e. interpreter, sandbox and imports;
    ``verification_cuda_init_s``; ``verification_warm_s``: a warm verifier's context, created
    before its library came; ``verification_session_s``: loading the library, allocating and
    filling the guarded buffers; ``verification_checks_s``: the trials)."""
    out: dict[str, list[float]] = {}
    for part in ("start", "cuda_init", "warm", "session", "checks"):
        values = sorted(
            times[part] for v in verdicts for times in (v.startup_s, v.phases_s) if part in times
        )
        if values:
            out[f"verification_{part}_s"] = [values[0], values[len(values) // 2], values[-1]]
    return out


def outcome_from_record(name: str, record: Mapping[str, Any], protocols: Sequence[str]) -> Outcome:
    """A verified candidate's outcome from an engine.timing.measure record (the first protocol
    is the primary one)."""
    timings: dict[str, Any] = {}
    for protocol in protocols:
        summary = record["protocols"][protocol]
        kept = quartiles(summary.get("stats") or {})
        timings[protocol] = {
            "seconds": summary["seconds"].get(name),
            "baselines": {b: v["seconds"] for b, v in summary["best_baselines"].items()},
        }
        # interquartile ranges, where kept: a ratio inside the noise is a tie
        # (engine.timing.ratios)
        if name in kept:
            timings[protocol].update(kept[name])
            timings[protocol]["baseline_quartiles"] = {
                b: kept[runner]
                for b, v in summary["best_baselines"].items()
                if (runner := baseline_runner(b, v)) in kept
            }
    primary = record["protocols"][protocols[0]]
    for protocol in protocols:  # the checks in the timed calls of any protocol
        summary = record["protocols"][protocol]
        if name in summary.get("rejected_while_timed", ()):
            why = summary.get("rejections", {}).get(name, {})
            message = f"while timed ({protocol}): {why.get('message', 'wrong values')}"
            return Outcome(name, CandidateStatus.REJECTED, why.get("reason", "spot_check"), message)
    if name in primary.get("impossible", ()):
        return Outcome(
            name, CandidateStatus.REJECTED, "impossible", "faster than the physical floor"
        )
    return Outcome(
        name,
        CandidateStatus.OK,
        seconds=primary["seconds"][name],
        baselines=timings[protocols[0]]["baselines"],
        timings=timings,
        cublaslt_kernels=cublaslt_kernels.from_record(record),
    )


def _with_gpu_seconds(outcome: Outcome, seconds: float) -> Outcome:
    return Outcome(**{**outcome.__dict__, "gpu_seconds": seconds})


def _local_arch() -> str:
    return cuda_driver.local_arch()


# -- recorded measurements -------------------------------------------------------------------


@dataclass
class ReplayTable:
    """Recorded device-protocol times: configs, and per problem key the seconds of every timed
    runner (baselines ``<baseline>_<layout>`` and candidates by name) plus the GPU."""

    configs: dict[str, KernelConfig]
    seconds: dict[str, dict[str, float]]
    arch: str = "sm_90"
    sources: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, paths: Iterable[str | Path]) -> ReplayTable:
        """Merge sweep reports (bench/family_sweep.py format: family and library sweeps); later
        files add shapes, and a row recorded twice (a merged run's copy) is the same row."""
        table = cls({}, {})
        for path in paths:
            report = json.loads(Path(path).read_text())
            table.sources.append(str(path))
            for name, entry in report["configs"].items():
                if entry.get("verify", Reason.OK) != Reason.OK:
                    continue
                config = get_family(entry["family"]).from_knobs(entry["knobs"])
                if config.name != name:
                    raise ValueError(f"{path}: {name} renders as {config.name}")
                table.configs[name] = config
            for point in report["sweep"]:
                times = {k: float(v) for k, v in point["seconds"].items() if v and v > 0}
                for name in point.get("rejected_while_timed", ()):
                    times.pop(name, None)
                table.seconds.setdefault(point["problem"], {}).update(times)
                arch = point.get("environment", {}).get("arch")
                if arch:
                    table.arch = arch
        return table

    def problems(self) -> list[Problem]:
        out = []
        for key in self.seconds:
            shape, layout = key.rsplit("_", 1)
            out.append(Problem.parse(shape, layout))
        return out

    def configs_for(self, problem: Problem) -> list[KernelConfig]:
        """Configs with a recorded time for ``problem``."""
        times = self.seconds.get(problem.key, {})
        return [c for name, c in self.configs.items() if name in times]

    def baselines(self, problem: Problem) -> dict[str, float]:
        """Best-of-layouts time of each baseline for ``problem``."""
        from engine.timing.baselines import best_of_layouts

        return {b: v["seconds"] for b, v in best_of_layouts(self.seconds[problem.key]).items()}

    def speedups(self, problem: Problem, baseline: str) -> dict[str, float]:
        """Every recorded candidate's speedup over ``baseline`` for ``problem``."""
        base = self.baselines(problem)[baseline]
        times = self.seconds[problem.key]
        return {c.name: base / times[c.name] for c in self.configs_for(problem)}


class ReplayExecutor:
    """Answers from a ReplayTable: no compile, no GPU. Counts executions per (problem, name),
    so tests can prove that nothing is measured twice. The tables hold device-protocol times:
    asked for another ``protocol``, it refuses rather than reward one protocol's times as
    another's."""

    needs_libraries = False

    def __init__(
        self,
        table: ReplayTable,
        *,
        gpu_seconds_per_candidate: float = 0.0,
        protocol: str = REPLAY_PROTOCOL,
    ) -> None:
        if protocol != REPLAY_PROTOCOL:
            raise ValueError(
                f"the replay tables hold {REPLAY_PROTOCOL}-protocol times only, not {protocol!r}"
            )
        self.table = table
        self.arch = table.arch
        self.gpu_seconds_per_candidate = gpu_seconds_per_candidate
        self.executed: dict[tuple[str, str], int] = {}

    def execute(self, problem: Problem, batch: Sequence[CompiledCandidate]) -> list[Outcome]:
        times = self.table.seconds.get(problem.key, {})
        baselines = self.table.baselines(problem) if times else {}
        outcomes = []
        for candidate in batch:
            key = (problem.key, candidate.name)
            self.executed[key] = self.executed.get(key, 0) + 1
            seconds = times.get(candidate.name)
            if seconds is None:
                outcomes.append(
                    Outcome(
                        candidate.name,
                        CandidateStatus.MISSING,
                        "missing",
                        "not in the replay table",
                    )
                )
                continue
            outcomes.append(
                Outcome(
                    candidate.name,
                    CandidateStatus.OK,
                    seconds=seconds,
                    baselines=baselines,
                    timings={REPLAY_PROTOCOL: {"seconds": seconds, "baselines": baselines}},
                    gpu_seconds=self.gpu_seconds_per_candidate,
                )
            )
        return outcomes
