"""One measurement session for one problem: baselines (both layouts) and candidates, every
protocol, the physical floor check and the environment, as one JSON-ready record."""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.config import EngineConfig
from engine.config import load as load_config
from engine.gpu import power
from engine.gpu.environment import GpuEnvironment, collect
from engine.gpu.runtime import BaselineLibrary, KernelLibrary
from engine.problem import Problem
from engine.stats import spread_between_runs
from engine.timing import baselines, physics
from engine.timing.phases import Phases
from engine.timing.protocols import Bench, ProtocolResult, Runner

DEFAULT_PROTOCOLS = ("device", "offline")


class MeasureSetupError(RuntimeError):
    """The baseline shim could not be built or loaded."""


def load_shim(config: EngineConfig) -> BaselineLibrary:
    built = baselines.build_shim(config)
    if not built.ok or built.library is None:
        raise MeasureSetupError(f"building the cuBLAS shim failed: {built.error}\n{built.log}")
    return BaselineLibrary(built.library)


def measure(
    problem: Problem,
    *,
    candidates: Mapping[str, Path] | None = None,
    protocols: Sequence[str] = DEFAULT_PROTOCOLS,
    config: EngineConfig | None = None,
    shim: BaselineLibrary | None = None,
    seed: int | None = None,
    device_runs: int = 1,
    heat_seconds: float = 3.0,
    device_seconds: float = 20.0,
    probe_overhead: bool = True,
    extra_baselines: Sequence[str] = (),
    power_seconds: float = 0.0,
    progress: Callable[[str], None] = lambda _msg: None,
    timed_checks: bool = True,
    l2_flush: str = "write",
) -> dict[str, Any]:
    """Times every baseline in both layouts and each candidate library, interleaved.

    Candidates must have passed verification; the timing protocols check them again in the
    timed phase (engine.verify.timed_checks): ``rejected_while_timed`` and ``rejections`` per
    protocol. ``probe_overhead=False`` skips the host-overhead probe (about 0.1 s of GPU sleep per
    runner: 20 s for a 200-config sweep) for runs that only rank kernels. ``extra_baselines``: the
    torch-tuned baselines to time as well (engine.timing.baseline_names.TORCH_TUNED), tuned here.
    The device protocol records NVML's power and SM clock over its run (engine.gpu.power) and, with
    ``power_seconds``, each runner's alone for that long. ``timed_checks=False``: the protocols
    without the checks in the timed calls (engine.timing.protocols.Bench), to compare with.
    ``l2_flush``: how L2 is emptied before each timed call (engine.timing.protocols.L2_FLUSHES).
    """
    session = Session(
        problem,
        config=config,
        shim=shim,
        seed=seed,
        progress=progress,
        extra_baselines=extra_baselines,
        timed_checks=timed_checks,
        l2_flush=l2_flush,
    )
    return session.run(
        candidates,
        protocols=protocols,
        device_runs=device_runs,
        heat_seconds=heat_seconds,
        device_seconds=device_seconds,
        probe_overhead=probe_overhead,
        power_seconds=power_seconds,
    )


class Session:
    """One measurement session (what :func:`measure` does) in two stages, so that a caller can
    overlap the first with other work: the set-up (shim, environment, operands, and the baseline
    runners when every cuBLASLt choice is cached, so no timing is involved), then :meth:`run`
    (autotuning when not cached, the candidates, warm-up, heat-up, the protocols)."""

    def __init__(
        self,
        problem: Problem,
        *,
        config: EngineConfig | None = None,
        shim: BaselineLibrary | None = None,
        seed: int | None = None,
        phases: Phases | None = None,
        progress: Callable[[str], None] = lambda _msg: None,
        extra_baselines: Sequence[str] = (),
        timed_checks: bool = True,
        l2_flush: str = "write",
    ) -> None:
        self.problem = problem
        self.extra_baselines = tuple(extra_baselines)
        self.phases = phases if phases is not None else Phases()
        self.progress = progress
        self.config = config or load_config()
        self.shim = shim or load_shim(self.config)
        self.environment = collect(cublaslt_version=self.shim.cublaslt_version)
        self.bench = Bench(
            problem,
            seed=seed if seed is not None else secrets.randbits(31),
            timed_checks=timed_checks,
            l2_flush=l2_flush,
        )
        self.autotune_cache = baselines.autotune_cache_path(
            self.config, self.environment.key, l2_flush
        )
        self.baselines: list[Runner] | None = None
        self.autotune_reports: dict[str, Any] = {}
        self.power_reader = power.open_reader()  # None without pynvml or NVML
        # the torch-tuned baselines always tune (a timing): left for run() like cuBLASLt's
        if not self.extra_baselines and baselines.autotune_cached(self.autotune_cache, problem):
            self.prepare_baselines()

    def prepare_baselines(self) -> None:
        """The baseline runners; autotunes cuBLASLt (device-protocol timing) where not cached."""
        if self.baselines is not None:
            return
        self.progress(f"{self.problem}: autotuning cuBLASLt {' '.join(self.extra_baselines)}")
        extra = {"extra": self.extra_baselines} if self.extra_baselines else {}
        self.baselines, self.autotune_reports = baselines.baseline_runners(
            self.bench, self.shim, autotune_cache=self.autotune_cache, **extra
        )
        self.phases.info["autotune_cached"] = all(
            r.get("cached", False) for r in self.autotune_reports.values()
        )

    def heat_while(self, busy: Callable[[], bool]) -> float:
        """The heat-up, on the baselines only, for as long as ``busy()`` (a batch's verifiers
        still at work): :meth:`run`'s heat-up then counts it and runs only what is missing.
        Nothing runs when cuBLASLt's choices are not cached (choosing them times kernels).
        Returns the seconds it ran."""
        if self.baselines is None:
            return 0.0
        return self.bench.heat_while(self.baselines, busy)

    def keep_load(self) -> None:
        """One round of the baselines when the GPU is under a load the heat-up will count
        (:meth:`heat_while`'s), between two stretches of host work that together would last
        longer than the pause that ends it (engine.timing.protocols.LOAD_GAP_S): loading 16
        libraries takes ≈ 0.3 s."""
        if self.baselines and self.bench.sustained_load_s() > 0:
            self.bench.heat_round(self.baselines)

    def run(
        self,
        candidates: Mapping[str, Path] | None = None,
        *,
        protocols: Sequence[str] = DEFAULT_PROTOCOLS,
        device_runs: int = 1,
        heat_seconds: float = 3.0,
        device_seconds: float = 20.0,
        probe_overhead: bool = True,
        power_seconds: float = 0.0,
    ) -> dict[str, Any]:
        problem, bench, phases = self.problem, self.bench, self.phases
        with phases("baselines"):
            self.prepare_baselines()
            assert self.baselines is not None
            runners = list(self.baselines)
            for name, path in (candidates or {}).items():
                runners.append(baselines.candidate_runner(KernelLibrary(path), problem, name))
                self.keep_load()
        with phases("warm_up"):
            bench.warm_up(runners)
        record: dict[str, Any] = {
            "problem": {
                "m": problem.m,
                "n": problem.n,
                "k": problem.k,
                "layout": problem.layout.value,
            },
            "environment": self.environment.to_dict(),
            "autotune": self.autotune_reports,
            "l2_flush": bench.l2_flush,
            "protocols": {},
        }
        overhead = bench.host_overhead(runners) if probe_overhead else {}
        # what the timed calls pay (they rotate the operand sets); beside it, with the buffers
        # repeated (engine.timing.protocols.Bench.host_overhead)
        record["host_overhead_s"] = overhead.get("rotating", {})
        record["host_overhead_same_buffers_s"] = overhead.get("same_buffers", {})
        record["host_overhead_s"]["ctypes_noop"] = noop_overhead(self.shim)
        # after the host-overhead probe (which idles the GPU): every timed run then starts from
        # the same sustained-load state; measured, a run right after idling was 4-8 % faster.
        # Without the probe, load the bench has just put on the GPU (autotuning) counts.
        with phases("heat_up"):
            phases.info["heat_up_ran_s"] = round(bench.heat_up(runners, heat_seconds), 3)
        with phases("timing"):
            for protocol in protocols:
                self.progress(f"{problem}: {protocol} protocol")
                started = time.perf_counter()
                summary = self._protocol(
                    runners,
                    protocol,
                    device_runs=device_runs,
                    device_seconds=device_seconds,
                    power_seconds=power_seconds,
                )
                summary["wall_s"] = round(time.perf_counter() - started, 3)
                record["protocols"][protocol] = summary
        return record

    def _protocol(
        self,
        runners: list[Runner],
        protocol: str,
        *,
        device_runs: int,
        device_seconds: float,
        power_seconds: float = 0.0,
    ) -> dict[str, Any]:
        bench = self.bench
        reader = self.power_reader if protocol == "device" else None
        sampler = power.Sampler(reader) if reader is not None else None
        with sampler or contextlib.nullcontext():
            result = run_protocol(bench, runners, protocol, device_seconds=device_seconds)
        summary = summarize_protocol(self.problem, result.to_dict(), self.environment)
        if sampler is not None:
            summary["power"] = sampler.summary()
        if reader is not None and power_seconds > 0:
            summary["power_by_runner"] = runner_power(bench, runners, reader, power_seconds)
        if protocol == "device" and device_runs > 1:
            summary["repeat_medians"] = repeat_medians(bench, runners, result, device_runs)
            summary["run_to_run_spread"] = {
                name: spread_between_runs(values)
                for name, values in summary["repeat_medians"].items()
            }
        # what the timed calls' checks rejected (engine.verify.timed_checks): no speedup stands
        rejections = summary.get("rejections", {})
        summary["rejected_while_timed"] = sorted(rejections)
        for name in summary["rejected_while_timed"]:
            summary["speedups"].pop(name, None)
        return summary


def repeat_medians(
    bench: Bench, runners: list[Runner], first: ProtocolResult, runs: int
) -> dict[str, list[float]]:
    """Per-runner medians of ``runs`` independent device-protocol runs (the first included)."""
    medians = {name: [s.median] for name, s in first.stats.items()}
    for _ in range(runs - 1):
        again = bench.device(runners)
        for name, s in again.stats.items():
            medians[name].append(s.median)
    return medians


def runner_power(
    bench: Bench, runners: list[Runner], reader: power.Reader, seconds: float
) -> dict[str, dict[str, Any]]:
    """Each runner alone for ``seconds``, back to back on the bench's stream: NVML's power and
    SM clock meanwhile (engine.gpu.power.per_runner)."""
    import torch

    ops = bench.operand_sets[0]
    with torch.cuda.stream(bench.stream):
        measured = power.per_runner(
            runners,
            lambda r: r(ops, bench.stream),
            bench.stream.synchronize,
            reader,
            seconds=seconds,
        )
    bench.loaded(time.monotonic() - seconds * len(runners), time.monotonic())
    return measured


def noop_overhead(shim: BaselineLibrary, calls: int = 2000) -> float:
    """Host seconds of one ctypes call into an empty exported function (the call-path floor)."""
    started = time.perf_counter()
    for _ in range(calls):
        shim.noop(0, 0, 0, 0, 0, 0, 0, 0)
    return (time.perf_counter() - started) / calls


def run_protocol(
    bench: Bench, runners: list[Runner], protocol: str, *, device_seconds: float = 20.0
):
    if protocol == "device":
        return bench.device(runners, max_seconds=device_seconds)
    if protocol == "offline":
        return bench.offline(runners)
    if protocol == "server":
        return bench.offline(runners, qps=200.0)
    if protocol == "graph":
        return bench.graph(runners)
    raise ValueError(f"unknown protocol {protocol!r}: expected device, offline, server or graph")


def summarize_protocol(
    problem: Problem, result: dict[str, Any], environment: GpuEnvironment
) -> dict[str, Any]:
    """Adds best-of-layout baselines, TFLOP/s, speedups and the floor check to a protocol result."""
    stats = result["stats"]
    key = "mean" if result["protocol"] in ("offline", "server") else "median"
    seconds = {name: s[key] for name, s in stats.items()}
    best = baselines.best_of_layouts(seconds)
    peaks = physics.peaks_for(environment.gpu_name)
    floor = physics.floor_seconds(problem, peaks)
    baseline_names = {f"{b}_{layout}" for b in baselines.BASELINES for layout in ("nn", "tn")}
    candidates = [n for n in seconds if n not in baseline_names and seconds[n] >= floor]
    speedups = {name: {b: best[b]["seconds"] / seconds[name] for b in best} for name in candidates}
    return {
        **result,
        "statistic": key,
        "seconds": seconds,
        "tflops": {name: physics.tflops(problem, t) for name, t in seconds.items()},
        "best_baselines": best,
        "speedups": speedups,
        "floor_seconds": floor,
        "impossible": sorted(n for n, t in seconds.items() if t < floor),
    }
