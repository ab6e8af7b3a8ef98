"""Kernel bundles: a zip a user builds once and calls from PyTorch.

The zip holds the Python package ``gemmforge_bundle`` (engine/publish/bundle/package/):
kernel sources, the ABI header, a manifest that is the dispatch table, the ops
(``torch.ops.gemmforge.hgemm`` and ``hgemm_linear``, registered from C++ once built, from Python
otherwise), a cuBLASLt shim, a build script, a verification script, and the campaign's results
with their environment.

Best of: per measured shape the table holds our kernel where it beat cuBLASLt-autotune's pick
beyond the noise, else cuBLASLt running the algorithm that autotuning pinned for the shape
(recorded by the finals: engine.timing.cublaslt_kernels), else (no pinned algorithm recorded) our
kernel where it beat torch.matmul, else nothing (torch.matmul).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import itertools
import json
import re
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine import abi
from engine.codegen import get_family, triton_blocks
from engine.compilation import compile as compile_module
from engine.compilation import triton_aot
from engine.compilation.compile import BASE_FLAGS
from engine.compilation.source_kernel import SourceKernel
from engine.outcomes import CandidateRecord, CandidateStatus
from engine.problem import Problem
from engine.publish.bundle.buckets import Point, buckets
from engine.timing.baseline_names import BASELINE_LABELS, BASELINES
from engine.timing.cublaslt_kernels import CONFIG_ATTRIBUTES
from engine.timing.ratios import (
    FASTER,
    SLOWER,
    Choice,
    Headline,
    Ratio,
    Session,
    ShapeBest,
    Timing,
    baseline_runner,
    baseline_timings,
    headline,
    rank,
    ratio,
    with_quartiles,
)

PACKAGE_DIR = Path(__file__).resolve().parent / "package" / "gemmforge_bundle"
ROOT = "gemmforge_bundle"
# Bundled kernels are built without ptxas's verbose report
NVCC_FLAGS = tuple(f for f in BASE_FLAGS if f not in ("-Xptxas", "-v"))
BASELINE_RUNNERS = frozenset(f"{b}_{layout}" for b in BASELINES for layout in ("nn", "tn"))
KERNEL, CUBLASLT = "kernel", "cublaslt"  # what serves a manifest entry
AUTOTUNE = "cublaslt_autotune"  # the baseline whose pick is pinned
MANIFEST_FORMAT = 3  # 2: m_lo / m_hi; 3: kind, algo and the top-level cublaslt record


@dataclass(frozen=True)
class PinnedAlgo:
    """The cuBLASLt algorithm autotuning picked for one problem (its layout): the values of
    cublasLtMatmulAlgoConfigAttributes_t in CONFIG_ATTRIBUTES order (-1: not reported), as the
    engine's shim read them (engine/cuda/baselines.cu, cublaslt_algo_config)."""

    config: tuple[int, ...]
    label: str = ""

    @classmethod
    def of(cls, kernel: Any) -> PinnedAlgo | None:
        """From a recorded LtKernel dict (engine.timing.cublaslt_kernels.LtKernel.to_dict);
        None without a usable algorithm id."""
        raw = kernel.get("raw") if isinstance(kernel, Mapping) else None
        if not isinstance(raw, Mapping) or not isinstance(raw.get("algo_id"), int):
            return None
        if raw["algo_id"] < 0:
            return None
        config = tuple(int(raw.get(name, -1)) for name in CONFIG_ATTRIBUTES)
        return cls(config, str(kernel.get("label") or ""))


class BundleError(ValueError):
    """A bundle cannot be made from this input; the message says why."""


@dataclass(frozen=True)
class BundleKernel:
    """The kernel chosen for one problem, with what it measured."""

    problem: Problem
    name: str
    source: str
    archs: tuple[str, ...]
    speedups: dict[str, float] = field(default_factory=dict)  # all from one session
    seconds: float | None = None
    session: str = "search"  # the measurement session the time and speedups come from
    # the Ms it serves (engine.publish.bundle.buckets); None: problem.m only
    m_lo: int | None = None
    m_hi: int | None = None
    family: str | None = None  # None: model-written source (engine.llm)
    knobs: Mapping[str, Any] | None = None
    kind: str = KERNEL  # CUBLASLT: cuBLASLt with ``algo`` (no source)
    algo: PinnedAlgo | None = None


def is_faster(r: Ratio | None) -> bool:
    """Faster than the baseline beyond the measured noise (a tie falls back to it)."""
    return r is not None and r.verdict == FASTER


def record_session(record: CandidateRecord, gpu: str = "") -> Session | None:
    """The search step's session of a record: its time and the baselines timed with it, judged
    with the spread measured for the device protocol on ``gpu`` (a record keeps no quartiles)."""
    kernel = Timing.of(record.seconds)
    if kernel is None:
        return None
    timed = baseline_timings(dict(record.baselines))
    return Session("search", "device", kernel, timed, environment=gpu)


@dataclass(frozen=True)
class CampaignResults:
    """What a bundle is made from, wherever the campaign is kept (the engine's SQLite file and
    finals, engine.commands.bundle_command; the dashboard's database, webapp.campaigns.artifacts):
    its problems, each problem's candidate records, the environment they were measured in, the
    kernels the finals rejected (problem key → kernel name → why) and the finals' sessions: a
    shape's kernel is chosen, and its numbers shown, from its final where the shape had one,
    as the dashboard and `engine report` do (engine.timing.ratios.rank)."""

    title: str
    problems: tuple[Problem, ...]
    records: Mapping[str, Sequence[CandidateRecord]]
    environment: Mapping[str, Any] = field(default_factory=dict)
    rejected_in_finals: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # problem key → kernel name → its final re-measurement's session (device protocol)
    final_sessions: Mapping[str, Mapping[str, Session]] = field(default_factory=dict)
    # problem key → the cuBLASLt algorithm autotuning picked for it (final_algo)
    cublaslt_algos: Mapping[str, PinnedAlgo] = field(default_factory=dict)

    def candidates(self, problem: Problem) -> Sequence[CandidateRecord]:
        return self.records.get(problem.key, ())


@dataclass(frozen=True)
class LeftOut:
    """A shape's better-ranked kernel the bundle does not ship, and why (with how many more of
    that shape's kernels ranked above the one chosen were left out too)."""

    problem: Problem
    kernel: str
    why: str
    more: int = 0


@dataclass(frozen=True)
class BundleContents:
    """What :func:`build_bundle` puts in a zip."""

    kernels: list[BundleKernel]
    left_out: list[LeftOut]
    headline: Headline


def final_rejections(section: Mapping[str, Any]) -> dict[str, str]:
    """Kernel name → why, for each kernel a shape's final (engine.execution.final.final_summary)
    rejected while timed, in any protocol: ``"device: unwritten: 8 of 9 checked timed calls
    failed; ..."``."""
    out: dict[str, str] = {}
    protocols = section.get("protocols")
    for protocol, result in (protocols if isinstance(protocols, Mapping) else {}).items():
        if not isinstance(result, Mapping):
            continue
        reasons = result.get("rejections")
        reasons = reasons if isinstance(reasons, Mapping) else {}
        for name in result.get("rejected_while_timed") or ():
            why = reasons.get(name)
            detail = (
                f"{why.get('reason', '')}: {why.get('message', '')}"
                if isinstance(why, Mapping)
                else "rejected while timed"
            )
            out.setdefault(str(name), f"{protocol}: {detail}")
    return out


def final_algo(section: Mapping[str, Any], layout: str) -> PinnedAlgo | None:
    """The cuBLASLt algorithm autotuning picked for ``layout`` in a shape's final
    (engine.execution.final.final_summary's ``cublaslt_kernels``); None where none was recorded."""
    kernels = section.get("cublaslt_kernels")
    pair = kernels.get(f"{AUTOTUNE}_{layout}") if isinstance(kernels, Mapping) else None
    return PinnedAlgo.of(pair.get("autotune")) if isinstance(pair, Mapping) else None


def pinnable(environment: Mapping[str, Any]) -> bool:
    """Whether algorithms picked in ``environment`` can be pinned: it names the GPU and the
    cuBLASLt version, which the runtime must find again before it uses them."""
    version = str(environment.get("cublaslt_version") or "")
    return bool(environment.get("gpu_name")) and version.isdigit()


def final_algos(
    problems: Iterable[Problem], finals: Mapping[str, Mapping[str, Any]]
) -> dict[str, PinnedAlgo]:
    """Problem key → the algorithm autotuning picked for it in its final (final_algo), for the
    problems whose final recorded one: CampaignResults.cublaslt_algos."""
    out = {}
    for p in problems:
        if p.key in finals and (algo := final_algo(finals[p.key], p.layout.value)):
            out[p.key] = algo
    return out


def pinned_kernel(problem: Problem, algo: PinnedAlgo, session: Session) -> BundleKernel | None:
    """The manifest entry that runs ``algo`` for ``problem``, with cuBLASLt-autotune's numbers
    from ``session``; None where autotune's pick was slower than torch.matmul beyond the noise
    (torch.matmul then serves) or the session did not time it."""
    tuned, torch_time = session.baselines.get(AUTOTUNE), session.baselines.get("torch")
    if tuned is None:
        return None
    speedups = {AUTOTUNE: 1.0}
    if torch_time is not None:
        over_torch = ratio(torch_time, tuned, spread=session.noise_spread())
        if over_torch.verdict == SLOWER:
            return None
        speedups["torch"] = over_torch.value
    return BundleKernel(
        problem=problem,
        name=f"{CUBLASLT}_{problem.key}",
        source="",
        archs=(),
        speedups=speedups,
        seconds=tuned.seconds,
        session=session.name,
        kind=CUBLASLT,
        algo=algo,
    )


def dispatch_choice(
    problem: Problem,
    ours: BundleKernel | None,
    choice: Choice,
    algo: PinnedAlgo | None,
    *,
    algo_session: Session | None = None,
    over: str = "torch",
    include_slower: bool = False,
) -> BundleKernel | None:
    """What serves ``problem``: our kernel where it beat cuBLASLt-autotune beyond the noise, else
    the pinned algorithm (with the numbers of ``algo_session``, the final it was picked in, where
    given), else (none pinned) our kernel where it beat ``over``; None: torch.matmul.
    ``include_slower`` keeps our kernel whatever it measured (for inspection)."""
    ratios = choice.ratios()
    if ours is not None and (include_slower or is_faster(ratios.get(AUTOTUNE))):
        return ours
    session = algo_session or choice.session
    if algo is not None and (pinned := pinned_kernel(problem, algo, session)):
        return pinned
    if ours is not None and is_faster(ratios.get(over)):
        return ours
    return None


Admissible = Callable[[BundleKernel], bool]
NOT_SANITIZED = "no passing compute-sanitizer verdict"


def has_timed_kernel(results: CampaignResults) -> bool:
    """Whether any shape has a verified kernel timed beside the baselines (a bundle of a campaign
    without one would say nothing: it is not made)."""
    return any(
        record_session(r) is not None and r.status == CandidateStatus.OK and r.baselines
        for p in results.problems
        for r in results.candidates(p)
    )


def shape_choices(
    results: CampaignResults, admissible: Admissible | None = None
) -> tuple[dict[str, tuple[Choice, CandidateRecord]], list[LeftOut]]:
    """Problem key → its kernel and that kernel's record (shape_choice); shapes with none are
    left out. Also, per shape, the first better-ranked kernel passed over and why."""
    out: dict[str, tuple[Choice, CandidateRecord]] = {}
    left_out: list[LeftOut] = []
    for problem in results.problems:
        records = {
            r.name: r
            for r in results.candidates(problem)
            if r.status == CandidateStatus.OK and r.seconds
        }
        choice, passed_over = shape_choice(problem, records, results, admissible)
        if choice is not None:
            out[problem.key] = (choice, records[choice.kernel])
        if passed_over is not None:
            left_out.append(passed_over)
    return out, left_out


def shape_choice(
    problem: Problem,
    records: Mapping[str, CandidateRecord],
    results: CampaignResults,
    admissible: Admissible | None,
) -> tuple[Choice | None, LeftOut | None]:
    """The shape's kernel: the best same-session ratio over cuBLASLt-autotune
    (engine.timing.ratios.rank, the finals' sessions first where the shape had them) of the
    kernels the finals did not reject, that can be bundled and that pass ``admissible`` (their
    compute-sanitizer verdict). And the first kernel passed over: ranked above the choice, or
    ranked above it by the search and never in the finals (its sanitizer verdict failed)."""
    rejected = results.rejected_in_finals.get(problem.key, {})
    gpu = str(results.environment.get("gpu_name", ""))
    # a final kept its quartiles; where one did not, its GPU names the spread it is judged with
    finals = {
        name: dataclasses.replace(session, environment=session.environment or gpu)
        for name, session in results.final_sessions.get(problem.key, {}).items()
    }

    @functools.cache
    def why(name: str) -> str | None:
        return exclusion(problem, records[name], rejected, admissible)

    ranked = rank(
        [
            (n, n, [s for s in (record_session(r, gpu), finals.get(n)) if s is not None])
            for n, r in records.items()
        ]
    )
    choice = next((c for c in ranked if why(c.kernel) is None), None)
    chosen = choice.kernel if choice is not None else None
    searched = rank([(n, n, [s]) for n, r in records.items() if (s := record_session(r, gpu))])
    above = [
        c.kernel
        for order in (ranked, searched)
        for c in itertools.takewhile(lambda c: c.kernel != chosen, order)
    ]
    skipped = [(n, reason) for n in dict.fromkeys(above) if (reason := why(n)) is not None]
    if not skipped:
        return choice, None
    name, reason = skipped[0]
    return choice, LeftOut(problem, name, reason, more=len(skipped) - 1)


def exclusion(
    problem: Problem,
    record: CandidateRecord,
    rejected_in_finals: Mapping[str, str],
    admissible: Admissible | None,
) -> str | None:
    """Why ``record`` cannot be the shape's bundled kernel (None: it can)."""
    if record.name in rejected_in_finals:
        return f"rejected in the finals: {rejected_in_finals[record.name]}"
    try:
        kernel = kernel_from_record(problem, record)
    except BundleError as exc:
        return str(exc)
    if admissible is not None and not admissible(kernel):
        return NOT_SANITIZED
    return None


def bundle_contents(
    results: CampaignResults,
    *,
    over: str = "torch",
    include_slower: bool = False,
    admissible: Admissible | None = None,
    dynamic_m: bool = True,
) -> BundleContents:
    """Per problem, what serves it (dispatch_choice: its best admissible kernel, from
    shape_choices, or cuBLASLt's pinned algorithm, or torch.matmul). With ``dynamic_m`` each
    entry also serves a range of M around its own (m_ranges). The headline covers every shape,
    bundled or not, and our kernels only."""
    chosen, left_out = shape_choices(results, admissible)
    problems = results.problems
    algos = results.cublaslt_algos if pinnable(results.environment) else {}
    kernels = [
        served
        for p in problems
        if p.key in chosen
        and (
            served := dispatch_choice(
                p,
                shown_from(chosen[p.key][0], kernel_from_record(p, chosen[p.key][1])),
                chosen[p.key][0],
                algos.get(p.key),
                # a final's sessions share its baselines: the autotune time of the pinned pick
                algo_session=next(iter(results.final_sessions.get(p.key, {}).values()), None),
                over=over,
                include_slower=include_slower,
            )
        )
    ]
    if dynamic_m:
        kernels = m_ranges(results, kernels)
    bests = [
        ShapeBest(p.key, float(p.flops), chosen[p.key][0]) for p in problems if p.key in chosen
    ]
    summary = headline(bests, without=len(problems) - len(bests))
    return BundleContents(kernels, left_out, summary)


def shown_from(choice: Choice, kernel: BundleKernel) -> BundleKernel:
    """``kernel`` with the time and speedups of the session it was chosen by."""
    session = choice.session
    return replace(
        kernel,
        speedups={b: r.value for b, r in choice.ratios().items()},
        seconds=session.kernel.seconds,
        session=session.name,
    )


def final_sessions(section: Mapping[str, Any], protocol: str = "device") -> dict[str, Session]:
    """Kernel name → its session in a shape's final (engine.execution.final.final_summary): its
    time beside the best-of-layout baselines timed with it, with the quartiles the final kept.
    Kernels the final rejected have none."""
    from engine.timing.baselines import best_of_layouts  # imports torch

    protocols = section.get("protocols")
    result = protocols.get(protocol) if isinstance(protocols, Mapping) else None
    if not isinstance(result, Mapping):
        return {}
    seconds = dict(result.get("seconds") or {})
    kept = dict(result.get("quartiles") or {})
    baselines = {
        b: with_quartiles(v["seconds"], baseline_runner(b, v), kept)
        for b, v in best_of_layouts(seconds).items()
    }
    timed = baseline_timings(baselines)
    rejected = set(result.get("rejected_while_timed") or ())
    out = {}
    for name, value in seconds.items():
        if name in BASELINE_RUNNERS or name in rejected:
            continue
        kernel = Timing.of({"seconds": value, **(kept.get(name) or {})})
        if kernel is not None:
            out[name] = Session("final", protocol, kernel, timed)
    return out


def build_bundle(
    results: CampaignResults,
    out: Path,
    *,
    include_slower: bool = False,
    admissible: Admissible | None = None,
    dynamic_m: bool = True,
) -> BundleContents:
    """The bundle zip of a campaign, as `engine bundle` and the dashboard's bundle.zip make it:
    :func:`bundle_contents` written by :func:`write_bundle`."""
    contents = bundle_contents(
        results, include_slower=include_slower, admissible=admissible, dynamic_m=dynamic_m
    )
    write_bundle(
        contents.kernels,
        out,
        environment=dict(results.environment),
        title=results.title,
        headline=contents.headline,
        left_out=contents.left_out,
        sanitized=admissible is not None,
    )
    return contents


def best_kernels(results: CampaignResults, **options: Any) -> list[BundleKernel]:
    """The kernels :func:`bundle_contents` bundles."""
    return bundle_contents(results, **options).kernels


def measured_ratios(records: Iterable[CandidateRecord], over: str = "torch") -> dict[str, float]:
    """Kernel name → its time over the ``over`` baseline timed in the same session."""
    return {
        r.name: r.seconds / r.baselines[over]
        for r in records
        if r.status == CandidateStatus.OK and r.seconds and r.baselines.get(over)
    }


def serves(kernel: BundleKernel, m: int) -> bool:
    """Whether ``kernel`` is valid for M = m at its problem's N, K and layout: a family config
    by its own legality rule (families handle M residues); model-written source only at the M
    it was measured at (nothing says how it treats another)."""
    problem = kernel.problem
    if kernel.kind == CUBLASLT:  # cublasLtMatmulAlgoCheck decides at each M, at run time
        return True
    if kernel.family is None or kernel.knobs is None:
        return m == problem.m
    other = Problem(m, problem.n, problem.k, problem.layout)
    config = get_family(kernel.family).from_knobs({**kernel.knobs, "layout": problem.layout.value})
    return bool(config.is_valid(other))


def m_ranges(results: CampaignResults, kernels: Sequence[BundleKernel]) -> list[BundleKernel]:
    """``kernels`` with the range of M each serves: per (N, K, layout) the measured problems are
    the points (their choice: the bundled kernel, or torch.matmul where none is bundled) and
    engine.publish.bundle.buckets draws the boundaries. A kernel whose range shrinks to nothing
    is kept at its own M."""
    by_key = {k.problem.key: k for k in kernels}
    groups: dict[tuple[int, int, str], list[Problem]] = {}
    for p in results.problems:
        groups.setdefault((p.n, p.k, p.layout.value), []).append(p)
    ranged: dict[str, BundleKernel] = {}
    for group in groups.values():
        points = []
        for p in group:
            ratios = measured_ratios(results.candidates(p))
            kernel = by_key.get(p.key)
            if kernel is not None and kernel.kind == CUBLASLT and kernel.speedups.get("torch"):
                ratios[kernel.name] = 1 / kernel.speedups["torch"]
            if ratios or kernel is not None:
                points.append(Point(p.m, kernel.name if kernel else None, ratios))
        named = {k.name: k for k in kernels if k.problem in group}
        if not points:
            continue
        for b in buckets(points, lambda name, m, named=named: serves(named[name], m)):
            if b.kernel is not None:
                kernel = by_key[Problem(b.m, group[0].n, group[0].k, group[0].layout).key]
                ranged[kernel.problem.key] = replace(kernel, m_lo=b.lo, m_hi=b.hi)
    return [ranged.get(k.problem.key, k) for k in kernels]


def kernel_from_record(problem: Problem, record: CandidateRecord) -> BundleKernel:
    """The record's kernel with the source it was measured with (a Triton kernel's cubin is
    embedded when the zip is written: bundled_source)."""
    if record.source is not None:  # model-written (engine.llm): its source as measured
        return BundleKernel(
            problem=problem,
            name=record.name,
            source=record.source,
            archs=tuple(SourceKernel.ARCHS),
            speedups=record.speedups(),
            seconds=record.seconds,
        )
    try:
        family = get_family(record.family)
    except KeyError as exc:  # e.g. a model-written record stored without its source
        raise BundleError(f"kernel {record.name}: {exc.args[0]} and no source stored") from None
    config = family.from_knobs({**record.knobs, "layout": problem.layout.value})
    return BundleKernel(
        problem=problem,
        name=config.name,
        source=config.render(),
        archs=tuple(config.archs),
        speedups=record.speedups(),
        seconds=record.seconds,
        family=record.family,
        knobs=dict(record.knobs),
    )


def bundled_source(source: str, archs: tuple[str, ...]) -> str:
    """What a bundle ships for ``source``: itself, or for a Triton kernel the launcher with its
    compiled cubin in place (engine.compilation.triton_aot.self_contained), so that the bundle
    builds with nvcc alone and runs without Triton. Builds the kernel (or takes it from the compile
    cache); raises BundleError when it does not build."""
    if not triton_blocks.is_triton_source(source):
        return source

    built = compile_module.compile_source(source, archs=archs)
    header = built.entry / triton_aot.HEADER_NAME if built.entry else None
    if built.ok and (header is None or not header.is_file()):  # an entry packed without it
        built = compile_module.compile_source(source, archs=archs, use_cache=False)
        header = built.entry / triton_aot.HEADER_NAME if built.entry else None
    if not built.ok or header is None or not header.is_file():
        raise BundleError(f"the Triton kernel does not build: {built.error}")
    return triton_aot.self_contained(source, header.read_text())


def manifest_entry(k: BundleKernel) -> dict[str, Any]:
    entry = {
        "m": k.problem.m,
        "m_lo": k.m_lo if k.m_lo is not None else k.problem.m,
        "m_hi": k.m_hi if k.m_hi is not None else k.problem.m,
        "n": k.problem.n,
        "k": k.problem.k,
        "layout": k.problem.layout.value,
        "name": k.name,
        "kind": k.kind,
        "archs": list(k.archs),
        "speedups": k.speedups,
        "seconds": k.seconds,
        "session": k.session,
    }
    if k.algo is not None:
        entry.update(algo=list(k.algo.config), algo_label=k.algo.label)
    return entry


def manifest(kernels: Iterable[BundleKernel], environment: dict[str, Any]) -> dict[str, Any]:
    """The dispatch table. Format 3 adds to format 2 (each entry's range of M) an entry's
    ``kind`` (a runtime reading format 2 treats every entry as a kernel, which is what they
    were) and, for cuBLASLt entries, the pinned ``algo``; ``cublaslt`` (where there are such
    entries) names the GPU and cuBLASLt version they were pinned on (the runtime uses them only
    on the same)."""
    kernels = list(kernels)
    out = {
        "format": MANIFEST_FORMAT,
        "nvcc_flags": list(NVCC_FLAGS),
        "environment": environment,
        "kernels": [manifest_entry(k) for k in kernels],
    }
    if any(k.kind == CUBLASLT for k in kernels):
        out["cublaslt"] = {
            "gpu_name": environment.get("gpu_name", ""),
            "version": environment.get("cublaslt_version", ""),
            "config_attributes": list(CONFIG_ATTRIBUTES),
        }
    return out


def results_csv(kernels: Sequence[BundleKernel]) -> str:
    baselines = sorted({b for k in kernels for b in k.speedups})
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(
        ["m", "n", "k", "layout", "kernel", "seconds", *[f"speedup_{b}" for b in baselines]]
    )
    for k in kernels:
        p = k.problem
        writer.writerow(
            [
                p.m,
                p.n,
                p.k,
                p.layout.value,
                k.name,
                k.seconds,
                *[k.speedups.get(b, "") for b in baselines],
            ]
        )
    return out.getvalue()


def bundle_folder(title: str) -> str:
    """The zip's top folder: ``gemmforge-<title>``, ASCII letters, digits, '.', '_' and '-'."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", title).strip("-.")[:60].strip("-.")
    return f"gemmforge-{slug or 'bundle'}"


def write_bundle(
    kernels: Sequence[BundleKernel],
    out: Path,
    *,
    environment: dict[str, Any],
    title: str,
    headline: Headline | None = None,
    left_out: Sequence[LeftOut] = (),
    sanitized: bool = False,
) -> Path:
    """Writes the zip, everything under one top folder (bundle_folder); kernels with the same
    name are stored once, a Triton kernel with its cubin embedded (bundled_source).
    ``sanitized``: every kernel passed compute-sanitizer (the README says so)."""
    names = [k.name for k in kernels if k.kind == KERNEL]
    keys = [k.problem.key for k in kernels]
    if len(set(keys)) != len(keys):
        raise BundleError("two kernels for the same problem")
    data = manifest(kernels, environment)
    folder = bundle_folder(title)
    package = f"{folder}/{ROOT}"
    text = readme(title, kernels, environment, len(set(names)), headline, left_out, sanitized)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(PACKAGE_DIR.glob("*.py")):
            zf.write(path, f"{package}/{path.name}")
        for path in sorted((PACKAGE_DIR / "csrc").iterdir()):
            zf.write(path, f"{package}/csrc/{path.name}")
        zf.writestr(f"{package}/include/gemmforge_abi.h", abi.HEADER.read_text())
        for kernel in {k.name: k for k in kernels if k.kind == KERNEL}.values():
            shipped = bundled_source(kernel.source, kernel.archs)
            zf.writestr(f"{package}/kernels/{kernel.name}.cu", shipped)
        zf.writestr(f"{package}/kernels.json", json.dumps(data, indent=1))
        zf.writestr(f"{folder}/results.json", json.dumps(data, indent=1))
        zf.writestr(f"{folder}/results.csv", results_csv(kernels))
        zf.writestr(f"{folder}/README.md", text)
    return out


def package_member(zf: zipfile.ZipFile, name: str) -> str:
    """The zip member ``<top folder>/gemmforge_bundle/<name>``."""
    for member in zf.namelist():
        _, _, rest = member.partition("/")
        if rest == f"{ROOT}/{name}":
            return member
    raise BundleError(f"not a gemmforge bundle: no {ROOT}/{name}")


def read_manifest(path: Path) -> dict[str, Any]:
    """A bundle zip's kernels.json (the dispatch table)."""
    with zipfile.ZipFile(path) as zf:
        return json.loads(zf.read(package_member(zf, "kernels.json")))


def unpack(path: Path, target: Path) -> Path:
    """Extracts a bundle zip into ``target``; returns its top folder (the one to cd into)."""
    with zipfile.ZipFile(path) as zf:
        member = package_member(zf, "kernels.json")
        zf.extractall(target)
    return target / member.partition("/")[0]


def left_out_lines(left_out: Sequence[LeftOut]) -> str:
    """The README's account of the better-ranked kernels a bundle does not ship."""
    if not left_out:
        return ""
    rows = "\n".join(
        f"| {x.problem.key} | `{x.kernel}` | {x.why}"
        + (f" (and {x.more} more ranked above the one chosen)" if x.more else "")
        + " |"
        for x in left_out
    )
    return f"""## Left out
A shape's best-ranked kernel is bundled only when it passed compute-sanitizer in the campaign's
finals and the finals did not reject it; these were passed over (the shape then takes its best
kernel that qualifies, or falls back to torch.matmul):

| shape | kernel | why |
|---|---|---|
{rows}
"""


def readme(
    title: str,
    kernels: Sequence[BundleKernel],
    environment: dict[str, Any],
    unique: int,
    headline: Headline | None = None,
    left_out: Sequence[LeftOut] = (),
    sanitized: bool = False,
) -> str:
    gpu = environment.get("gpu_name", "unknown GPU")
    pinned = sum(k.kind == CUBLASLT for k in kernels)
    block = "\n".join(headline.markdown(BASELINE_LABELS)) if headline else ""
    summary = f"## The campaign at a glance\n\n{block}\n" if block else ""
    checked = (
        "Every kernel here passed compute-sanitizer (memcheck, racecheck, initcheck) "
        "in the campaign's finals.\n"
        if sanitized
        else "These kernels were bundled without requiring a compute-sanitizer verdict.\n"
    )
    rows = "\n".join(
        f"| {k.problem.shape} | {k.m_lo or k.problem.m}..{k.m_hi or k.problem.m} | "
        f"{k.problem.layout.value} | `{k.name}`"
        + (f" ({k.algo.label})" if k.algo is not None and k.algo.label else "")
        + " | "
        + ", ".join(f"{b} {s:.3f}x" for b, s in sorted(k.speedups.items()))
        + " |"
        for k in kernels
    )
    return f"""# gemmforge bundle: {title}

{len(kernels)} shape(s), {unique} kernel(s), {pinned} pinned cuBLASLt algorithm(s), measured on
{gpu}. Per shape the bundle runs its kernel where it was faster than cuBLASLt-autotune's pick
beyond the measured noise (both timed in the same session), else cuBLASLt with the algorithm
that autotuning picked for the shape (`cublaslt_*` entries, used only on the same GPU model and
cuBLASLt version, and re-checked by cuBLASLt at each M), else a kernel that beat torch.matmul.
Shapes not listed fall back to torch.matmul. Each entry serves the range of M listed (between
measured Ms: the measured crossover, else the nearer one on a log scale); another M, dtype,
stride or GPU architecture falls back to torch.matmul.
{checked}
{summary}
## Use
```sh
unzip this.zip && cd {bundle_folder(title)}
pip install nvidia-cutlass               # CUTLASS headers for the build (or set CUTLASS_INCLUDE)
python -m gemmforge_bundle.build         # needs nvcc; builds gemmforge_bundle/lib/*.so once
                                         # (kernels, the cuBLASLt shim, the C++ ops and, with
                                         # Python's headers, their direct calls)
python -m gemmforge_bundle.verify        # re-checks correctness and speed on your GPU
```
```python
import torch, gemmforge_bundle
c = torch.ops.gemmforge.hgemm(a, b)              # a (M,K) @ b (K,N), fp16 CUDA contiguous
y = torch.ops.gemmforge.hgemm_linear(x, w)       # x (...,K) @ w.T, w (N,K) as in nn.Linear
c = gemmforge_bundle.matmul(a, b)                # same, less host time a call
y = gemmforge_bundle.linear(x, w)
```
The ops allocate only their output (and a kernel's workspace) from PyTorch's allocator and never
synchronise: they work under torch.compile and CUDA-graph capture (call each shape once first).

## Kernels
| shape measured | serves M | layout | kernel | speedup (baseline / kernel, same session) |
|---|---|---|---|---|
{rows}

{left_out_lines(left_out)}
`results.json` and `results.csv` hold the numbers and the environment they were measured in.
"""
